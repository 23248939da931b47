"""The speed benchmark's library (its command: benchmarks/benchmark.py): this model next to transformers'
MarianMTModel and CTranslate2, on the same weights and shapes.

Three implementations of one network (Table 3's base model by default, or its big one; random weights):
- `vaswani`: VaswaniForConditionalGeneration;
- `marian`: transformers' MarianMTModel holding the same weights, made by the package's MarianMT export (the Marian
  converter's inverse, vaswani-export-marian's `interop.marian_export.to_marian`: ReLU, post-LN, static sinusoids,
  scaled and tied embeddings).
  Marian's attention projections always have biases: they are zero here. It computes what ours computes but for
  LayerNorm's epsilon, Marian's fixed 1e-5 against the paper configuration's 1e-6, which changes no work done;
- `ctranslate2`: the Marian copy converted by CTranslate2's transformers converter (if ctranslate2 is installed), and
  `vaswani-ct2`, `vaswani-ct2-int8`: our own export (vaswani-export-ctranslate2's converter) in float32 and int8.

Phases: `training` (forward + backward + Adam step), `greedy` and `beam` generation at batch 32 and `latency` (one
sentence, greedy), the three of them the per-step cost at fixed length: exactly 32 new tokens per sentence. Each
implementation and phase runs in a process of its own (the command started again with `--worker`), so that one
cannot warm caches or fragment memory for another; each reports the median of several timed repetitions after
warm-up calls, and the peak memory the phase added. A matrix-multiply loop in the same run gives the machine's
ceiling. The whole list of processes runs in rounds (three by default), and the ratios are medians of the ratios
within each round, so that a shared machine's drifting load compares like with like.

The modules, by job: `models` (shapes, the models and their conversions, inputs), `measure` (devices, timing, peak
memory, the ceiling, FLOPs), `phases` (what each worker process runs), `runner` (the processes and rounds), `report`
(the machine, the results combined, the table).
"""
