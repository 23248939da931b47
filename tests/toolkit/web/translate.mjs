// transformers.js in Node (onnxruntime-node) on an exported folder, with the page's settings: one sentence a line,
// at most the input's length + 50 new tokens. Usage: node translate.mjs FOLDER [greedy|paper [MAX_NEW_TOKENS]]
// < lines.json > results.json. greedy (the default): transformers.js's generate(); paper: Section 6.1's beam search of
// the page's beam.js with the folder's num_beams and length_penalty (MAX_NEW_TOKENS: a lower cap, for tests). Each
// result: { text, ids (the start token first), score (paper only), steps (paper only) }; the seconds spent translating
// (not loading) go to stderr as {"seconds": S}.
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import path from 'node:path';

const [folderArgument, mode = 'greedy', cap] = process.argv.slice(2);
if (!['greedy', 'paper'].includes(mode)) throw new Error(`decoding ${mode}; expected greedy or paper`);
const folder = path.resolve(folderArgument);
const library = pathToFileURL(path.join(folder, 'node_modules/@huggingface/transformers/dist/transformers.node.mjs'));
const { AutoModelForSeq2SeqLM, AutoTokenizer, Tensor, env } = await import(library.href);
// The package's own beam.js, not the folder's: a model pulled from the Hub holds no page files.
const beamModule = new URL('../../../modeling_vaswani/toolkit/web/beam.js', import.meta.url);
const { beamSearch, greedyDecode } = await import(beamModule.href);

env.allowRemoteModels = false;
env.localModelPath = path.dirname(folder);
const name = path.basename(folder);
const tokenizer = await AutoTokenizer.from_pretrained(name, { local_files_only: true });
const model = await AutoModelForSeq2SeqLM.from_pretrained(name, { local_files_only: true, dtype: 'fp32', device: 'cpu' });

const lines = JSON.parse(readFileSync(0, 'utf-8'));
const began = performance.now();
const results = [];
for (const line of lines) {
    const inputs = tokenizer(line);
    if (mode === 'paper') {
        const source = Array.from(inputs.input_ids.data, Number);
        const found = await beamSearch(model, Tensor, source, { maxNewTokens: cap === undefined ? null : Number(cap) });
        results.push({ text: tokenizer.decode(found.ids, { skip_special_tokens: true }), ...found });
    } else {
        const ids = await greedyDecode(model, inputs);
        results.push({ text: tokenizer.decode(ids, { skip_special_tokens: true }), ids });
    }
}
process.stderr.write(`${JSON.stringify({ seconds: (performance.now() - began) / 1000 })}\n`);
process.stdout.write(JSON.stringify(results));
