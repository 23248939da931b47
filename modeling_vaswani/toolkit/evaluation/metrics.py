"""BLEU as the paper reports it and as WMT does (sacreBLEU with its signature), from an `evaluate` metric module
shipped in the package (bleu/bleu.py), so that it loads offline; chrF and TER, which WMT reports beside BLEU, from
sacreBLEU's own classes with their signatures; and `translation_scores`, all of them at once, which is what the
commands, results.json and the model card report."""

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


def chrf(predictions: Sequence[str], references: Sequence[str]) -> dict:
    """chrF2 as WMT reports it, sacreBLEU's defaults (character n-grams up to 6, no word n-grams, recall weighted by
    beta 2, case kept, spaces ignored): {"chrf": 0-100, "chrf_signature": ...}; one reference per prediction."""
    # Imported here because sacrebleu is a "train" extra, as evaluate is.
    from sacrebleu.metrics import CHRF

    return corpus_score("chrf", CHRF(), predictions, references)


def ter(predictions: Sequence[str], references: Sequence[str]) -> dict:
    """TER, sacreBLEU's defaults (tercom's tokenization, case ignored): word edits, a shift of a phrase counting as
    one, per reference word, in percent; lower is better. {"ter": ..., "ter_signature": ...}."""
    from sacrebleu.metrics import TER

    return corpus_score("ter", TER(), predictions, references)


def corpus_score(name: str, metric, predictions: Sequence[str], references: Sequence[str]) -> dict:
    """A sacreBLEU `metric`'s corpus score as {name: score, f"{name}_signature": its signature}."""
    predictions, references = list(predictions), list(references)
    # Checked here: sacrebleu's own messages do not say which count is which.
    if len(predictions) != len(references):
        raise ValueError(
            f"got {len(predictions)} predictions and {len(references)} references; {name} needs one reference per "
            "prediction"
        )
    if not predictions:
        raise ValueError(f"got no predictions; {name} needs at least one segment")
    score = metric.corpus_score(predictions, [references]).score
    return {name: score, f"{name}_signature": str(metric.get_signature())}


def translation_scores(predictions: Sequence[str], references: Sequence[str]) -> dict:
    """Every score reported of a translated set, each with its signature: `bleu`'s (sacreBLEU, tokenized BLEU and
    their details), chrF2 and TER. One reference per prediction."""
    predictions, references = list(predictions), list(references)
    return {**bleu(predictions, references), **chrf(predictions, references), **ter(predictions, references)}
