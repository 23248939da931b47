"""Scoring given translations: the log-probability of each target sentence under a model, per token and in all
(fairseq's --score-reference, marian-scorer, CTranslate2's score_batch). Used to filter corpora, rerank and measure
perplexity on a test set. The same checks and batches as translating (translation/translate.py)."""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from ..threads import start_work
from .arguments import check_arguments
from .translate import DEFAULT_BATCH_SIZE, check_sentences, length_batches


@dataclass
class SentenceScore:
    """A target sentence's tokens as the model reads them (`</s>` last) and the log-probability of each, given the
    source and the tokens before it (natural logarithm)."""

    tokens: list[str]
    log_probs: list[float]

    @property
    def total(self) -> float:
        """log P(Y|X): the sum over the tokens."""
        return math.fsum(self.log_probs)

    @property
    def mean(self) -> float:
        """log P(Y|X) / |Y|, |Y| counting `</s>`."""
        return self.total / len(self.log_probs)


def perplexity(scores: Sequence[SentenceScore]) -> float:
    """exp of minus the mean log-probability of all the tokens scored, `</s>` counted."""
    return math.exp(-math.fsum(s.total for s in scores) / sum(len(s.log_probs) for s in scores))


@torch.no_grad()
def token_log_probs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor, ensemble=()):
    """Each row's log P of its `labels` tokens (padding excluded), by one teacher-forced pass of a PyTorch
    sequence-to-sequence model: the decoder reads the start token, then the labels shifted right. With `ensemble`
    (other models), the models' log-probabilities averaged and normalized again, as generate(ensemble=...) decodes."""
    start = torch.full_like(labels[:, :1], model.config.decoder_start_token_id)
    decoder_input_ids = torch.cat((start, labels[:, :-1]), dim=1)
    log_probs = [
        member(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids)
        .logits.float()
        .log_softmax(dim=-1)
        for member in (model, *ensemble)
    ]
    log_probs = torch.stack(log_probs).mean(dim=0).log_softmax(dim=-1) if ensemble else log_probs[0]
    chosen = log_probs.gather(-1, labels[:, :, None])[:, :, 0]
    mask = labels.ne(model.config.pad_token_id)
    return [row[keep].tolist() for row, keep in zip(chosen, mask, strict=True)]


def score(
    model,
    tokenizer,
    sources: Sequence[str],
    targets: Sequence[str],
    batch_size: int | None = None,
    max_tokens: int | None = None,
    max_input_tokens: int | None = None,
    progress: bool = True,
    ensemble=(),
) -> list[SentenceScore]:
    """The score of each `targets[i]` as the translation of `sources[i]` under `model` (a checkpoint's, or an exported
    folder's `CTranslate2Model`, which scores with CTranslate2's `score_batch`), in order.

    Pairs are batched by their longer side, longest first: `batch_size` pairs a batch (64 when neither limit is
    given), or as many as `max_tokens` padded tokens a side hold. Refused before any is scored (InputError): unequal
    counts, an empty sentence on either side, one longer than `max_input_tokens`, a pair longer than `max_tokens`.
    `ensemble`: other PyTorch models scoring with `model`, as they decode together (`token_log_probs`).
    """
    check_arguments(batch_size=batch_size, max_tokens=max_tokens, max_input_tokens=max_input_tokens, progress=progress)
    if batch_size is None and max_tokens is None:
        batch_size = DEFAULT_BATCH_SIZE
    if not isinstance(targets, str) and len(sources) != len(targets):
        raise ValueError(f"{len(sources)} source sentences and {len(targets)} targets; expected one target a source")
    lengths = [
        max(pair)
        for pair in zip(
            check_sentences(tokenizer, sources, max_input_tokens),
            check_sentences(tokenizer, targets, max_input_tokens, side="target"),
            strict=True,
        )
    ]
    batches = length_batches(lengths, batch_size, max_tokens)  # refuses a pair over max_tokens before any scoring
    model.eval()
    start_work()  # every check passed: a command measures its threads now (threads.start_work)
    scores = [None] * len(sources)
    with tqdm(total=len(sources), desc="scoring", unit="sentence", disable=not progress) as bar:
        for indices in batches:
            batch = tokenizer(
                [sources[i] for i in indices],
                text_target=[targets[i] for i in indices],
                return_tensors="pt",
                padding=True,
            ).to(model.device)
            if hasattr(model, "score_batch"):  # an exported model: CTranslate2 scores
                rows = model.score_batch(batch["input_ids"], batch["attention_mask"], batch["labels"])
            else:
                rows = token_log_probs(model, batch["input_ids"], batch["attention_mask"], batch["labels"], ensemble)
            for index, labels, log_probs in zip(indices, batch["labels"], rows, strict=True):
                tokens = tokenizer.convert_ids_to_tokens(labels[: len(log_probs)].tolist())
                scores[index] = SentenceScore(tokens, log_probs)
            bar.update(len(indices))
    return scores
