"""Trains a Transformer with the paper's recipe (Section 5) on Seq2SeqTrainer, then averages checkpoints and scores
the test split with sacreBLEU, chrF and TER.

    vaswani-train                      # the small preset on the shipped Multi30k En->De
    vaswani-train --preset base --dataset_name wmt14 --dataset_config_name de-en ...   # see README

Every Seq2SeqTrainingArguments flag works (--help lists them); runs the same under accelerate launch and torchrun.
--push_to_hub pushes the final model (the folder printed as model:) once, at the end, by the main process, as
vaswani-push does: its files alone, each printed, to --hub_model_id (default: output_dir's name under the logged-in
account), --hub_private_repo, on branch --hub_revision; the id and the login are checked before any work. The
Trainer's own push (the whole output_dir, logs and checkpoints included) is never made.
"""

import json
import logging
import sys
from pathlib import Path

import torch

from ..hub.push import account_repo_id, push_checkpoint
from ..training.recipe import parse_arguments, train_and_score
from .arguments import finite_floats
from .shell import command


@command("vaswani-train")
def main(argv=None):
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    arguments = parse_arguments(argv, adapt=finite_floats, budget_sizes=True)
    training_args = arguments[-1]
    repo_id = hub_repo_id(training_args) if training_args.push_to_hub else None
    training_args.push_to_hub = False  # the Trainer pushes nothing: the final model is pushed below
    results = train_and_score(*arguments)
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
    if repo_id is not None and training_args.process_index == 0:
        print(push_final_model(results, repo_id, training_args))


def hub_repo_id(training_args) -> str:
    """Where --push_to_hub pushes, as transformers' Trainer names it (--hub_model_id, else output_dir's name), checked
    with the login before any work."""
    if not training_args.average_last_checkpoints:
        raise ValueError(
            "--push_to_hub with --average_last_checkpoints 0: the final model would be output_dir itself, among the "
            "run's logs, curves and checkpoints; expected --average_last_checkpoints N >= 1 (OUTPUT_DIR/averaged, "
            "the model alone), or push a model folder with vaswani-push"
        )
    name = training_args.hub_model_id or Path(training_args.output_dir).absolute().name
    return account_repo_id(name, token=training_args.hub_token)


def push_final_model(results: dict, repo_id: str, training_args) -> str:
    """The run's final model pushed as vaswani-push pushes it, each file printed; its card reports the test scores
    where the run had a test split. Returns the repository's URL."""
    return push_checkpoint(
        results["model_dir"],
        repo_id,
        private=bool(training_args.hub_private_repo),
        revision=training_args.hub_revision,
        with_results="test" in results,
        report=print,
        token=training_args.hub_token,
    )


if __name__ == "__main__":  # python -m modeling_vaswani.toolkit.cli.train, as under accelerate launch -m
    main()
