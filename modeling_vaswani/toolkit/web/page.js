// The page's logic: check the model's files, load them with transformers.js from this folder, translate with
// Section 6.1's beam search (beam.js; the folder's num_beams and length_penalty), or greedily on request.
import {
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    Tensor,
    env,
} from './node_modules/@huggingface/transformers/dist/transformers.min.js';
import { beamSearch, greedyDecode, paperSettings } from './beam.js';

const here = new URL('.', document.baseURI);
const status = document.getElementById('status');
const bar = document.getElementById('progress');
const button = document.getElementById('translate');

// Nothing is fetched from anywhere but this folder: models, and onnxruntime-web's WebAssembly (whose default is a CDN).
env.allowRemoteModels = false;
env.allowLocalModels = true;
env.localModelPath = here.pathname;
const wasm = new URL('node_modules/onnxruntime-web/dist/ort-wasm-simd-threaded.asyncify', here).href;
env.backends.onnx.wasm.wasmPaths = { mjs: `${wasm}.mjs`, wasm: `${wasm}.wasm` };

function say(text, { error = false } = {}) {
    status.textContent = text;
    status.classList.toggle('error', error);
}

function megabytes(bytes) {
    return `${(bytes / 1e6).toFixed(1)} MB`;
}

// Each model file as the export listed it (model_files.json): a missing or truncated one is named before loading.
async function checkFiles() {
    const listing = await fetch(new URL('model_files.json', here));
    if (!listing.ok) throw new Error(`model_files.json is missing (HTTP ${listing.status}): export the page again`);
    const { files } = await listing.json();
    for (const [name, size] of Object.entries(files)) {
        const answer = await fetch(new URL(name, here), { method: 'HEAD' });
        if (!answer.ok) throw new Error(`the model file ${name} is missing (HTTP ${answer.status})`);
        const served = Number(answer.headers.get('content-length'));
        if (served !== size) {
            throw new Error(`the model file ${name} is damaged: ${served} bytes where the export wrote ${size}`);
        }
    }
    return files;
}

function progressOf(files) {
    const total = Object.values(files).reduce((sum, size) => sum + size, 0);
    const loaded = {};
    return (event) => {
        if (event.status !== 'progress' && event.status !== 'done') return;
        loaded[event.file] = event.status === 'done' ? files[event.file] ?? event.total : event.loaded;
        const sum = Object.values(loaded).reduce((a, b) => a + (b || 0), 0);
        bar.value = total ? Math.min(sum / total, 1) : 0;
        say(`Loading the model: ${event.file}, ${megabytes(sum)} of ${megabytes(total)}`);
    };
}

async function load() {
    say('Checking the model files…');
    const files = await checkFiles();
    const total = Object.values(files).reduce((sum, size) => sum + size, 0);
    say(`Loading the model: ${megabytes(total)} in ${Object.keys(files).length} files`);
    const progress_callback = progressOf(files);
    const options = { local_files_only: true, progress_callback };
    const tokenizer = await AutoTokenizer.from_pretrained('.', options);
    let model;
    try {
        model = await AutoModelForSeq2SeqLM.from_pretrained('.', { ...options, dtype: 'fp32', device: 'wasm' });
    } catch (error) {
        throw new Error(`a model file could not be read as a model (damaged?): ${error.message ?? error}`);
    }
    return { tokenizer, model };
}

// What the status line says of a decoding.
function decodingName({ numBeams, lengthPenalty }) {
    return numBeams > 1
        ? `Section 6.1's beam search (beam ${numBeams}, length penalty ${lengthPenalty})`
        : 'greedy decoding';
}

// One sentence a line, one line after another (a sentence's search does not depend on the others); a blank line stays
// blank. numBeams > 1: beam.js, Section 6.1's search as the Python engines run it (transformers.js 4.3.2's generate()
// keeps one hypothesis a row whatever num_beams says); numBeams 1: transformers.js's own greedy generate().
async function translate({ tokenizer, model, paper }, lines, { numBeams = paper.numBeams } = {}) {
    const decoding = { ...paper, numBeams };
    const results = [];
    for (const line of lines) {
        if (!line.trim()) {
            results.push({ text: '', ids: [] });
            continue;
        }
        const inputs = tokenizer(line);
        let ids;
        let score;
        if (numBeams > 1) {
            const source = Array.from(inputs.input_ids.data, Number);
            ({ ids, score } = await beamSearch(model, Tensor, source, decoding));
        } else {
            ids = await greedyDecode(model, inputs);
        }
        const result = { text: tokenizer.decode(ids, { skip_special_tokens: true }), ids };
        if (score !== undefined) result.score = score;
        results.push(result);
    }
    return { results, decoding: decodingName(decoding) };
}

async function main() {
    let loaded;
    try {
        loaded = await load();
        loaded.paper = paperSettings(loaded.model);
    } catch (error) {
        say(`The model cannot be used: ${error.message ?? error}`, { error: true });
        window.vaswaniPage = { error: String(error.message ?? error) };
        return;
    }
    bar.value = 1;
    const choice = document.getElementById('decoding');
    choice.querySelector('option[value="paper"]').textContent = decodingName(loaded.paper);
    const chosen = () => (choice.value === 'greedy' ? { numBeams: 1 } : {});
    const ready = () => say(`Ready: the model runs in this browser, with ${decodingName({ ...loaded.paper, ...chosen() })}.`);
    ready();
    choice.addEventListener('change', ready);
    window.vaswaniPage = {
        translate: async (lines, options) => (await translate(loaded, lines, options)).results,
        decoding: (options) => decodingName({ ...loaded.paper, ...options }),
    };
    button.disabled = false;
    choice.disabled = false;
    button.addEventListener('click', async () => {
        button.disabled = choice.disabled = true;
        say(`Translating with ${decodingName({ ...loaded.paper, ...chosen() })}…`);
        const lines = document.getElementById('source').value.split('\n');
        const output = document.getElementById('output');
        const began = performance.now();
        try {
            const { results, decoding } = await translate(loaded, lines, chosen());
            output.replaceChildren(
                ...results.map(({ text }) => {
                    const item = document.createElement('li');
                    item.textContent = text;
                    return item;
                }),
            );
            const seconds = ((performance.now() - began) / 1000).toFixed(1);
            say(`Ready: the model runs in this browser; translated with ${decoding} in ${seconds} s.`);
        } catch (error) {
            say(`The translation failed: ${error.message ?? error}`, { error: true });
        }
        button.disabled = choice.disabled = false;
    });
}

main();
