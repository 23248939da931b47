// The page's logic: check the model's files, load them with transformers.js from this folder, translate greedily.
import {
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    env,
} from './node_modules/@huggingface/transformers/dist/transformers.min.js';

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

// Section 6.1's limit on a translation's length, in tokens beyond the input's.
const EXTRA_TOKENS = 50;

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

// One sentence a line, each decoded greedily (transformers.js has no beam search); a blank line stays blank.
async function translate({ tokenizer, model }, lines) {
    const results = [];
    for (const line of lines) {
        if (!line.trim()) {
            results.push({ text: '', ids: [] });
            continue;
        }
        const inputs = tokenizer(line);
        const length = inputs.input_ids.dims.at(-1);
        const output = await model.generate({
            ...inputs,
            num_beams: 1,
            do_sample: false,
            max_new_tokens: length + EXTRA_TOKENS,
        });
        const ids = Array.from(output.tolist()[0], Number);
        results.push({ text: tokenizer.decode(ids, { skip_special_tokens: true }), ids });
    }
    return results;
}

async function main() {
    let loaded;
    try {
        loaded = await load();
    } catch (error) {
        say(`The model cannot be used: ${error.message ?? error}`, { error: true });
        window.vaswaniPage = { error: String(error.message ?? error) };
        return;
    }
    bar.value = 1;
    say('Ready: the model runs in this browser.');
    window.vaswaniPage = { translate: (lines) => translate(loaded, lines) };
    button.disabled = false;
    button.addEventListener('click', async () => {
        button.disabled = true;
        say('Translating…');
        const lines = document.getElementById('source').value.split('\n');
        const output = document.getElementById('output');
        output.replaceChildren(
            ...(await translate(loaded, lines)).map(({ text }) => {
                const item = document.createElement('li');
                item.textContent = text;
                return item;
            }),
        );
        say('Ready: the model runs in this browser.');
        button.disabled = false;
    });
}

main();
