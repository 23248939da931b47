// transformers.js in Node (onnxruntime-node) on an exported folder, with the page's settings: one sentence a line,
// greedy, at most the input's length + 50 new tokens. Usage: node translate.mjs FOLDER < lines.json > results.json
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import path from 'node:path';

const folder = path.resolve(process.argv[2]);
const library = pathToFileURL(path.join(folder, 'node_modules/@huggingface/transformers/dist/transformers.node.mjs'));
const { AutoModelForSeq2SeqLM, AutoTokenizer, env } = await import(library.href);

env.allowRemoteModels = false;
env.localModelPath = path.dirname(folder);
const name = path.basename(folder);
const tokenizer = await AutoTokenizer.from_pretrained(name, { local_files_only: true });
const model = await AutoModelForSeq2SeqLM.from_pretrained(name, { local_files_only: true, dtype: 'fp32', device: 'cpu' });

const results = [];
for (const line of JSON.parse(readFileSync(0, 'utf-8'))) {
    const inputs = tokenizer(line);
    const length = inputs.input_ids.dims.at(-1);
    const output = await model.generate({ ...inputs, num_beams: 1, do_sample: false, max_new_tokens: length + 50 });
    const ids = Array.from(output.tolist()[0], Number);
    results.push({ text: tokenizer.decode(ids, { skip_special_tokens: true }), ids });
}
process.stdout.write(JSON.stringify(results));
