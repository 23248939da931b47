"""Train the shared source+target BPE vocabulary (Section 5.1) and save it for AutoTokenizer.

Example, in a checkout, on the shipped Multi30k's training text:

    vaswani-train-tokenizer --files modeling_vaswani/toolkit/data/multi30k/train.en.gz \\
        modeling_vaswani/toolkit/data/multi30k/train.de.gz --vocab_size 8000 --output_dir runs/tokenizer

Refused before training: a file that is missing, a vocabulary size below the 260 special and byte tokens, a
--min_frequency below 1, and an --output_dir that is a file. A file that is not UTF-8 is named with its line.
"""

import argparse

from ..data.tokenizer import train_tokenizer
from .shell import command


@command("vaswani-train-tokenizer")
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", nargs="+", required=True, help="text files, one sentence per line (.gz allowed)")
    parser.add_argument("--vocab_size", type=int, default=37000, help="BPE vocabulary size (paper: 37000 for EN-DE)")
    parser.add_argument("--output_dir", required=True, help="folder to save the tokenizer to")
    parser.add_argument("--min_frequency", type=int, default=2, help="occurrences of a pair before it is merged")
    args = parser.parse_args(argv)
    tokenizer = train_tokenizer(args.files, args.vocab_size, args.output_dir, args.min_frequency)
    print(f"saved tokenizer to {args.output_dir} (vocabulary size {len(tokenizer)})")


if __name__ == "__main__":  # python -m modeling_vaswani.toolkit.cli.train_tokenizer, as under accelerate launch -m
    main()
