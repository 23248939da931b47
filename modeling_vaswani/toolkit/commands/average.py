"""Averages Trainer checkpoints into one model folder, as in Section 6.1 of the paper (last 5 for base, 20 for big).

vaswani-average --output_dir_of_training runs/base --last 5 --output runs/base-averaged
vaswani-average runs/base/checkpoint-99000 runs/base/checkpoint-100000 --output averaged
"""

import argparse

from ..averaging import average_checkpoints, find_checkpoints


def parse_arguments(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoints", nargs="*", help="checkpoint folders to average, in training order")
    parser.add_argument("--output_dir_of_training", help="the Trainer's output_dir holding checkpoint-<step> folders")
    parser.add_argument("--last", type=int, help="with --output_dir_of_training: how many of the last checkpoints")
    parser.add_argument("--output", required=True, help="folder to write the averaged model to (replaced if present)")
    arguments = parser.parse_args(argv)
    if bool(arguments.checkpoints) == bool(arguments.output_dir_of_training):
        parser.error("give either checkpoint folders or --output_dir_of_training, not both and not neither")
    if arguments.output_dir_of_training and arguments.last is None:
        parser.error("--output_dir_of_training needs --last N (the paper uses 5 for base models, 20 for big ones)")
    if arguments.checkpoints and arguments.last is not None:
        parser.error("--last only applies to --output_dir_of_training")
    return arguments


def main(argv=None) -> None:
    arguments = parse_arguments(argv)
    checkpoints = arguments.checkpoints or find_checkpoints(arguments.output_dir_of_training, arguments.last)
    output = average_checkpoints(checkpoints, arguments.output)
    print(f"averaged {len(checkpoints)} checkpoints into {output}:")
    for checkpoint in checkpoints:
        print(f"  {checkpoint}")
