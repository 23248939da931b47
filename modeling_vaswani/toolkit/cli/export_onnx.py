"""Exports a checkpoint to ONNX (toolkit/interop/onnx.py), in the layout the Hugging Face ONNX tools and
transformers.js read, for onnxruntime on servers, Windows and phones, and transformers.js in the browser.

vaswani-export-onnx runs/small/averaged runs/small/onnx
vaswani-export-onnx runs/small/averaged runs/small/onnx --quantize int8     # adds onnx/*_quantized.onnx
vaswani-export-onnx runs/small/averaged runs/small/web --web                # and the browser page beside it
vaswani-translate runs/small/onnx --input my.en --output my.de              # detected as an ONNX export

The output folder (new, empty or its earlier output, replaced whole) holds onnx/encoder_model.onnx and
onnx/decoder_model_merged.onnx (the decoder with its cache, under one use_cache_branch), the tokenizer, the config and
the generation settings. float32 computes what the checkpoint computes; --quantize int8 adds onnxruntime's dynamic int8
weights as a second variant (about a quarter of the size). Needs the `onnx` extra: pip install modeling_vaswani[onnx].
"""

import argparse

from .shell import command


def parse_arguments(argv=None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="checkpoint folder or Hub id (with its tokenizer)")
    parser.add_argument("output_dir", help="folder to write the ONNX export to (new, empty or an earlier export)")
    parser.add_argument(  # checked by the export, which needs onnx (not imported before it is needed)
        "--quantize", help="int8: also write onnxruntime's dynamic int8 variant (onnx/*_quantized.onnx)"
    )
    parser.add_argument("--revision", help="with a Hub id: the branch, tag or commit to export")
    parser.add_argument(
        "--web", action="store_true", help="also write the page that translates in the browser (docs/browser.md)"
    )
    return parser, parser.parse_args(argv)


@command("vaswani-export-onnx")
def main(argv=None) -> None:
    _, arguments = parse_arguments(argv)
    from ..interop.onnx import export_onnx  # onnx is optional: imported only here

    export_onnx(arguments.model, arguments.output_dir, arguments.quantize, arguments.revision, arguments.web)
    variant = " with its int8 variant" if arguments.quantize else ""
    print(f"exported {arguments.model}{variant} into {arguments.output_dir}")


if __name__ == "__main__":  # python -m modeling_vaswani.toolkit.cli.export_onnx, as under accelerate launch -m
    main()
