"""The training toolkit: Section 5 of the paper on transformers' Seq2SeqTrainer, and what surrounds a training run.

Data and the shared vocabulary (`data`, `tokenizer`), token-budget batches (`batching`), the Trainer (`training`),
checkpoint averaging (`averaging`), the whole job (`recipe`), translation and BLEU (`translation`, `metrics`), pictures
(`plotting`), Hub publishing (`hub`), and the console commands over them (`commands`). None of it travels with a
checkpoint, and nothing here is imported by the model: import the module you use.
"""
