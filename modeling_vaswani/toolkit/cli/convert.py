"""Converts real weights into a Vaswani checkpoint that computes what they compute (toolkit/interop/marian.py,
toolkit/interop/fairseq.py).

vaswani-convert marian Helsinki-NLP/opus-mt-en-de runs/opus-mt-en-de
vaswani-convert marian path/to/marian_folder runs/converted
vaswani-convert fairseq wmt16.en-de.joined-dict.transformer runs/wmt16-en-de
vaswani-convert fairseq model.pt dict.en.txt bpecodes runs/converted

Each kind of checkpoint is a subcommand. `fairseq` takes either a released folder as its tarball unpacks (model.pt,
dict.SRC.txt and dict.TGT.txt with the same lines, bpecodes) or the three files: the checkpoint, the shared
dictionary (dict.txt) and the subword-nmt BPE codes. The output folder (new, empty or its earlier output, replaced
whole) holds the model, its tokenizer and the model's code, and loads as every Vaswani checkpoint does. A checkpoint
that does not fit the paper's network up to the recorded departures is refused, with the setting named, before
anything is written.
"""

import argparse

from ..interop.convert import departures
from ..interop.fairseq import convert_fairseq_checkpoint, find_release_files
from ..interop.marian import convert_marian_checkpoint
from .shell import command


def parse_arguments(argv=None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    kinds = parser.add_subparsers(dest="kind", required=True, metavar="KIND")
    marian = kinds.add_parser("marian", help="a transformers MarianMT checkpoint (MarianMTModel + MarianTokenizer)")
    marian.add_argument("model", help="a MarianMT checkpoint folder or Hub id (Helsinki-NLP/opus-mt-en-de)")
    marian.add_argument(
        "output_dir",
        help="folder to write the Vaswani checkpoint to (new, empty or an earlier conversion)",
    )
    marian.add_argument("--revision", help="with a Hub id: the branch, tag or commit to convert")
    fairseq = kinds.add_parser("fairseq", help="a fairseq Transformer checkpoint with its dictionary and BPE codes")
    fairseq.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="FOLDER OUTPUT_DIR (a released folder: model.pt, dict.*.txt, bpecodes) or "
        "CHECKPOINT.pt DICT.txt BPECODES OUTPUT_DIR; OUTPUT_DIR new, empty or an earlier conversion",
    )
    arguments = parser.parse_args(argv)
    if arguments.kind == "fairseq" and len(arguments.paths) not in (2, 4):
        fairseq.error(
            f"got {len(arguments.paths)} paths; expected FOLDER OUTPUT_DIR or CHECKPOINT DICT BPECODES OUTPUT_DIR"
        )
    return parser, arguments


def convert(arguments: argparse.Namespace):
    if arguments.kind == "marian":
        return arguments.model, convert_marian_checkpoint(arguments.model, arguments.output_dir, arguments.revision)
    *inputs, output_dir = arguments.paths
    files = find_release_files(inputs[0]) if len(inputs) == 1 else inputs
    return inputs[0], convert_fairseq_checkpoint(*files, output_dir)


@command("vaswani-convert")
def main(argv=None) -> None:
    _, arguments = parse_arguments(argv)
    source, converted = convert(arguments)
    output_dir = arguments.output_dir if arguments.kind == "marian" else arguments.paths[-1]
    changed = ", ".join(f"{name}={value!r}" for name, value in departures(converted.config).items())
    print(f"converted {source} into {output_dir}")
    print(f"departures from the paper, as configuration options: {changed or 'none'}")


if __name__ == "__main__":  # python -m modeling_vaswani.toolkit.cli.convert, as under accelerate launch -m
    main()
