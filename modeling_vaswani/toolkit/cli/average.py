"""Averages Trainer checkpoints into one model folder, as in Section 6.1 of the paper (last 5 for base, 20 for big).

vaswani-average --output_dir_of_training runs/base --last 5 --output runs/base-averaged
vaswani-average runs/base/checkpoint-99000 runs/base/checkpoint-100000 --output averaged

Refused before anything is written: a checkpoint that is missing, given twice, not a Vaswani checkpoint (its config's
model_type is named), or whose weights do not open, do not fit its config.json or do not match the others',
checkpoints of different tokenizers, and an --output that is a file, a checkpoint, or a folder
holding anything but an earlier model (named). The average is written aside and replaces --output when complete; what
a killed run left beside --output is cleaned up, or restored, first.
"""

import argparse

from ..checkpoints import find_checkpoints
from ..training.averaging import average_checkpoints
from .arguments import positive_int
from .shell import command


def parse_arguments(argv=None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoints", nargs="*", help="checkpoint folders to average, in training order")
    parser.add_argument("--output_dir_of_training", help="the Trainer's output_dir holding checkpoint-<step> folders")
    parser.add_argument(
        "--last", type=positive_int, help="with --output_dir_of_training: how many of the last checkpoints"
    )
    parser.add_argument("--output", required=True, help="folder to write the averaged model to (replaced if present)")
    arguments = parser.parse_args(argv)
    if bool(arguments.checkpoints) == bool(arguments.output_dir_of_training):
        parser.error("give either checkpoint folders or --output_dir_of_training, not both and not neither")
    if arguments.output_dir_of_training and arguments.last is None:
        parser.error("--output_dir_of_training needs --last N (the paper uses 5 for base models, 20 for big ones)")
    if arguments.checkpoints and arguments.last is not None:
        parser.error("--last only applies to --output_dir_of_training")
    return parser, arguments


@command("vaswani-average")
def main(argv=None) -> None:
    _, arguments = parse_arguments(argv)
    checkpoints = arguments.checkpoints or find_checkpoints(arguments.output_dir_of_training, arguments.last)
    output = average_checkpoints(checkpoints, arguments.output, vaswani_only=True)  # each through the opener
    print(f"averaged {len(checkpoints)} checkpoints into {output}:")
    for checkpoint in checkpoints:
        print(f"  {checkpoint}")


if __name__ == "__main__":  # python -m modeling_vaswani.toolkit.cli.average, as under accelerate launch -m
    main()
