"""Scores a checkpoint with BLEU: translates a source file with the paper's decoding and compares with references.

    vaswani-evaluate runs/small/averaged                  # the shipped Multi30k test2016, En->De
    vaswani-evaluate MODEL --source newstest2014.en --reference newstest2014.de

Prints sacreBLEU with its signature (the number to report) and tokenized BLEU with compound splitting (the paper's
way, for comparison with its table).
"""

import argparse
import json

from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from ..allocator import keep_freed_memory
from ..data import multi30k_files, read_sentences
from ..translation import bleu, translate


def main(argv=None):
    keep_freed_memory()  # page faults cost a CPU run up to a third of its time: see allocator.py
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="checkpoint folder or Hub id (with its tokenizer)")
    parser.add_argument("--source", help="source sentences (default: Multi30k test2016 English)")
    parser.add_argument("--reference", help="reference translations (default: Multi30k test2016 German)")
    parser.add_argument("--batch_size", type=int, default=64, help="sentences per batch")
    parser.add_argument("--output", help="also write the translations here")
    arguments = parser.parse_args(argv)
    if bool(arguments.source) != bool(arguments.reference):
        parser.error("give --source and --reference together")
    test = multi30k_files("test")
    sources = read_sentences(arguments.source or test["en"])
    references = read_sentences(arguments.reference or test["de"])
    if len(sources) != len(references):
        parser.error(f"{len(sources)} source sentences but {len(references)} references")

    model = AutoModelForSeq2SeqLM.from_pretrained(arguments.model)
    tokenizer = AutoTokenizer.from_pretrained(arguments.model)
    hypotheses = translate(model, tokenizer, sources, batch_size=arguments.batch_size)
    if arguments.output:
        with open(arguments.output, "w", encoding="utf-8") as handle:
            handle.write("".join(f"{line}\n" for line in hypotheses))
    scores = bleu(hypotheses, references)
    print(f"sacreBLEU {scores['sacrebleu']:.2f} ({scores['signature']})")
    print(f"tokenized BLEU {scores['tokenized_bleu']:.2f} ({scores['tokenized_bleu_signature']})")
    print(json.dumps(scores))
