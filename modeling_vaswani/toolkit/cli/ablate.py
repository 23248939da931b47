"""Trains chosen lines of Table 3 of the paper as changes to a preset, on one dataset with the same budget each, and
writes Table 3's columns (dev perplexity, dev BLEU with the paper's beam search and no averaging, parameters) as
OUTPUT_DIR/ablation.md and ablation.png.

    vaswani-ablate --rows base A:h=1 B:d_k=32 E --max_steps 600                 # small preset, shipped Multi30k
    vaswani-ablate --preset base --rows base A:h=1 C:N=2 D:eps_ls=0.0 --dataset_name wmt14 ...   # see README

A row is ROW or ROW:NAME=VALUE[,NAME=VALUE], a line of Table 3 in the paper's terms; how a line applies to a preset
other than base: modeling_vaswani/toolkit/training/ablation.py. Every flag of vaswani-train works (--help lists
them), except those that would not measure Table 3's columns (--model_name_or_path, --resume_from_checkpoint,
--average_last_checkpoints, --no_paper_decoding).
"""

import logging
from pathlib import Path

from ..training.ablation import parse_arguments, train_and_score_lines
from .arguments import finite_floats
from .shell import command


@command("vaswani-ablate")
def main(argv=None):
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    arguments = parse_arguments(argv, adapt=finite_floats)
    train_and_score_lines(*arguments)
    output_dir = Path(arguments[-1].output_dir)
    print((output_dir / "ablation.md").read_text(encoding="utf-8"))
    print(f"written: {output_dir / 'ablation.md'}, {output_dir / 'ablation.png'} and a folder a row in {output_dir}")


if __name__ == "__main__":  # python -m modeling_vaswani.toolkit.cli.ablate, as under accelerate launch -m
    main()
