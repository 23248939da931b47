"""Exports a checkpoint to CTranslate2 (toolkit/interop/ctranslate2.py), the runtime that serves translation on CPUs.

vaswani-export-ctranslate2 runs/small/averaged runs/small/ct2
vaswani-export-ctranslate2 runs/small/averaged runs/small/ct2-int8 --quantization int8
vaswani-translate runs/small/ct2 --input my.en --output my.de        # detected as an export

The output folder (new, empty or its earlier output, replaced whole) holds CTranslate2's model.bin, config.json and
shared_vocabulary.json, and the tokenizer and generation settings, so that it translates on its own. float32
computes what the checkpoint computes; the int8 kinds store the weights in 8 bits (about a quarter of the size) and
run faster on CPUs. Needs the `ctranslate2` extra: pip install modeling_vaswani[ctranslate2].
"""

import argparse

from .shell import command


def parse_arguments(argv=None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="checkpoint folder or Hub id (with its tokenizer)")
    parser.add_argument(
        "output_dir",
        help="folder to write the CTranslate2 model to (new, empty or an earlier export)",
    )
    parser.add_argument(  # checked by the export, which needs CTranslate2 (not imported before it is needed)
        "--quantization",
        default="float32",
        help="weights as float32 (the default, exact), int8, int8_float32, int8_bfloat16, float16 or bfloat16",
    )
    parser.add_argument("--revision", help="with a Hub id: the branch, tag or commit to export")
    return parser, parser.parse_args(argv)


@command("vaswani-export-ctranslate2")
def main(argv=None) -> None:
    _, arguments = parse_arguments(argv)
    from ..interop.ctranslate2 import export_ctranslate2  # CTranslate2 is optional: imported only here

    export_ctranslate2(arguments.model, arguments.output_dir, arguments.quantization, arguments.revision)
    print(f"exported {arguments.model} ({arguments.quantization}) into {arguments.output_dir}")


if __name__ == "__main__":  # python -m modeling_vaswani.toolkit.cli.export_ctranslate2, as under accelerate launch -m
    main()
