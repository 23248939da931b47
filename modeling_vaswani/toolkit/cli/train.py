"""Trains a Transformer with the paper's recipe (Section 5) on Seq2SeqTrainer, then averages checkpoints and scores
the test split with sacreBLEU, chrF and TER.

    vaswani-train                      # the small preset on the shipped Multi30k En->De
    vaswani-train --preset base --dataset_name wmt14 --dataset_config_name de-en ...   # see README

Every Seq2SeqTrainingArguments flag works (--help lists them); runs the same under accelerate launch and torchrun.
"""

import json
import logging
import sys

import torch

from ..training.recipe import parse_arguments, run
from .arguments import finite_floats
from .shell import command


@command("vaswani-train")
def main(argv=None):
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    results = run(*parse_arguments(argv, adapt=finite_floats))
    test = results.get("test")
    if test:
        print(f"sacreBLEU {test['sacrebleu']:.2f} ({test['signature']})")
        print(
            f"tokenized BLEU {test['tokenized_bleu']:.2f} ({test['tokenized_bleu_signature']}), for the paper's table"
        )
        print(f"chrF2 {test['chrf']:.2f} ({test['chrf_signature']})")
        print(f"TER {test['ter']:.2f} ({test['ter_signature']})")
    best = results.get("best")
    if best:  # --early_stopping_patience: the best checkpoint, kept and scored beside the model
        scores = f", test sacreBLEU {best['test']['sacrebleu']:.2f}, chrF2 {best['test']['chrf']:.2f}"
        print(
            f"best checkpoint: {results['best_dir']} (step {best['step']}, validation {best['metric']} "
            f"{best['validation']:.2f}{scores})"
        )
    print(f"model: {results['model_dir']}")
    print(json.dumps({k: v for k, v in results.items() if not k.endswith("_dir")}, indent=2), file=sys.stderr)
    # Under torchrun or accelerate launch, leave the process group before exiting: its communication threads still
    # running at interpreter exit can abort a rank ("terminate called without an active exception") after the job.
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":  # python -m modeling_vaswani.toolkit.cli.train, as under accelerate launch -m
    main()
