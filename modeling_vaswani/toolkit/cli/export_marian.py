"""Exports a checkpoint as a stock MarianMTModel folder (toolkit/interop/marian_export.py): plain transformers loads
it, without remote code and without this package.

vaswani-export-marian runs/small/averaged runs/small/marian
python -c "from transformers import AutoModelForSeq2SeqLM; AutoModelForSeq2SeqLM.from_pretrained('runs/small/marian')"

The output folder (new, empty or its earlier output, replaced whole) holds the MarianMTModel's config.json,
model.safetensors and generation_config.json (beam 4, alpha 0.6) and the tokenizer. MarianMT computes this network
up to its LayerNorm epsilon, fixed at 1e-5; what it cannot hold (learned positions, untied embeddings, d_k or d_v
other than d_model / h, a LayerNorm epsilon above 1e-5) is refused, naming the setting, before any work.
"""

import argparse

from .shell import command


def parse_arguments(argv=None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="checkpoint folder or Hub id (with its tokenizer)")
    parser.add_argument("output_dir", help="folder to write the MarianMT model to (new, empty or an earlier export)")
    parser.add_argument("--revision", help="with a Hub id: the branch, tag or commit to export")
    return parser, parser.parse_args(argv)


@command("vaswani-export-marian")
def main(argv=None) -> None:
    _, arguments = parse_arguments(argv)
    from ..interop.marian_export import export_marian  # transformers loads only once the arguments are good

    export_marian(arguments.model, arguments.output_dir, arguments.revision)
    print(f"exported {arguments.model} as a MarianMTModel into {arguments.output_dir}")


if __name__ == "__main__":  # python -m modeling_vaswani.toolkit.cli.export_marian, as the tests run commands
    main()
