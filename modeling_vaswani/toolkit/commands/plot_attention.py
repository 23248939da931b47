"""Draws attention maps, as in Figures 3-5 of the paper, for one sentence and a checkpoint: one PNG per attention
kind and layer (OUTPUT_DIR/KIND_layerN.png) with the chosen heads side by side, tokens labelled as text ("##"
marks a token that continues the word before it). Prints the files written.

vaswani-plot-attention runs/small/averaged "A man rides a bike." --layers 2 --heads 0 1
"""

import argparse

from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from ..plotting import ATTENTION_KINDS, plot_attention


def main(argv=None):
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
    arguments = parser.parse_args(argv)

    model = AutoModelForSeq2SeqLM.from_pretrained(arguments.model, trust_remote_code=arguments.trust_remote_code)
    tokenizer = AutoTokenizer.from_pretrained(arguments.model, trust_remote_code=arguments.trust_remote_code)
    files = plot_attention(
        model, tokenizer, arguments.sentence, arguments.output_dir, arguments.layers, arguments.heads, arguments.kinds
    )
    for path in files:
        print(path)
