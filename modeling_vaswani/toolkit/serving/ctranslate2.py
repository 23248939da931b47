"""A folder written by vaswani-export-ctranslate2, run by CTranslate2 (https://opennmt.net/CTranslate2) behind the
part of a model's interface that `evaluation.translate.translate` uses.

Decoding: CTranslate2's `length_penalty` is not GNMT's. Its beam search (decoding.cc, finalize_hypothesis_score)
scores a finished hypothesis log P(Y|X) / |Y|^alpha, as transformers' stock beam search does, where Section 6.1
divides by ((5 + |Y|) / 6)^alpha; and it stops once beam_size hypotheses have finished (transformers'
early_stopping=True). `CTranslate2Model.generate` therefore ranks the hypotheses CTranslate2 returns by GNMT's penalty
itself (see there for what still differs from generate(paper_decoding=True)).

CTranslate2 is an optional extra: importing this module without it raises an ImportError that says how to install it.
"""

import json
from pathlib import Path

try:
    import ctranslate2
except ImportError as error:
    raise ImportError(
        f"CTranslate2 is not installed ({error}); the export and the ctranslate2 engine need it: "
        "pip install modeling_vaswani[ctranslate2]"
    ) from error
import torch
from transformers import GenerationConfig

from ...generation_vaswani import gnmt_length_penalty

EXPORT_FILE = "vaswani_ctranslate2.json"  # what the translating side needs beyond CTranslate2's own config.json
# Section 6.1 decodes up to source length + 50 tokens: the sinusoid table reaches that far past the longest source
# the commands accept (max_position_embeddings tokens), so that no such sentence runs out of positions.
DECODING_MARGIN = 50
# CTranslate2's beam search ends once beam_size * patience hypotheses have finished, where Section 6.1's goes on while
# a live beam could still win. Under the paper's decoding it collects twice the beam and all of them are re-ranked:
# on the default job's En->Fr model (test2016, 1,000 sentences), patience 1 gave 32 sentences other than
# generate(paper_decoding=True) (sacreBLEU 51.08 against 51.33), patience 2 with 8 hypotheses none (51.33).
PAPER_PATIENCE = 2
TRANSFORMERS_MAX_LENGTH = 20  # generate()'s max_length where neither the call nor generation_config.json sets one


def paper_best(hypotheses: list[list[str]], scores: list[float], alpha: float) -> list[str]:
    """The hypothesis of Section 6.1's ranking, log P(Y|X) / ((5 + |Y|) / 6)^alpha, among those CTranslate2 returns.

    CTranslate2 ranks by log P(Y|X) / |Y|^alpha (its `length_penalty`, decoding.cc's finalize_hypothesis_score) and
    has no GNMT penalty: its scores are turned back into log P(Y|X) and ranked again, by hand.
    """
    ranked = [
        score * len(tokens) ** alpha / gnmt_length_penalty(len(tokens), alpha)
        for tokens, score in zip(hypotheses, scores, strict=True)
    ]
    return hypotheses[max(range(len(ranked)), key=ranked.__getitem__)]


class CTranslate2Config:
    """What the translating code reads from a model's config: its input limit."""

    def __init__(self, max_position_embeddings: int):
        self.max_position_embeddings = max_position_embeddings


class CTranslate2Model:
    """An exported folder behind the part of a model's interface that `evaluation.translate.translate` uses:
    `generate` on a padded batch of token ids, with Section 6.1's decoding as far as CTranslate2 expresses it (see
    `generate`)."""

    device = torch.device("cpu")

    def __init__(self, folder: str | Path, **translator_options):
        folder = Path(folder)
        if not (folder / EXPORT_FILE).is_file():
            raise ValueError(
                f"{folder} holds a CTranslate2 model but no {EXPORT_FILE}; expected a folder written by "
                "vaswani-export-ctranslate2"
            )
        settings = json.loads((folder / EXPORT_FILE).read_text(encoding="utf-8"))
        generation = GenerationConfig.from_pretrained(folder)
        self.translator = ctranslate2.Translator(str(folder), device="cpu", **translator_options)
        self.vocabulary = json.loads((folder / "shared_vocabulary.json").read_text(encoding="utf-8"))
        self.ids = {name: index for index, name in enumerate(self.vocabulary)}
        self.config = CTranslate2Config(settings["max_position_embeddings"])
        self.position_rows = settings["position_rows"]
        self.num_beams = generation.num_beams
        self.length_penalty = generation.length_penalty
        self.pad_token_id = generation.pad_token_id
        # generate()'s limit without the paper's decoding, the start token counted
        self.max_length = generation.max_length or TRANSFORMERS_MAX_LENGTH

    def eval(self) -> "CTranslate2Model":
        return self

    def generate(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        paper_decoding: bool = True,
        num_beams: int | None = None,
        max_new_tokens: int | None = None,
    ) -> list[list[int]]:
        """The output token ids of each row, `</s>` included where it was generated.

        Under `paper_decoding`: beam search with `num_beams` (the folder's, 4), at most (longest source of the batch
        + 50) tokens (CTranslate2 takes one limit per batch: a shorter sentence of the batch may decode a little past
        its own source + 50; evaluation.translate.translate batches sentences of similar length), and the hypotheses
        CTranslate2 returns (the first 2 x `num_beams` to finish: PAPER_PATIENCE) ranked by GNMT's penalty with the
        folder's alpha. Where ours differs: it decodes on until no live beam can still beat the finished ones, which
        CTranslate2 cannot express, so on rare sentences ours may find a better hypothesis that finishes later.
        Without `paper_decoding`: CTranslate2's own ranking, |Y|^alpha, and `max_new_tokens` or the folder's
        max_length, as generate() takes them. Decoding also stops at the end of the position table (as generate()
        does for learned positions).
        """
        if attention_mask is None:
            attention_mask = input_ids.ne(self.pad_token_id)
        sources = [
            [self.vocabulary[i] for i in row[mask.bool()].tolist()]
            for row, mask in zip(input_ids, attention_mask, strict=True)
        ]
        longest = max(map(len, sources))
        if longest > self.position_rows:
            raise ValueError(
                f"a source of {longest} tokens is longer than the exported position table ({self.position_rows} "
                "positions); expected at most that many tokens"
            )
        if paper_decoding:
            limit = min(longest + DECODING_MARGIN, max_new_tokens or longest + DECODING_MARGIN)
        else:
            limit = max_new_tokens or self.max_length - 1
        limit = min(limit, self.position_rows)  # CTranslate2 fails past the table
        beams = num_beams or self.num_beams
        patience = PAPER_PATIENCE if paper_decoding else 1
        results = self.translator.translate_batch(
            sources,
            beam_size=beams,
            patience=patience,
            num_hypotheses=beams * patience,
            length_penalty=self.length_penalty,
            return_end_token=True,  # |Y| counts </s>, as generate() counts it
            return_scores=True,
            max_input_length=0,  # CTranslate2 would cut sources at 1024 tokens without a word
            max_decoding_length=limit,
            min_decoding_length=0,  # CTranslate2's default 1 forbids </s> first, which generate() allows
        )
        if paper_decoding:
            best = [paper_best(result.hypotheses, result.scores, self.length_penalty) for result in results]
        else:
            best = [result.hypotheses[0] for result in results]
        return [[self.ids[name] for name in tokens] for tokens in best]
