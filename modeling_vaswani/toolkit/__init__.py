"""The toolkit: what surrounds the model when people train, translate, convert and share it. Never imported by the
model (the payload above it), and none of it travels with a checkpoint. Its rooms, from the bottom up:

- `texts`: the one reader of the text a user writes, and the one writer of line output;
- `values`: how every room refuses a value: the value shown, and the one whole-number check;
- `outputs`: the one atomic writer, and the checks that an output is the command's own;
- `checkpoints`: the one home of finding, validating, opening and loading a checkpoint folder;
- `runtime`: process settings the commands and the Trainer apply for their own processes;
- `threads`: how many threads torch runs a command's work on, the user's choice or the faster measured;
- `data`: corpora, the shared BPE vocabulary, token-budget batches, sentences and markup, and the shipped Multi30k;
- `evaluation`: BLEU, chrF and TER, and plots;
- `translation`: one request and its check, the engines, translating sentences, documents and terminology;
- `serving`: vaswani-serve, the HTTP API over a translation service;
- `training`: the Trainer with Section 5's recipe, presets, checkpoint averaging, the time budget's plan, the train
  and ablate jobs;
- `interop`: Marian and fairseq checkpoints in; CTranslate2, stock MarianMT and ONNX out;
- `web`: the static page that translates in the visitor's browser from an ONNX export (transformers.js);
- `hub`: the model card and the push;
- `cli`: the `vaswani-*` commands, thin front ends that nothing imports.

The import rules between them are contracts in pyproject.toml, checked by CI (docs/architecture.md).
"""
