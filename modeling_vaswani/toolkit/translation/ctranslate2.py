"""A folder written by vaswani-export-ctranslate2, run by CTranslate2 (https://opennmt.net/CTranslate2) behind the
part of a model's interface that `translation.translate.translate` uses.

Decoding: CTranslate2's `length_penalty` is not GNMT's. Its beam search (decoding.cc, finalize_hypothesis_score)
scores a finished hypothesis log P(Y|X) / |Y|^alpha, as transformers' stock beam search does, where Section 6.1
divides by ((5 + |Y|) / 6)^alpha; and it stops once beam_size hypotheses have finished (transformers'
early_stopping=True). `CTranslate2Model.generate` therefore ranks the hypotheses CTranslate2 returns by GNMT's penalty
itself (see there for what still differs from generate(paper_decoding=True)).

CTranslate2 is an optional extra: importing this module without it raises an ImportError that says how to install it.
"""

import math
from pathlib import Path

try:
    import ctranslate2
except ImportError as error:
    raise ImportError(
        f"CTranslate2 is not installed ({error}); the export and the ctranslate2 engine need it: "
        "pip install modeling_vaswani[ctranslate2]"
    ) from error
import torch

from ...generation_vaswani import TRANSFORMERS_MAX_LENGTH, stock_output_length
from ...guidance_vaswani import check_target_prefix
from ...search_vaswani import gnmt_length_penalty, max_output_length
from ..checkpoints import EXPORT_FILE as EXPORT_FILE  # the export's own file, named here for the export too
from ..checkpoints import CheckpointError, Export, validate_export
from .request import ExportedModel

# CTranslate2's beam search ends once beam_size * patience hypotheses have finished, where Section 6.1's goes on while
# a live beam could still win. Under the paper's decoding it collects twice the beam and all of them are re-ranked:
# on the default job's En->Fr model (test2016, 1,000 sentences), patience 1 gave 32 sentences other than
# generate(paper_decoding=True) (sacreBLEU 51.08 against 51.33), patience 2 with 8 hypotheses none (51.33).
PAPER_PATIENCE = 2


def ranked(
    hypotheses: list[list[str]], scores: list[float], alpha: float, paper_decoding: bool, prefix_log_prob: float = 0.0
) -> list[tuple[list[str], float]]:
    """The hypotheses CTranslate2 returns, best first, with generate()'s score: log P(Y|X) / lp(Y), Section 6.1's
    lp(Y) = ((5 + |Y|) / 6)^alpha under `paper_decoding`, |Y|^alpha without.

    CTranslate2 scores log P(Y|X) / |Y|^alpha (its `length_penalty`, decoding.cc's finalize_hypothesis_score), leaving
    a target prefix's log-probability out of P(Y|X) but its tokens in |Y|, and has no GNMT penalty: its scores are
    turned back into log P(Y|X), the prefix's `prefix_log_prob` added, and ranked again, by hand.
    """
    rescored = []
    for tokens, score in zip(hypotheses, scores, strict=True):
        log_p = score * len(tokens) ** alpha + prefix_log_prob
        penalty = gnmt_length_penalty(len(tokens), alpha) if paper_decoding else len(tokens) ** alpha
        rescored.append((tokens, log_p / penalty))
    return sorted(rescored, key=lambda pair: -pair[1])  # stable: ties keep CTranslate2's order


class CTranslate2Config:
    """What the translating code reads from a model's config: its input limit."""

    def __init__(self, max_position_embeddings: int):
        self.max_position_embeddings = max_position_embeddings


class CTranslate2Model(ExportedModel):
    """An exported folder behind the part of a model's interface that `translation.translate.translate` uses:
    `generate` on a padded batch of token ids, with Section 6.1's decoding as far as CTranslate2 expresses it (see
    `generate`). The folder's files are checked first (`checkpoints.validate_export`, unless an `export` it gave is
    passed), so that a damaged one is named by its file before CTranslate2 reads it. It runs on token ids: the
    tokenizer beside it is the caller's (`engines.load_exported` checks and loads both)."""

    device = torch.device("cpu")
    engine = "ctranslate2"  # engines.CTranslate2 holds it

    def __init__(self, folder: str | Path, export: Export | None = None, **translator_options):
        folder = Path(folder)
        self.export = export or validate_export(folder, with_tokenizer=False)
        settings, generation = self.export.settings, self.export.generation_config
        try:
            self.translator = ctranslate2.Translator(str(folder), device="cpu", **translator_options)
        except RuntimeError as error:  # what the checks above cannot see: CTranslate2 names no file
            raise CheckpointError(
                f"{folder / 'model.bin'}: CTranslate2 {ctranslate2.__version__} cannot load it ({error}); expected "
                "a model.bin written by vaswani-export-ctranslate2 (export the checkpoint again?)"
            ) from error
        self.vocabulary = self.export.vocabulary
        self.ids = {name: index for index, name in enumerate(self.vocabulary)}
        self.config = CTranslate2Config(settings["max_position_embeddings"])
        self.position_rows = settings["position_rows"]
        self.generation_config = generation
        self.num_beams = generation.num_beams
        self.length_penalty = generation.length_penalty
        self.pad_token_id = generation.pad_token_id
        self.eos_token_id = generation.eos_token_id
        # generate()'s limit without the paper's decoding, the start token counted
        self.max_length = generation.max_length or TRANSFORMERS_MAX_LENGTH

    def eval(self) -> "CTranslate2Model":
        return self

    def tokens(self, ids: torch.Tensor, mask: torch.Tensor) -> list[list[str]]:
        """Each row's tokens as CTranslate2 takes them: the vocabulary's strings, padding left out."""
        return [[self.vocabulary[i] for i in row[keep.bool()].tolist()] for row, keep in zip(ids, mask, strict=True)]

    def score_batch(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor):
        """Each row's log P of its `labels` tokens (padding excluded; `</s>` last), by CTranslate2's `score_batch`,
        which adds `</s>` to a target itself."""
        targets = self.tokens(labels, labels.ne(self.pad_token_id))
        for number, target in enumerate(targets, start=1):
            if not target or target[-1] != self.vocabulary[self.eos_token_id]:
                raise ValueError(f"target {number} of the batch does not end with </s>; expected tokenizer labels")
        results = self.translator.score_batch(
            self.tokens(input_ids, attention_mask),
            [target[:-1] for target in targets],
            max_input_length=0,  # CTranslate2 would cut sentences at 1024 tokens without a word
        )
        return [list(result.log_probs) for result in results]

    def nbest_hypotheses(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        nbest: int = 1,
        paper_decoding: bool = True,
        num_beams: int | None = None,
        max_new_tokens: int | None = None,
        target_prefix: list[list[int]] | None = None,
    ) -> list[list[tuple[list[int], float]]]:
        """Each row's `nbest` best hypotheses, best first: their output token ids (`</s>` included where it was
        generated) and the score the search ranked them by.

        Under `paper_decoding`: beam search with `num_beams` (the folder's, 4), at most (longest source of the batch
        + 50) tokens (CTranslate2 takes one limit per batch: a shorter sentence of the batch may decode a little past
        its own source + 50; translation.translate.translate batches sentences of similar length), and the hypotheses
        CTranslate2 returns (the first 2 x `num_beams` to finish: PAPER_PATIENCE) ranked by GNMT's penalty with the
        folder's alpha. Where ours differs: it decodes on until no live beam can still beat the finished ones, which
        CTranslate2 cannot express, so on rare sentences ours may find a better hypothesis that finishes later.
        Without `paper_decoding`: CTranslate2's own ranking, log P(Y|X) / |Y|^alpha, and `max_new_tokens` or the
        folder's max_length, as generate() takes them. Decoding also stops at the end of the position table (as
        generate() does for learned positions). `target_prefix`: each row's first tokens (generate()'s).
        `nbest` is not checked against the beam here: a translating entry's request was checked once by its front end
        (`request.TranslationRequest.check`), a direct call by `generate_nbest`, and `generate` asks for one.
        """
        if attention_mask is None:
            attention_mask = input_ids.ne(self.pad_token_id)
        sources = self.tokens(input_ids, attention_mask)
        longest = max(map(len, sources))
        if longest > self.position_rows:
            raise ValueError(
                f"a source of {longest} tokens is longer than the exported position table ({self.position_rows} "
                "positions); expected at most that many tokens"
            )
        if paper_decoding:
            limit = max_output_length(longest, max_new_tokens or None)
        else:
            limit = stock_output_length(max_new_tokens, self.max_length)
        limit = min(limit, self.position_rows)  # CTranslate2 fails past the table
        beams = num_beams or self.num_beams
        patience = PAPER_PATIENCE if paper_decoding else 1
        if target_prefix is not None:
            target_prefix = check_target_prefix(target_prefix, len(self.vocabulary), [limit] * len(sources))
            target_prefix = [[self.vocabulary[i] for i in prefix] for prefix in target_prefix]
        settings = {
            "beam_size": beams,
            "patience": patience,
            "num_hypotheses": beams * patience if paper_decoding else nbest,
            "length_penalty": self.length_penalty,
            "return_end_token": True,  # |Y| counts </s>, as generate() counts it
            "return_scores": True,
            "max_input_length": 0,  # CTranslate2 would cut sources at 1024 tokens without a word
            "max_decoding_length": limit,
            "min_decoding_length": 0,  # CTranslate2's default 1 forbids </s> first, which generate() allows
        }
        # Rows with a prefix and rows without are decoded apart: in a batch given prefixes, CTranslate2 decodes a row
        # without one otherwise than alone (it was seen not to end a hypothesis at its first token).
        prefixed = [i for i in range(len(sources)) if target_prefix and target_prefix[i]]
        plain = [i for i in range(len(sources)) if i not in set(prefixed)]
        results, offsets = [None] * len(sources), [0.0] * len(sources)
        for group, prefixes in ((plain, None), (prefixed, [target_prefix[i] for i in prefixed] if prefixed else None)):
            if not group:
                continue
            group_sources = [sources[i] for i in group]
            decoded = self.translator.translate_batch(group_sources, target_prefix=prefixes, **settings)
            scored = self.prefix_log_probs(group_sources, prefixes) if prefixes else [0.0] * len(group)
            for i, result, offset in zip(group, decoded, scored, strict=True):
                results[i], offsets[i] = result, offset
        rows = []
        for result, offset in zip(results, offsets, strict=True):
            best = ranked(result.hypotheses, result.scores, self.length_penalty, paper_decoding, offset)[:nbest]
            rows.append([([self.ids[name] for name in tokens], score) for tokens, score in best])
        return rows

    def prefix_log_probs(self, sources: list[list[str]], prefixes: list[list[str]]) -> list[float]:
        """Each target prefix's log-probability given its source (0 for none), which CTranslate2 leaves out of a
        hypothesis's score: its `score_batch` of the prefix, less the `</s>` it appends."""
        results = self.translator.score_batch(sources, prefixes, max_input_length=0)
        return [math.fsum(result.log_probs[:-1]) for result in results]
