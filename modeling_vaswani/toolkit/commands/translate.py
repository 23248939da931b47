"""Translates a file (or standard input) with a checkpoint, one output line per input line.

vaswani-translate runs/small/averaged --input sentences.en --output sentences.de
echo "A man rides a bike." | vaswani-translate runs/small/averaged
"""

import argparse
import sys

from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from ..allocator import keep_freed_memory
from ..translation import translate


def main(argv=None):
    keep_freed_memory()  # page faults cost a CPU run up to a third of its time: see allocator.py
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="checkpoint folder or Hub id (with its tokenizer)")
    parser.add_argument("--input", help="text file, one sentence a line (default: standard input)")
    parser.add_argument("--output", help="where to write the translations (default: standard output)")
    parser.add_argument("--batch_size", type=int, default=64, help="sentences per batch")
    parser.add_argument("--num_beams", type=int, help="beam size (default: the checkpoint's, 4)")
    parser.add_argument("--no_paper_decoding", action="store_true", help="transformers' own length penalty and limit")
    parser.add_argument("--max_new_tokens", type=int, help="with --no_paper_decoding: the output length limit")
    parser.add_argument("--revision", help="a Hub branch, tag or commit")
    parser.add_argument("--trust_remote_code", action="store_true", help="load the model's code from the checkpoint")
    arguments = parser.parse_args(argv)

    options = {"revision": arguments.revision, "trust_remote_code": arguments.trust_remote_code}
    model = AutoModelForSeq2SeqLM.from_pretrained(arguments.model, **options)
    tokenizer = AutoTokenizer.from_pretrained(arguments.model, **options)
    source = open(arguments.input, encoding="utf-8") if arguments.input else sys.stdin
    with source:
        sentences = [line.rstrip("\n") for line in source]
    generate_kwargs = {k: v for k in ("num_beams", "max_new_tokens") if (v := getattr(arguments, k)) is not None}
    translations = translate(
        model,
        tokenizer,
        sentences,
        batch_size=arguments.batch_size,
        paper_decoding=not arguments.no_paper_decoding,
        **generate_kwargs,
    )
    target = open(arguments.output, "w", encoding="utf-8") if arguments.output else sys.stdout
    with target:
        target.write("".join(f"{line}\n" for line in translations))
