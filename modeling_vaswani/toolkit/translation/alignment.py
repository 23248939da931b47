"""Word alignments of a translation to its source, from the model's own encoder-decoder attention (the
attention-based method of Garg et al. 2019, "Jointly Learning to Align and Translate with Transformer Models": the
attention averaged over heads, each target word aligned to the source word it attends to most), written as Pharaoh
links ("0-0 1-2 ...": source-target word positions), as fairseq's `--print-alignment` and Marian's `--alignment`
write them.

Words are the word positions of the detokenized text, split on whitespace: `text.split()` of the source as given and
of the translation as `translate` returns it. A word pair's score is the mean of the attention of its subword
(byte-level BPE) pairs; `</s>`, padding and tokens of whitespace alone belong to no word. The attention of target
token t is the one of the decoding step that predicted it.

Which layers and heads (all of them, averaged) and the mean were chosen on Multi30k's validation set against eflomal's
alignments of the same sentence pairs (benchmarks/alignment.py; ALIGNMENT_LAYER below, docs/documents.md).
"""

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from tqdm.auto import tqdm

from ..data.sentences import Layout
from .request import CheckedRequest, TranslationRequest
from .translate import (
    DEFAULT_BATCH_SIZE,
    OPTIONS,
    InputError,
    check_sentences,
    checked_request,
    decode_request,
    length_batches,
)

# Which encoder-decoder attention aligns: ALIGNMENT_LAYER, a decoder layer (an index, negative from the top) or None
# for all layers averaged; ALIGNMENT_HEADS, the heads averaged (None: all); ALIGNMENT_AGGREGATION, how a word pair's
# score gathers its subword pairs. Chosen on Multi30k validation (1,014 pairs: the main job's 3-layer small model's own
# translations, against eflomal's grow-diag-final-and alignments of the same pairs; benchmarks/alignment.py,
# 2026-11-26), best F1 of the choices that mean the same for any model (every head averaged): all layers averaged,
# mean: F1 75.3 (max 74.4, sum 71.5); one layer: 43.6 (layer 0), 72.4 (layer 1, the penultimate, Garg et al.'s
# choice), 64.8 (layer 2); the diagonal baseline 50.1. On test2016: F1 75.5, AER 24.5. One head alone does a little
# better here (layer 1's head 3: 75.6) but names a head of this model only. docs/documents.md#word-alignments.
ALIGNMENT_LAYER: int | None = None
ALIGNMENT_HEADS: tuple[int, ...] | None = None
ALIGNMENT_AGGREGATION = "mean"

AGGREGATIONS = ("mean", "max", "sum")


def pharaoh(pairs: Sequence[tuple[int, int]]) -> str:
    """Links as Pharaoh text: "i-j" for source word i and target word j (0-based), space-separated, in the order
    given ("" for none)."""
    for pair in pairs:
        if len(pair) != 2 or any(not isinstance(i, int) or isinstance(i, bool) or i < 0 for i in pair):
            raise ValueError(
                f"alignment link {pair!r} is not a pair of word positions; expected (source, target), both >= 0"
            )
    return " ".join(f"{source}-{target}" for source, target in pairs)


def parse_pharaoh(text: str) -> list[tuple[int, int]]:
    """Pharaoh text ("0-0 1-2", fast_align's and eflomal's output, "i-j" or "i?j" for a possible link) as
    (source, target) pairs, in order."""
    pairs = []
    for link in text.split():
        source, separator, target = link.replace("?", "-").partition("-")
        if not separator or not source.isdigit() or not target.isdigit():
            raise ValueError(f"{link!r} is not a Pharaoh link; expected SOURCE-TARGET word positions, as 0-1")
        pairs.append((int(source), int(target)))
    return pairs


def char_words(text: str) -> list[int]:
    """The word (position in `text.split()`) each character of `text` belongs to, -1 for whitespace."""
    word_of_char = [-1] * len(text)
    word, inside = -1, False
    for position, char in enumerate(text):
        if char.isspace():
            inside = False
            continue
        if not inside:
            word, inside = word + 1, True
        word_of_char[position] = word
    return word_of_char


def token_words(text: str, offsets: Sequence[tuple[int, int]], special: Sequence[int]) -> list[int]:
    """The word (position in `text.split()`) each token belongs to, -1 for none: a special token (`special` is the
    tokenizer's special-tokens mask), padding, or a token whose characters are all whitespace. A token belongs to the
    word holding its first non-space character (byte-level BPE tokens carry the space before their word: "ĠMann")."""
    word_of_char = char_words(text)
    words = []
    for (start, end), is_special in zip(offsets, special, strict=True):
        found = -1
        if not is_special:
            found = next((word_of_char[c] for c in range(start, min(end, len(text))) if word_of_char[c] >= 0), -1)
        words.append(found)
    return words


def word_scores(
    attention: torch.Tensor,
    target_words: Sequence[int],
    source_words: Sequence[int],
    aggregation: str = ALIGNMENT_AGGREGATION,
) -> torch.Tensor:
    """A (target words, source words) matrix of scores from a (target tokens, source tokens) attention matrix:
    each word pair's subword pairs gathered by `aggregation` ("mean", "max" or "sum"). Tokens of word -1 are left
    out. The word counts are those of the highest word positions present."""
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {aggregation!r}; expected one of {list(AGGREGATIONS)}")
    if attention.shape != (len(target_words), len(source_words)):
        raise ValueError(
            f"attention of shape {tuple(attention.shape)} for {len(target_words)} target and {len(source_words)} "
            "source token words"
        )
    attention = attention.float()
    rows, columns = max(target_words, default=-1) + 1, max(source_words, default=-1) + 1
    target = torch.as_tensor(list(target_words), dtype=torch.long)
    source = torch.as_tensor(list(source_words), dtype=torch.long)
    # Word -1 goes to an extra last bucket, dropped at the end.
    target = torch.where(target < 0, rows, target)
    source = torch.where(source < 0, columns, source)
    reduce = "amax" if aggregation == "max" else "sum"
    by_source = attention.new_zeros(len(target_words), columns + 1)
    by_source.scatter_reduce_(1, source.expand(len(target_words), -1), attention, reduce, include_self=False)
    scores = attention.new_zeros(rows + 1, columns + 1)
    scores.scatter_reduce_(0, target[:, None].expand(-1, columns + 1), by_source, reduce, include_self=False)
    scores = scores[:rows, :columns]
    if aggregation == "mean":
        target_counts = torch.bincount(target, minlength=rows + 1)[:rows]
        source_counts = torch.bincount(source, minlength=columns + 1)[:columns]
        scores = scores / (target_counts[:, None] * source_counts).clamp(min=1)
    return scores


def argmax_links(scores: torch.Tensor) -> list[tuple[int, int]]:
    """Each target word (row) linked to its highest-scoring source word (column; the first, on a tie), as (source,
    target) pairs in target order. A matrix with no columns links nothing."""
    if scores.shape[0] == 0 or scores.shape[1] == 0:
        return []
    return [(int(source), target) for target, source in enumerate(scores.argmax(dim=1).tolist())]


def decoder_inputs(model, labels: torch.Tensor) -> torch.Tensor:
    """The decoder's input for teacher forcing `labels` (right-padded, `</s>` last): the start token, then the labels
    shifted right. Position t of the decoder reads labels[:t] and predicts labels[t]."""
    start = torch.full_like(labels[:, :1], model.config.decoder_start_token_id)
    return torch.cat((start, labels[:, :-1]), dim=1)


@torch.no_grad()
def forced_cross_attention(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """The encoder-decoder attention of every decoder layer, (batch, heads, target tokens, source tokens) each, with
    `labels` (the chosen translation's tokens, `</s>` last, padded with the pad token) forced through the decoder in
    one teacher-forced pass. Row t is the attention of the step that predicted labels[t].

    These are exactly the weights the search saw for that translation: the decoder is deterministic given its prefix
    (causal self-attention: position t reads only the tokens before it), so forcing the chosen tokens reproduces, row
    by row, the attention of the decoding steps that chose them, whatever search chose them (beam, greedy, a
    prefix). Padding: source padding gets no attention (the encoder mask), and target padding only adds rows after a
    sentence's own, which are dropped."""
    outputs = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        decoder_input_ids=decoder_inputs(model, labels),
        output_attentions=True,
    )
    attention = getattr(outputs, "cross_attentions", None) or ()
    if len(attention) != model.config.decoder_layers:  # other kernels return no weights (flex attention)
        raise ValueError(
            f"The model's {model.config._attn_implementation!r} attention returned no encoder-decoder attention "
            "weights; word alignments need 'sdpa' or 'eager' (from_pretrained(attn_implementation='sdpa'))"
        )
    return attention


def select_attention(
    attention: Sequence[torch.Tensor], layer: int | None = ALIGNMENT_LAYER, heads: Sequence[int] | None = None
) -> torch.Tensor:
    """One (batch, target tokens, source tokens) matrix from the layers' attention: `layer`'s (None: all layers
    averaged), its `heads` averaged (None: all of them)."""
    count = len(attention)
    if layer is not None and not -count <= layer < count:
        raise ValueError(
            f"decoder layer {layer} does not exist; the model has {count} (0 to {count - 1}, or -1 to -{count})"
        )
    stacked = torch.stack(list(attention) if layer is None else [attention[layer]]).float()
    if heads is not None:
        heads = list(heads)
        bad = [head for head in heads if not 0 <= head < stacked.shape[2]]
        if not heads or bad:
            raise ValueError(
                f"heads {heads} are not a choice of the {stacked.shape[2]} heads 0 to {stacked.shape[2] - 1}"
            )
        stacked = stacked[:, :, heads]
    return stacked.mean(dim=(0, 2))


@dataclass
class SentenceAttention:
    """One sentence pair's encoder-decoder attention, every decoder layer's: (layers, heads, target tokens, source
    tokens), padding cut off, `</s>` kept. Row t is the step that predicted target token t. `target_words` and
    `source_words` give each token's word (-1 for none: `</s>`, a token of whitespace alone)."""

    attention: torch.Tensor
    target_words: list[int]
    source_words: list[int]

    def links(
        self,
        layer: int | None = ALIGNMENT_LAYER,
        heads: Sequence[int] | None = ALIGNMENT_HEADS,
        aggregation: str = ALIGNMENT_AGGREGATION,
    ) -> list[tuple[int, int]]:
        """The word alignment this attention gives: (source, target) word pairs, one a target word, in target order."""
        if not any(word >= 0 for word in self.target_words):
            return []
        matrix = select_attention(tuple(self.attention[:, None]), layer, heads)[0]
        return argmax_links(word_scores(matrix, self.target_words, self.source_words, aggregation))


def _offsets(tokenizer, texts: list[str], side: str) -> dict:
    argument = "text" if side == "source" else "text_target"
    try:
        return tokenizer(
            **{argument: texts},
            return_offsets_mapping=True,
            return_special_tokens_mask=True,
            padding=True,
            return_tensors="pt",
        )
    except NotImplementedError as error:  # a Python ("slow") tokenizer has no character offsets
        raise ValueError(
            f"word alignments need a fast tokenizer (character offsets); {type(tokenizer).__name__} has none"
        ) from error


def sentence_attention(
    model,
    tokenizer,
    sources: Sequence[str],
    translations: Sequence[str],
    batch_size: int | None = None,
    max_tokens: int | None = None,
    max_input_tokens: int | None = None,
    progress: bool = False,
) -> list[SentenceAttention | None]:
    """Each pair's encoder-decoder attention with the translation forced through the decoder
    (`forced_cross_attention`), and the words of its tokens; None for an empty translation. Batched as `score`
    batches pairs (by the longer side, `batch_size` pairs or `max_tokens` padded tokens a side)."""
    request = alignment_request(model, batch_size, max_tokens, max_input_tokens, progress)
    return request_attention(model, tokenizer, sources, translations, request)


def alignment_request(model, batch_size, max_tokens, max_input_tokens, progress) -> CheckedRequest:
    """The request of aligning translations with `model` in batches so limited, checked once
    (`TranslationRequest.check_for`): a model without attention weights (a CTranslate2 export, a kernel that returns
    none) is refused before any work."""
    limits = {"batch_size": batch_size, "max_tokens": max_tokens, "max_input_tokens": max_input_tokens}
    return TranslationRequest(alignments=True, progress=progress, **limits).check_for(model)


def request_attention(model, tokenizer, sources, translations, request: CheckedRequest):
    """`sentence_attention` in the batches of a checked request that asks alignments (its front end's one check)."""
    batch_size, max_tokens, max_input_tokens = request.batch_size, request.max_tokens, request.max_input_tokens
    if batch_size is None and max_tokens is None:
        batch_size = DEFAULT_BATCH_SIZE
    if isinstance(translations, str):
        raise InputError("translations is a str; expected a list of translations (a single one in a list)")
    if len(sources) != len(translations):
        raise ValueError(
            f"{len(sources)} source sentences and {len(translations)} translations; expected one a source"
        )
    source_lengths = check_sentences(tokenizer, sources, max_input_tokens)
    for number, translation in enumerate(translations, start=1):
        if not isinstance(translation, str):
            raise InputError(f"translation {number} is a {type(translation).__name__}; expected a str", number)
    aligned = [i for i, translation in enumerate(translations) if translation.strip()]
    target_lengths = check_sentences(tokenizer, [translations[i] for i in aligned], max_input_tokens, side="target")
    lengths = [max(source_lengths[i], length) for i, length in zip(aligned, target_lengths, strict=True)]
    model.eval()
    results: list[SentenceAttention | None] = [None] * len(sources)
    with tqdm(total=len(aligned), desc="aligning", unit="sentence", disable=not request.progress) as bar:
        for batch_indices in length_batches(lengths, batch_size, max_tokens):
            indices = [aligned[i] for i in batch_indices]
            source_texts, target_texts = [sources[i] for i in indices], [translations[i] for i in indices]
            source = _offsets(tokenizer, source_texts, "source")
            target = _offsets(tokenizer, target_texts, "target")
            labels = target["input_ids"].masked_fill(target["attention_mask"].eq(0), model.config.pad_token_id)
            attention = forced_cross_attention(
                model, source["input_ids"].to(model.device), source["attention_mask"].to(model.device),
                labels.to(model.device),
            )  # fmt: skip
            attention = torch.stack(attention, dim=1).float().cpu()  # (batch, layers, heads, target, source)
            for row, index in enumerate(indices):
                source_length = int(source["attention_mask"][row].sum())
                target_length = int(target["attention_mask"][row].sum())
                results[index] = SentenceAttention(
                    attention[row, :, :, :target_length, :source_length].clone(),
                    token_words(
                        target_texts[row],
                        target["offset_mapping"][row, :target_length].tolist(),
                        target["special_tokens_mask"][row, :target_length].tolist(),
                    ),
                    token_words(
                        source_texts[row],
                        source["offset_mapping"][row, :source_length].tolist(),
                        source["special_tokens_mask"][row, :source_length].tolist(),
                    ),
                )
            bar.update(len(indices))
    return results


def word_alignments(
    model,
    tokenizer,
    sources: Sequence[str],
    translations: Sequence[str],
    layer: int | None = ALIGNMENT_LAYER,
    heads: Sequence[int] | None = ALIGNMENT_HEADS,
    aggregation: str = ALIGNMENT_AGGREGATION,
    batch_size: int | None = None,
    max_tokens: int | None = None,
    max_input_tokens: int | None = None,
    progress: bool = False,
) -> list[list[tuple[int, int]]]:
    """The word alignment of each `translations[i]` (the model's own, as `translate` returned it) to `sources[i]`:
    (source word, target word) pairs, words being the positions in `text.split()`, one pair a target word, in target
    order (`pharaoh` writes them as text). An empty translation has none.

    The translation is tokenized again and forced through the decoder once (`forced_cross_attention`): the
    encoder-decoder attention of decoder `layer` (negative: from the top; None: all layers averaged), its `heads`
    averaged (None: all), gives each target token's attention over the source tokens; a word pair scores the
    `aggregation` ("mean", "max", "sum") of its subword pairs, and each target word is linked to its best source
    word. The defaults are the choice measured on Multi30k validation (ALIGNMENT_LAYER, docs/documents.md).
    Batches and refusals are `score`'s."""
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {aggregation!r}; expected one of {list(AGGREGATIONS)}")
    request = alignment_request(model, batch_size, max_tokens, max_input_tokens, progress)
    return request_alignments(model, tokenizer, sources, translations, request, layer, heads, aggregation)


def request_alignments(
    model,
    tokenizer,
    sources: Sequence[str],
    translations: Sequence[str],
    request: CheckedRequest,
    layer: int | None = ALIGNMENT_LAYER,
    heads: Sequence[int] | None = ALIGNMENT_HEADS,
    aggregation: str = ALIGNMENT_AGGREGATION,
) -> list[list[tuple[int, int]]]:
    """`word_alignments` in the batches of a checked request that asks alignments or markup (its front end's one
    check: the model's attention weights can be read)."""
    attention = request_attention(model, tokenizer, sources, translations, request)
    return [[] if sentence is None else sentence.links(layer, heads, aggregation) for sentence in attention]


def piece_words(spacing: Sequence[str], pieces: Sequence[str]) -> list[list[int]]:
    """For each of `pieces` joined as `Layout.join` joins a line (spacing[0] + pieces[0] + spacing[1] + ...), the
    position in the joined line's `split()` of each word of the piece's own `split()`. Where whitespace separates the
    pieces it is the piece's word position plus the words before it; where none does, the words touching across the
    boundary are one word of the line, and both map to it."""
    line = []
    for gap, piece in zip(spacing, pieces, strict=False):  # spacing has one more item, after the last piece
        line.append(gap)
        line.append(piece)
    line_words = char_words("".join(line))
    positions, start = [], 0
    for gap, piece in zip(spacing, pieces, strict=False):
        start += len(gap)
        own = char_words(piece)
        positions.append(
            [line_words[start + i] for i, word in enumerate(own) if word >= 0 and (i == 0 or own[i - 1] != word)]
        )
        start += len(piece)
    return positions


def line_alignments(
    layout: Layout, translations: Sequence[str], alignments: Sequence[Sequence[tuple[int, int]]]
) -> list[list[tuple[int, int]]]:
    """Each line's alignment in the line's word positions, from its sentences' (`alignments`, one a sentence of
    `layout`, in the positions of `sentence.split()` and `translation.split()`): source words are those of the line
    (`layout.join(layout.sentences)`, the input line), target words those of the joined output line
    (`layout.join(translations)`). A line with no sentence, or whose translations are empty, has none ([])."""
    aligned = []
    for line, start in enumerate(layout.starts):
        end = start + layout.count(line)
        sources = piece_words(layout.spacing[line], layout.sentences[start:end])
        targets = piece_words(layout.spacing[line], translations[start:end])
        # Pairs of sentences not separated by whitespace can meet in one line word: each such pair once, in order.
        pairs = {
            (source_words[s], target_words[t]): None
            for source_words, target_words, sentence in zip(sources, targets, alignments[start:end], strict=True)
            for s, t in sentence
        }
        aligned.append(list(pairs))
    return aligned


@dataclass(frozen=True)
class AlignedTranslation:
    """A line's translation and its word alignment: (source word, target word) pairs, positions in the input line's
    `split()` and in `text.split()`, in target order (`pharaoh` writes them)."""

    text: str
    alignment: list[tuple[int, int]]


def translate_aligned(model, tokenizer, sentences: Sequence[str], **options) -> list[AlignedTranslation]:
    """`translate`'s translations (same arguments, same batches), each with its word alignment: every sentence is
    translated as `translate` does (`options`: its keyword arguments), then its translation aligned to it by
    `word_alignments`, in batches of the same `batch_size` and `max_tokens` (the chosen translation forced through
    the decoder once: the attention of the search's own steps). With `split_sentences`, a line's
    alignment is in the line's word positions (`line_alignments`): each sentence's pairs moved past the words of the
    sentences before it, in the source line and in the joined translation.

    An empty or blank line gives AlignedTranslation("", []); a sentence translated as nothing (the model's output
    empty) has no pairs, and the pairs of the other sentences of its line are unchanged. With an ensemble
    (`ensemble=`), the translation is the ensemble's and its alignment `model`'s attention over it. Refused before
    any translating where the model has no attention weights (the request's check: a CTranslate2 export, a kernel
    that returns none)."""
    asked = {name: options.pop(name) for name in OPTIONS if name in options}
    request, generate_kwargs = checked_request(model, sentences, options, alignments=True, **asked)
    return align_request(model, tokenizer, request, **generate_kwargs)


def align_request(model, tokenizer, request: CheckedRequest, **generate_kwargs) -> list[AlignedTranslation]:
    """`translate_aligned`'s answer for a request checked already (its front end's one check)."""
    layout, sources, translations = decode_request(model, tokenizer, request, **generate_kwargs)
    # The sources were checked against max_input_tokens before translating; a translation may be longer than a source.
    aligning = replace(request, max_input_tokens=None)
    pairs = request_alignments(model, tokenizer, sources, translations, aligning) if sources else []
    if layout is None:
        return [AlignedTranslation(text, links) for text, links in zip(translations, pairs, strict=True)]
    lines = zip(layout.join(translations), line_alignments(layout, translations, pairs), strict=True)
    return [AlignedTranslation(text, links) for text, links in lines]
