// Section 6.1's beam search ("beam search with a beam size of 4 and length penalty alpha = 0.6 ... maximum output
// length ... input length + 50, but terminate early when possible") for an export of vaswani-export-onnx, driven step
// by step through the ONNX graphs that transformers.js has loaded. An ES module for the page (page.js) and for Node
// (tests/toolkit/web/translate.mjs) alike: it imports nothing, and is given the library's Tensor class.
//
// Written by hand because no library has it for transformers.js: 4.3.2's generate() has a BeamSearchSampler, but its
// loop (dist/transformers.js, `async generate`) keeps the first token the sampler returns for each batch row
// (`for (const [newTokenId, logProb] of sampledTokens) { ... break; }`), so no beams are kept or ranked and num_beams
// > 1 decodes greedily; there is no length penalty either.
//
// It is a transcription of the payload's search (modeling_vaswani/search_vaswani.py `beam_search` with its `TopK`
// selection, as the Python onnxruntime engine, toolkit/translation/onnxruntime.py, runs it), so that it picks the
// same hypotheses:
// - k = num_beams live hypotheses; the first step continues the first of k copies of the start token (the others
//   score EXCLUDED); each step proposes the 2k likeliest continuations over all k, ranked by log P (sums of
//   log-softmax);
// - a continuation ends at the end-of-sentence token or at the sentence's length limit, source length + 50 tokens
//   (`max_output_length`; the source length counts its </s>, the limit not the decoder's start token);
// - the k likeliest continuations that do not end live on (an ended one scores log P + EXCLUDED, so it is kept only
//   where fewer than k did not end); those of the first k candidates that end compete with the k best finished
//   hypotheses by log P / lp(Y), GNMT's lp(Y) = ((5 + |Y|) / 6)^alpha, |Y| counting the end token;
// - the search is over (early_stopping False) when its best live hypothesis, at the longest length its sentence
//   allows, cannot beat the k-th best finished one (tensor2tensor's bound), or already the best finished one (the
//   one hypothesis returned is final then: the payload's rule for n = 1 of k), or when every continuation ended (the
//   limit); the best finished hypothesis is the translation.
// Arithmetic: the scores are float32, as PyTorch's (Math.fround after each operation the payload does in float32), so
// that near ties fall as they fall there; ties go to the lower index, where torch.topk's order is unspecified.
//
// Why the sessions and not transformers.js's model.forward: the search must move the decoder's self-attention cache
// to the chosen beams at each step and keep the encoder-decoder attention's keys and values of the first step, which
// forward's DynamicCache does not expose for reordering. The feeds are those of the Python engine's OnnxSteps: the
// encoder (onnx/encoder_model.onnx: input_ids, attention_mask) once; the merged decoder
// (onnx/decoder_model_merged.onnx) once a step, with input_ids (the start token, then each hypothesis' last token),
// encoder_attention_mask and encoder_hidden_states repeated for the k hypotheses, use_cache_branch (false at the first
// step, whose past keys and values are empty) and past_key_values.N.{decoder,encoder}.{key,value}. The encoder
// presents are taken from the first step only: in the cached branch the export returns them empty (optimum's
// convention, as transformers.js's getPastKeyValues also keeps the first ones).
//
// One sentence at a time: the page translates one line after another, and a sentence's search does not depend on
// the others (in the payload a sentence whose search is over leaves the batch).

export const EXCLUDED = -1.0e9; // search_vaswani.EXCLUDED: a hypothesis that may not be chosen
export const OUTPUT_MARGIN = 50; // Section 6.1: "maximum output length to input length + 50"

const f32 = Math.fround;

/** GNMT's length penalty (Section 6.1, Wu et al. 2016): lp(Y) = ((5 + |Y|) / 6)^alpha. */
export function gnmtLengthPenalty(length, alpha) {
    return ((5 + length) / 6) ** alpha;
}

/** The tokens a sentence of `sourceLength` tokens may generate: source + 50, lowered to `maxNewTokens` if given. */
export function maxOutputLength(sourceLength, maxNewTokens = null) {
    const room = sourceLength + OUTPUT_MARGIN;
    return maxNewTokens == null ? room : Math.min(room, maxNewTokens);
}

// The log-softmax of one row of float32 logits, as PyTorch computes it in float32: x - max - log(sum(exp(x - max))).
function logSoftmax(logits, offset, size) {
    let max = -Infinity;
    for (let i = 0; i < size; i++) max = Math.max(max, logits[offset + i]);
    let sum = 0;
    for (let i = 0; i < size; i++) sum += Math.exp(f32(logits[offset + i] - max));
    const logSum = f32(Math.log(sum));
    const out = new Float32Array(size);
    for (let i = 0; i < size; i++) out[i] = f32(logits[offset + i] - max) - logSum;
    return out;
}

// The indices of the `count` largest of `values`, largest first; of equal values the lower index first.
function topIndices(values, count) {
    const best = [];
    for (let i = 0; i < values.length; i++) {
        const value = values[i];
        if (best.length === count && value <= values[best[count - 1]]) continue;
        let at = best.length;
        while (at > 0 && values[best[at - 1]] < value) at--;
        best.splice(at, 0, i);
        if (best.length > count) best.pop();
    }
    return best;
}

function settingsOf(model) {
    const config = model.config;
    const generation = model.generation_config ?? {};
    const heads = config.decoder_attention_heads;
    if (!Number.isInteger(heads) || config.d_model % heads !== 0) {
        throw new Error(
            `config.json: d_model ${config.d_model} with decoder_attention_heads ${heads}; expected d_model divisible by ` +
                'the heads (an export of vaswani-export-onnx)',
        );
    }
    return {
        start: generation.decoder_start_token_id ?? config.decoder_start_token_id,
        end: generation.eos_token_id ?? config.eos_token_id,
        layers: config.decoder_layers,
        heads,
        width: config.d_model / heads,
        maxPositions: config.max_position_embeddings,
        numBeams: generation.num_beams ?? 1,
        lengthPenalty: generation.length_penalty ?? 1.0,
    };
}

/** Greedy decoding by transformers.js's own generate(), at most Section 6.1's source + 50 new tokens: the page's
 * other choice, and Node's. `inputs`: the tokenizer's output for one sentence. Returns its output ids. */
export async function greedyDecode(model, inputs) {
    const output = await model.generate({
        ...inputs,
        num_beams: 1,
        do_sample: false,
        max_new_tokens: maxOutputLength(inputs.input_ids.dims.at(-1)),
    });
    return Array.from(output.tolist()[0], Number);
}

/** The search's settings as the model folder's generation_config.json gives them: { numBeams, lengthPenalty }. */
export function paperSettings(model) {
    const { numBeams, lengthPenalty } = settingsOf(model);
    return { numBeams, lengthPenalty };
}

// Rows `rows` of a [n, ...] float32 tensor's data, `size` numbers a row.
function takeRows(data, size, rows) {
    const out = new Float32Array(rows.length * size);
    rows.forEach((row, index) => out.set(data.subarray(row * size, (row + 1) * size), index * size));
    return out;
}

/**
 * Section 6.1's beam search on one sentence.
 * model: a transformers.js AutoModelForSeq2SeqLM of a vaswani-export-onnx folder (its `sessions`, config and
 * generation config); Tensor: transformers.js's Tensor class; sourceIds: the source's token ids (its </s> included).
 * Options: numBeams and lengthPenalty (alpha; defaults: the folder's generation_config.json), maxNewTokens (a lower
 * cap than source + 50). Returns { ids: the start token, then the translation's tokens (its </s> included where it
 * ended so), score: log P(Y|X) / lp(Y), steps: decoder runs }.
 */
export async function beamSearch(model, Tensor, sourceIds, options = {}) {
    const settings = settingsOf(model);
    const k = options.numBeams ?? settings.numBeams;
    const alpha = options.lengthPenalty ?? settings.lengthPenalty;
    if (!Number.isInteger(k) || k < 1) throw new Error(`numBeams ${k}; expected a whole number of 1 or more`);
    if (!(alpha >= 0)) throw new Error(`lengthPenalty ${alpha}; expected alpha >= 0 (Section 6.1 uses 0.6)`);
    const sourceLength = sourceIds.length;
    if (sourceLength < 1 || sourceLength > settings.maxPositions) {
        throw new Error(
            `a source of ${sourceLength} tokens; expected 1 to ${settings.maxPositions} ` +
                '(max_position_embeddings; the tokenizer adds </s>)',
        );
    }
    const encoder = model.sessions.model;
    const decoder = model.sessions.decoder_model_merged;
    if (!encoder || !decoder) {
        throw new Error(
            `the model's sessions are ${Object.keys(model.sessions).join(', ')}; expected model (the encoder) and ` +
                'decoder_model_merged, as transformers.js loads an export of vaswani-export-onnx',
        );
    }
    const tensor = (type, data, dims) => new Tensor(type, data, dims).ort_tensor;
    const int64 = (values) => BigInt64Array.from(values, (value) => BigInt(value));

    const source = tensor('int64', int64(sourceIds), [1, sourceLength]);
    const mask = tensor('int64', int64(sourceIds.map(() => 1)), [1, sourceLength]);
    const encoded = await encoder.run({ input_ids: source, attention_mask: mask });
    const states = encoded[encoder.outputNames[0]];
    const hidden = states.dims.at(-1);
    // One row a hypothesis: the sentence's encoder output and mask repeated k times, once for the whole search.
    const repeated = new Float32Array(k * sourceLength * hidden);
    for (let row = 0; row < k; row++) repeated.set(states.data, row * sourceLength * hidden);
    const encoderFeeds = {
        encoder_hidden_states: tensor('float32', repeated, [k, sourceLength, hidden]),
        encoder_attention_mask: tensor('int64', int64(Array(k * sourceLength).fill(1)), [k, sourceLength]),
    };
    const { layers, heads, width, start, end } = settings;
    const pastNames = [];
    for (let layer = 0; layer < layers; layer++) {
        for (const part of ['decoder', 'encoder']) {
            for (const kind of ['key', 'value']) pastNames.push(`past_key_values.${layer}.${part}.${kind}`);
        }
    }
    let past = null; // name -> ort tensor

    // Section 6.1's limit, as a decoder length (the start token counted), and the best lp a live hypothesis can reach.
    const limit = 1 + maxOutputLength(sourceLength, options.maxNewTokens ?? null);
    const bestReachablePenalty = f32(f32(f32(5 + (limit - 1)) / 6) ** alpha);
    const width2 = 2 * k; // TopK.of: 2k candidates (one end-of-sentence id), enough for k live ones if k end

    let running = Array.from({ length: k }, () => [start]);
    let runningScores = Float32Array.from({ length: k }, (_, beam) => (beam === 0 ? 0 : EXCLUDED));
    let finished = Array.from({ length: k }, () => ({ ids: [start], score: EXCLUDED, isFinished: false }));
    let canImprove = true;
    let steps = 0;
    for (let length = 1; ; length++) {
        const first = past === null;
        const feeds = {
            ...encoderFeeds,
            use_cache_branch: tensor('bool', [!first], [1]),
            input_ids: tensor('int64', int64(running.map((ids) => ids.at(-1))), [k, 1]),
        };
        for (const name of pastNames) {
            feeds[name] = first ? tensor('float32', new Float32Array(0), [k, heads, 0, width]) : past[name];
        }
        for (const name of decoder.inputNames) {
            if (!(name in feeds)) throw new Error(`onnx/decoder_model_merged.onnx asks for ${name}; expected ${Object.keys(feeds)}`);
        }
        const outputs = await decoder.run(Object.fromEntries(decoder.inputNames.map((name) => [name, feeds[name]])));
        steps++;
        const logits = outputs.logits;
        const vocab = logits.dims.at(-1);
        const positions = logits.dims.at(-2);

        // The candidates: the 2k likeliest continuations, log P of the hypothesis plus the token's log-softmax.
        const totals = new Float32Array(k * vocab);
        for (let beam = 0; beam < k; beam++) {
            const logProbs = logSoftmax(logits.data, (beam * positions + positions - 1) * vocab, vocab);
            for (let token = 0; token < vocab; token++) totals[beam * vocab + token] = logProbs[token] + runningScores[beam];
        }
        const candidates = topIndices(totals, width2).map((flat) => ({
            score: totals[flat],
            beam: Math.floor(flat / vocab),
            token: flat % vocab,
        }));
        const ends = candidates.map(({ token }) => token === end || length + 1 >= limit);
        const live = Float32Array.from(candidates, ({ score }, j) => (ends[j] ? score + EXCLUDED : score));
        const keep = topIndices(live, k);
        const extended = candidates.map(({ beam, token }) => [...running[beam], token]);
        running = keep.map((j) => extended[j]);
        runningScores = Float32Array.from(keep, (j) => live[j]);

        // Those of the first k candidates that end compete, by log P / lp(Y), with the k best finished ones.
        const penalty = f32(gnmtLengthPenalty(length, alpha)); // |Y|: the tokens after the start, the end one counted
        const finishNow = ends.map((ends, j) => ends && j < k);
        const finishScores = Float32Array.from(candidates, ({ score }, j) => {
            let value = f32(score / penalty);
            if (!canImprove) value = f32(value + EXCLUDED);
            return finishNow[j] ? value : f32(value + EXCLUDED);
        });
        const pool = [
            ...finished,
            ...candidates.map((_, j) => ({ ids: extended[j], score: finishScores[j], isFinished: finishNow[j] })),
        ];
        finished = topIndices(Float32Array.from(pool, ({ score }) => score), k).map((index) => pool[index]);

        // The caches follow the chosen beams: the self-attention's from this step, the encoder-decoder's from the first.
        const rows = keep.map((j) => candidates[j].beam);
        const next = {};
        for (const name of pastNames) {
            const present = outputs[name.replace('past_key_values', 'present')];
            if (name.includes('.encoder.')) {
                next[name] = first ? present : past[name]; // the same for every row of the sentence
            } else {
                const size = present.dims.slice(1).reduce((a, b) => a * b, 1);
                next[name] = tensor('float32', takeRows(present.data, size, rows), present.dims);
            }
        }
        past = next;

        // Over when no live hypothesis can beat the k-th best finished one, nor the best (the translation is final),
        // or every continuation ended.
        const bestReachable = f32(runningScores[0] / bestReachablePenalty);
        const lowest = Math.min(...finished.map(({ score }) => score));
        const worst = finished.map(({ isFinished }) => (isFinished ? lowest : EXCLUDED));
        canImprove = canImprove && worst.some((value) => bestReachable > value);
        const returnedFinal = finished[0].isFinished && bestReachable <= finished[0].score;
        if (!canImprove || returnedFinal || ends.every(Boolean)) {
            return { ids: finished[0].ids, score: finished[0].score, steps };
        }
    }
}
