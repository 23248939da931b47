"""Uploads a checkpoint folder to the Hugging Face Hub with its model card, and prints the repository's URL.

vaswani-push runs/wmt14-base/averaged user/vaswani-base-wmt14-en-de
vaswani-push runs/small/averaged user/vaswani-small-multi30k

Uploads the model's files alone: the weights (safetensors), config, generation config, tokenizer, results.json, what
the folder's .vaswani-output.json names, the model's code and translation pipeline (so the repository loads with
trust_remote_code=True without this package), and README.md, the model card rendered from model_card.md with the
checkpoint's configuration and the BLEU of its results.json; it prints each file pushed and each earlier model's file
deleted, then the URL. Any other file in the folder (notes, logs, keys) is refused by name unless --include adds it
(the Trainer's optimizer and RNG state of a checkpoint-N folder are left out). A folder
that is not a valid checkpoint, or has no results.json (unless --no_results), is refused before anything is uploaded.
A folder whose weights do not open, or do not match config.json (every tensor's shape is checked), and a repo_id that
is not a Hub id are refused as well. The card names the test set that results.json records (vaswani-train writes
it); a --dataset flag replaces that field (where results.json records none, unnamed fields are those of the paper's
test set, WMT14 newstest2014).
Log in first (`hf auth login`) or set HF_TOKEN.
"""

import argparse

from ..hub.push import EvaluationSet, push_checkpoint
from .shell import command


@command("vaswani-push")
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "checkpoint",
        help="checkpoint folder (OUTPUT_DIR/averaged of vaswani-train), or a vaswani-export-onnx or -marian folder",
    )
    parser.add_argument("repo_id", help="the Hub repository, e.g. user/vaswani-base-wmt14-en-de")
    parser.add_argument("--private", action="store_true", help="create the repository private (if it is new)")
    parser.add_argument("--revision", help="push to this branch, created from main if needed (default: main)")
    parser.add_argument("--commit_message", help="the commit's message")
    parser.add_argument("--no_results", action="store_true", help="a model card without evaluation section")
    parser.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="PATTERN",
        help="also push these files of the folder: a name or glob pattern (notes.txt, 'images/*.png'); repeatable",
    )
    parser.add_argument(
        "--template",
        help="base or big: the paper's model the card compares with (default: by d_model); or a card template file",
    )
    defaults = EvaluationSet()
    for name, help_text in (
        ("dataset", "Hub id of the test set's dataset"),
        ("dataset_config", "its configuration"),
        ("dataset_split", "its split"),
        ("dataset_name", "its name in the card"),
        ("source_lang", "source language code"),
        ("target_lang", "target language code"),
    ):
        field = "dataset_id" if name == "dataset" else name
        default = getattr(defaults, field)
        parser.add_argument(f"--{name}", dest=field, help=f"{help_text} (default: results.json's, else {default})")
    arguments = parser.parse_args(argv)

    # The fields named here replace those of the test set results.json records.
    test_set = {field: getattr(arguments, field) for field in vars(defaults) if getattr(arguments, field) is not None}
    blank = [field for field, value in test_set.items() if not value.strip()]
    if blank:
        parser.error(f"--{blank[0].removesuffix('_id')} is empty; expected a value for the model card")
    url = push_checkpoint(
        arguments.checkpoint,
        arguments.repo_id,
        private=arguments.private,
        revision=arguments.revision,
        commit_message=arguments.commit_message,
        with_results=not arguments.no_results,
        template=arguments.template,
        test_set=test_set,
        include=arguments.include,
        report=print,
    )
    print(url)


if __name__ == "__main__":  # python -m modeling_vaswani.toolkit.cli.push, as under accelerate launch -m
    main()
