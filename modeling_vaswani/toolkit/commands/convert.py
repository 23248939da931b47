"""Converts real weights into a Vaswani checkpoint that computes what they compute (toolkit/convert_marian.py).

vaswani-convert marian Helsinki-NLP/opus-mt-en-de runs/opus-mt-en-de
vaswani-convert marian path/to/marian_folder runs/converted

Each kind of checkpoint is a subcommand. The output folder (new or empty) holds the model, its tokenizer and the
model's code, and loads as every Vaswani checkpoint does. A checkpoint that does not fit the paper's network up to the
recorded departures is refused, with the setting named, before anything is written.
"""

import argparse

from ..convert_marian import convert_marian_checkpoint, departures


def parse_arguments(argv=None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    kinds = parser.add_subparsers(dest="kind", required=True, metavar="KIND")
    marian = kinds.add_parser("marian", help="a transformers MarianMT checkpoint (MarianMTModel + MarianTokenizer)")
    marian.add_argument("model", help="a MarianMT checkpoint folder or Hub id (Helsinki-NLP/opus-mt-en-de)")
    marian.add_argument("output_dir", help="folder to write the Vaswani checkpoint to (new or empty)")
    marian.add_argument("--revision", help="with a Hub id: the branch, tag or commit to convert")
    return parser, parser.parse_args(argv)


def main(argv=None) -> None:
    parser, arguments = parse_arguments(argv)
    try:
        converted = convert_marian_checkpoint(arguments.model, arguments.output_dir, arguments.revision)
    except (ValueError, OSError) as error:
        parser.error(str(error))
    changed = ", ".join(f"{name}={value!r}" for name, value in departures(converted.config).items())
    print(f"converted {arguments.model} into {arguments.output_dir}")
    print(f"departures from the paper, as configuration options: {changed or 'none'}")
