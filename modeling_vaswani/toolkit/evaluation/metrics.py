"""BLEU as the paper reports it and as WMT does (sacreBLEU with its signature), from an `evaluate` metric module
shipped in the package (bleu/bleu.py), so that it loads offline."""

from collections.abc import Sequence
from importlib import resources
from pathlib import Path

# The metric is a script for evaluate.load, not a module of this package: it must stay importable on its own.
BLEU_PATH = Path(str(resources.files(__package__) / "bleu" / "bleu.py"))


def load_bleu(**kwargs):
    """Load the BLEU metric (sacreBLEU plus the paper's tokenized BLEU) from the installed package, without network.

    Keyword arguments go to `evaluate.load` (e.g. `experiment_id`, `num_process`, `process_id` for distributed
    evaluation).
    """
    # Imported here because evaluate is a "train" extra, not a dependency of the model itself.
    import evaluate

    return evaluate.load(str(BLEU_PATH), **kwargs)


def bleu(predictions: Sequence[str], references: Sequence[str]) -> dict:
    """sacreBLEU with its signature (the number to report) and the paper-style tokenized BLEU."""
    return load_bleu().compute(predictions=list(predictions), references=[[r] for r in references])
