"""BLEU for translation: sacreBLEU (the number to report) plus the paper's tokenized, compound-split BLEU.

This file is a self-contained `evaluate` metric module: `evaluate.load("path/to/bleu")` loads it without network
access, and it can be shared as-is as a metric Space on the Hub. It depends only on evaluate, datasets and sacrebleu.
"""

import re

import datasets
import evaluate
import sacrebleu
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

_CITATION = """\
@inproceedings{post-2018-call,
    title = "A Call for Clarity in Reporting {BLEU} Scores",
    author = "Post, Matt",
    booktitle = "Proceedings of the Third Conference on Machine Translation: Research Papers",
    year = "2018",
    url = "https://aclanthology.org/W18-6319",
}
@inproceedings{papineni-etal-2002-bleu,
    title = "{B}leu: a Method for Automatic Evaluation of Machine Translation",
    author = "Papineni, Kishore and Roukos, Salim and Ward, Todd and Zhu, Wei-Jing",
    booktitle = "Proceedings of the 40th Annual Meeting of the Association for Computational Linguistics",
    year = "2002",
    url = "https://aclanthology.org/P02-1040",
}
"""

_DESCRIPTION = """\
Corpus BLEU of detokenized translations, computed two ways.

`sacrebleu` is sacreBLEU with its defaults (13a tokenization, mixed case, exponential smoothing); with its
`signature` it is the comparable number to report.

`tokenized_bleu` reproduces, approximately, how the BLEU scores in "Attention Is All You Need" (Vaswani et al.
2017) were computed by tensor2tensor's `get_ende_bleu.sh`: Moses tokenization (`tokenizer.perl -l de`), compound
splitting (`perl -ple 's{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g'`, so a hyphen inside a word becomes its own token) and
`multi-bleu.perl` (case-sensitive, no smoothing, closest reference length). Here sacreBLEU's 13a tokenizer stands in
for the Moses tokenizer, then the same compound split is applied and the result is scored with sacreBLEU's
`tokenize="none"` and `smooth_method="none"`, which count n-grams and the brevity penalty as multi-bleu.perl does.
On German Multi30k, 13a and Moses produce identical tokens on about 99% of sentences; they differ mainly on German
quotation marks („...“, which 13a leaves attached to words), apostrophes and abbreviations such as "z.B.". Tokenized
BLEU depends on the tokenization and is not comparable across papers; it is provided for comparison with the paper's
table only.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): detokenized translations, one per segment.
    references (`list` of `str`, or `list` of `list` of `str`): one reference per segment, or several (the number may
        vary between segments).
Returns:
    sacrebleu (`float`): sacreBLEU score, 0-100.
    signature (`str`): sacreBLEU signature, e.g. "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0".
    counts (`list` of `int`): matching n-grams of the sacreBLEU score, for n = 1..4.
    totals (`list` of `int`): n-grams in the predictions, for n = 1..4.
    precisions (`list` of `float`): n-gram precisions in percent, for n = 1..4.
    bp (`float`): brevity penalty.
    sys_len (`int`): number of tokens in the predictions.
    ref_len (`int`): effective reference length (closest reference length per segment, summed).
    tokenized_bleu (`float`): paper-style tokenized BLEU with compound splitting, 0-100; for comparison only.
    tokenized_bleu_signature (`str`): how `tokenized_bleu` was computed, e.g.
        "nrefs:1|case:mixed|eff:no|tok:13a+compound-split|smooth:none|version:2.6.0".
Examples:
    >>> bleu = evaluate.load("path/to/bleu")
    >>> results = bleu.compute(predictions=["Ein Hund rennt."], references=[["Ein Hund rennt."]])
    >>> results["sacrebleu"], results["tokenized_bleu"]
    (100.00000000000004, 100.00000000000004)
"""

# The substitution of tensor2tensor's get_ende_bleu.sh. Python's re.sub, like perl's s///g, does not rescan the
# character it consumed after a hyphen, so "A-B-C" keeps its second hyphen there and here alike.
_COMPOUND_HYPHEN = re.compile(r"(\S)-(\S)")

_TOKENIZE_13A = Tokenizer13a()


def split_compounds(text):
    """Make a hyphen between two non-space characters a token: "saftig-grünes" -> "saftig ##AT##-##AT## grünes"."""
    return _COMPOUND_HYPHEN.sub(r"\1 ##AT##-##AT## \2", text)


def paper_tokenize(text):
    """Tokenize as the paper's evaluation did, with 13a standing in for the Moses tokenizer."""
    return split_compounds(_TOKENIZE_13A(text))


def _reference_streams(references):
    # sacrebleu takes one stream per reference position; None marks a segment with fewer references than others.
    n_streams = max(len(refs) for refs in references)
    return [[refs[i] if i < len(refs) else None for refs in references] for i in range(n_streams)]


def _tokenized_bleu(predictions, streams):
    # The text is tokenized on purpose, so sacrebleu's "looks tokenized" warning is silenced with force=True.
    bleu = sacrebleu.BLEU(tokenize="none", smooth_method="none", force=True)
    tokenized_streams = [[None if ref is None else paper_tokenize(ref) for ref in stream] for stream in streams]
    score = bleu.corpus_score([paper_tokenize(pred) for pred in predictions], tokenized_streams)
    return score.score, str(bleu.get_signature()).replace("tok:none", "tok:13a+compound-split")


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Bleu(evaluate.Metric):
    def _info(self):
        string = datasets.Value("string", id="sequence")
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=[
                datasets.Features({"predictions": string, "references": datasets.Sequence(string, id="references")}),
                datasets.Features({"predictions": string, "references": string}),
            ],
            codebase_urls=["https://github.com/mjpost/sacrebleu"],
            reference_urls=[
                "https://github.com/tensorflow/tensor2tensor/blob/master/tensor2tensor/utils/get_ende_bleu.sh"
            ],
        )

    def add_batch(self, *, predictions=None, references=None, **kwargs):
        """Add a batch of predictions and references, after checking that they pair up."""
        # Checked before evaluate sees the batch: it reads the first example to choose between the two feature
        # formats, so an empty batch would fail there with an IndexError rather than a clear message.
        if len(predictions) != len(references):
            raise ValueError(
                f"Got {len(predictions)} predictions and {len(references)} references; "
                "BLEU needs one reference (or one list of references) per prediction."
            )
        if len(predictions) == 0:
            raise ValueError("Got no predictions; BLEU needs at least one segment.")
        super().add_batch(predictions=predictions, references=references, **kwargs)

    def _compute(self, predictions, references):
        references = [[refs] if isinstance(refs, str) else refs for refs in references]
        if any(len(refs) == 0 for refs in references):
            raise ValueError("Every prediction needs at least one reference.")
        streams = _reference_streams(references)
        bleu = sacrebleu.BLEU()
        score = bleu.corpus_score(predictions, streams)
        tokenized_bleu, tokenized_bleu_signature = _tokenized_bleu(predictions, streams)
        return {
            "sacrebleu": score.score,
            "signature": str(bleu.get_signature()),
            "counts": score.counts,
            "totals": score.totals,
            "precisions": score.precisions,
            "bp": score.bp,
            "sys_len": score.sys_len,
            "ref_len": score.ref_len,
            "tokenized_bleu": tokenized_bleu,
            "tokenized_bleu_signature": tokenized_bleu_signature,
        }
