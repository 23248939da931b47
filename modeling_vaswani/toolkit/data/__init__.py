"""Corpora (Multi30k shipped in multi30k/, text, jsonl/tsv/parquet tables, Hub datasets), the shared BPE vocabulary
(Section 5.1) and batches by token budget."""
