"""Draws attention maps, as in Figures 3-5 of the paper, for one sentence and a checkpoint: one PNG per attention
kind and layer (OUTPUT_DIR/KIND_layerN.png) with the chosen heads side by side, tokens labelled as text ("##"
marks a token that continues the word before it). Prints the files written.

vaswani-plot-attention runs/small/averaged "A man rides a bike." --layers 2 --heads 0 1

Refused before the sentence is translated: an empty or over-long sentence, an --output_dir that is a file, a model
folder that does not exist or whose weights are damaged, and a layer or head the model does not have.
"""

import argparse

from ..checkpoints import load_model_and_tokenizer
from ..evaluation.plotting import ATTENTION_KINDS, plot_attention
from ..outputs import ATTENTION_MAPS, check_output_folder
from ..translation.translate import check_sentences
from .shell import command


def parse_arguments(argv=None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="checkpoint folder or Hub id (with its tokenizer)")
    parser.add_argument("sentence", help="the source sentence")
    parser.add_argument("--layers", type=int, nargs="+", help="layers, from 0 (default: the last)")
    parser.add_argument(
        "--heads", type=int, nargs="+", help="heads, from 0, drawn side by side in each layer's figure (default: all)"
    )
    parser.add_argument(
        "--kinds",
        nargs="+",
        default=list(ATTENTION_KINDS),
        choices=list(ATTENTION_KINDS),
        help="encoder and decoder self-attention, encoder-decoder (cross) attention (default: all three)",
    )
    parser.add_argument("--output_dir", default="attention", help="folder for the PNG files, one per kind and layer")
    parser.add_argument("--trust_remote_code", action="store_true", help="load the model's code from the checkpoint")
    return parser, parser.parse_args(argv)


def check_choices(config, kinds, layers, heads) -> None:
    """Every layer and head chosen exists in every attention kind drawn (the decoder's layers serve two kinds)."""
    for kind in kinds:
        count = config.encoder_layers if kind == "encoder" else config.decoder_layers
        for layer in layers or []:
            if not 0 <= layer < count:
                raise ValueError(f"--layers {layer}: the model's {kind} attention has layers 0 to {count - 1}")
    for head in heads or []:
        if not 0 <= head < config.num_heads:
            raise ValueError(f"--heads {head}: the model's layers have heads 0 to {config.num_heads - 1}")


@command("vaswani-plot-attention")
def main(argv=None):
    _, arguments = parse_arguments(argv)
    check_output_folder(arguments.output_dir, ATTENTION_MAPS, inputs=[arguments.model])
    model, tokenizer = load_model_and_tokenizer(arguments.model, trust_remote_code=arguments.trust_remote_code)
    check_choices(model.config, arguments.kinds, arguments.layers, arguments.heads)
    check_sentences(tokenizer, [arguments.sentence], model.config.max_position_embeddings)
    files = plot_attention(
        model, tokenizer, arguments.sentence, arguments.output_dir, arguments.layers, arguments.heads, arguments.kinds
    )
    for path in files:
        print(path)


if __name__ == "__main__":  # python -m modeling_vaswani.toolkit.cli.plot_attention, as under accelerate launch -m
    main()
