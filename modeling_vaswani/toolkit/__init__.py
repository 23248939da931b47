"""The toolkit: what surrounds the model when people train, translate, convert and share it. Never imported by the
model (the payload above it), and none of it travels with a checkpoint. Its rooms, from the bottom up:

- `checkpoints`: the one home of finding, validating, opening and loading a checkpoint folder;
- `runtime`: process settings the commands and the Trainer apply for their own processes;
- `data`: corpora, the shared BPE vocabulary, token-budget batches, and the shipped Multi30k;
- `evaluation`: translating many sentences, BLEU, plots;
- `training`: the Trainer with Section 5's recipe, presets, checkpoint averaging, the train and ablate jobs;
- `serving`: running a CTranslate2 export, choosing an engine;
- `interop`: Marian and fairseq checkpoints in, CTranslate2 out;
- `hub`: the model card and the push;
- `cli`: the `vaswani-*` commands, thin front ends that nothing imports.

The import rules between them are contracts in pyproject.toml, checked by CI (docs/architecture.md).
"""
