"""Corpora and what the model reads: the loaders (`corpora`: Multi30k shipped in multi30k/, parallel text, tables,
Hub and disk datasets, and the content-keyed cache), the one check of a pair (`pairs`), a reader a text format
(`tables`), Parquet, Hub and disk datasets checked by column (`arrow`), tokenized pairs (`tokenization`), the shared
BPE vocabulary of Section 5.1 (`tokenizer`), batches by token budget (`batching`), lines split into sentences and
joined back (`sentences`), and HTML and inline tags read whole and put back (`markup`)."""
