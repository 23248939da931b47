"""Word alignments from the encoder-decoder attention (evaluation/alignment.py), against references computed here:
attention recorded step by step by a greedy decoding loop written below (no cache, one sentence at a time), word
scores and links worked out by hand, Pharaoh text by hand, words rebuilt from the tokens' own text; and, with the
main job's model, a quality bound against eflomal's alignments of a shipped sample (slow)."""

import json
import os
from pathlib import Path

import pytest
import torch
from helpers.tiny_models import EOS, PAD, padded_batch, tiny_model
from helpers.training_setup import REPO
from transformers import AutoTokenizer

from modeling_vaswani import VaswaniForConditionalGeneration
from modeling_vaswani.toolkit.translation.alignment import (
    ALIGNMENT_AGGREGATION,
    ALIGNMENT_HEADS,
    ALIGNMENT_LAYER,
    SentenceAttention,
    argmax_links,
    forced_cross_attention,
    parse_pharaoh,
    pharaoh,
    sentence_attention,
    token_words,
    word_alignments,
    word_scores,
)
from modeling_vaswani.toolkit.translation.translate import InputError

# ---- (a) the forced pass is the attention the search saw -----------------------------------------------------------


@torch.no_grad()
def greedy_with_attention(model, source: torch.Tensor, steps: int) -> tuple[list[int], torch.Tensor]:
    """Greedy decoding of one unpadded source, a full pass over the whole prefix each step (no cache), keeping each
    step's encoder-decoder attention of its last position: (layers, heads, steps, source tokens). Step t's attention
    is the one under which token t was chosen."""
    prefix, rows = [model.config.decoder_start_token_id], []
    for _ in range(steps):
        outputs = model(
            input_ids=source[None], decoder_input_ids=torch.tensor([prefix]), output_attentions=True, use_cache=False
        )
        rows.append(torch.stack([layer[0, :, -1, :] for layer in outputs.cross_attentions]))
        prefix.append(int(outputs.logits[0, -1].argmax()))
        if prefix[-1] == EOS:
            break
    return prefix[1:], torch.stack(rows, dim=2)


def test_forced_attention_is_the_attention_of_each_greedy_step_batched_and_padded():
    model = tiny_model(seed=3)
    ids, mask = padded_batch([9, 4, 7], seed=1)
    decoded = [greedy_with_attention(model, row[: int(m.sum())], steps=8) for row, m in zip(ids, mask, strict=True)]
    longest = max(len(tokens) for tokens, _ in decoded)
    labels = torch.full((len(decoded), longest), PAD)
    for row, (tokens, _) in enumerate(decoded):
        labels[row, : len(tokens)] = torch.tensor(tokens)
    forced = forced_cross_attention(model, ids, mask, labels)
    assert len(forced) == model.config.decoder_layers
    for row, (tokens, recorded) in enumerate(decoded):
        length, source_length = len(tokens), int(mask[row].sum())
        mine = torch.stack([layer[row, :, :length, :source_length] for layer in forced])
        torch.testing.assert_close(mine, recorded, rtol=1e-5, atol=1e-6)
        # the source's padding gets no attention
        assert float(torch.stack([layer[row, :, :length, source_length:] for layer in forced]).abs().sum()) == 0.0
        # the test can tell the offset: the rows one step off (attention where token t is READ) differ
        assert not torch.allclose(mine[:, :, 1:], recorded[:, :, :-1], atol=1e-3)


def test_forced_attention_rows_follow_the_decoder_input_not_the_labels_after_them():
    """Row t depends on the labels before t only (the decoder's causality): changing label t leaves rows 0..t alone
    and moves row t + 1."""
    model = tiny_model(seed=5)
    ids, mask = padded_batch([6], seed=2)
    labels = torch.tensor([[10, 11, 12, 13, EOS]])
    changed = labels.clone()
    changed[0, 2] = 40
    before, after = (torch.stack(forced_cross_attention(model, ids, mask, x)) for x in (labels, changed))
    torch.testing.assert_close(before[..., :3, :], after[..., :3, :])
    assert not torch.allclose(before[..., 3, :], after[..., 3, :], atol=1e-4)


# ---- (b) subword attention to word links, by hand ------------------------------------------------------------------

# Target tokens: word 0 (two subwords), word 1 (one), </s>. Source tokens: word 0 (one), word 1 (two), </s>.
TARGET_WORDS = [0, 0, 1, -1]
SOURCE_WORDS = [0, 1, 1, -1]
ATTENTION = torch.tensor(
    [
        [0.10, 0.50, 0.20, 0.20],
        [0.60, 0.10, 0.10, 0.20],
        [0.34, 0.40, 0.20, 0.06],
        [0.00, 0.00, 0.00, 1.00],  # </s>'s row: left out (were it word 1's, max would not change but sum would)
    ]
)
BY_HAND = {
    # (t0, s0) = {0.10, 0.60}; (t0, s1) = {0.50, 0.20, 0.10, 0.10}; (t1, s0) = {0.34}; (t1, s1) = {0.40, 0.20}
    "mean": ([[0.35, 0.225], [0.34, 0.30]], [(0, 0), (0, 1)]),
    "max": ([[0.60, 0.50], [0.34, 0.40]], [(0, 0), (1, 1)]),
    "sum": ([[0.70, 0.90], [0.34, 0.60]], [(1, 0), (1, 1)]),
}


@pytest.mark.parametrize("aggregation", sorted(BY_HAND))
def test_word_scores_and_links_by_hand(aggregation):
    expected, links = BY_HAND[aggregation]
    scores = word_scores(ATTENTION, TARGET_WORDS, SOURCE_WORDS, aggregation)
    torch.testing.assert_close(scores, torch.tensor(expected))
    assert argmax_links(scores) == links


def test_word_scores_refuse_a_shape_or_aggregation_that_does_not_fit():
    with pytest.raises(ValueError, match="attention of shape"):
        word_scores(ATTENTION[:3], TARGET_WORDS, SOURCE_WORDS)
    with pytest.raises(ValueError, match="unknown aggregation"):
        word_scores(ATTENTION, TARGET_WORDS, SOURCE_WORDS, "median")


def test_links_choose_the_layer_and_heads_as_asked():
    """Two layers of two heads: layer 0's heads agree on source word 1; layer 1's head 0 says word 0, its head 1 word
    1 more weakly, so their average says word 0."""
    sources, targets = [0, 1, -1], [0, -1]
    layer0 = torch.tensor([[[0.2, 0.7, 0.1], [0, 0, 1]], [[0.3, 0.6, 0.1], [0, 0, 1]]])
    layer1 = torch.tensor([[[0.9, 0.05, 0.05], [0, 0, 1]], [[0.4, 0.5, 0.1], [0, 0, 1]]])
    sentence = SentenceAttention(torch.stack([layer0, layer1]), targets, sources)
    assert sentence.links(layer=0) == [(1, 0)]
    assert sentence.links(layer=1) == sentence.links(layer=-1) == [(0, 0)]
    assert sentence.links(layer=1, heads=(1,)) == [(1, 0)]
    with pytest.raises(ValueError, match="decoder layer 2 does not exist"):
        sentence.links(layer=2)
    with pytest.raises(ValueError, match="heads"):
        sentence.links(layer=0, heads=(2,))


def test_links_of_all_layers_averaged_by_hand():
    layer0 = torch.tensor([[[0.2, 0.7, 0.1], [0, 0, 1]], [[0.3, 0.6, 0.1], [0, 0, 1]]])
    layer1 = torch.tensor([[[0.9, 0.05, 0.05], [0, 0, 1]], [[0.4, 0.5, 0.1], [0, 0, 1]]])
    sentence = SentenceAttention(torch.stack([layer0, layer1]), [0, -1], [0, 1, -1])
    # word 0: (0.2 + 0.3 + 0.9 + 0.4) / 4 = 0.45; word 1: (0.7 + 0.6 + 0.05 + 0.5) / 4 = 0.4625
    assert sentence.links(layer=None) == [(1, 0)]


def test_token_words_by_hand():
    text = "Ein  Mann, Größe"
    # as byte-level BPE offsets come: each token's span holds the space before it; a lone "Ġ" is a space
    offsets = [(0, 3), (3, 4), (4, 9), (9, 10), (10, 13), (13, 14), (14, 16), (0, 0)]
    special = [0, 0, 0, 0, 0, 0, 0, 1]
    assert token_words(text, offsets, special) == [0, -1, 1, 1, 2, 2, 2, -1]
    assert token_words("x", [(0, 1), (0, 1), (0, 0)], [0, 0, 1]) == [0, 0, -1]  # "Ġ" + "x": the prefix space


SOURCES = ["A man rides a bike.", "Two  dogs play in the snow near Großmünster.", "Girls.", "People walk"]
TRANSLATIONS = ["Ein Mann fährt Fahrrad.", "Zwei Hunde  spielen im Schnee, unweit des Großmünsters.", "Mädchen.", ""]


def test_every_token_belongs_to_the_whitespace_word_its_text_spells(loaded):
    """The words rebuilt from each word's tokens, by the tokenizer's own detokenizer, are `text.split()`."""
    model, tokenizer = loaded
    attention = sentence_attention(model, tokenizer, SOURCES, TRANSLATIONS)
    for sentence, source, translation in zip(attention, SOURCES, TRANSLATIONS, strict=True):
        if not translation:
            assert sentence is None
            continue
        for text, words, side in (
            (source, sentence.source_words, "source"),
            (translation, sentence.target_words, "t"),
        ):
            ids = tokenizer(**{"text" if side == "source" else "text_target": text})["input_ids"]
            assert len(ids) == len(words)
            tokens = tokenizer.convert_ids_to_tokens(ids)
            assert tokens[-1] == tokenizer.eos_token and words[-1] == -1
            rebuilt = [
                tokenizer.convert_tokens_to_string(
                    [t for t, w in zip(tokens, words, strict=True) if w == word]
                ).strip()
                for word in range(len(text.split()))
            ]
            assert rebuilt == text.split()
            # tokens of no word are whitespace or special
            assert all(
                tokenizer.convert_tokens_to_string([t]).strip() == ""
                for t, w in zip(tokens[:-1], words[:-1], strict=True)
                if w < 0
            )


def test_batched_attention_equals_each_pair_alone(loaded):
    model, tokenizer = loaded
    together = sentence_attention(model, tokenizer, SOURCES, TRANSLATIONS, batch_size=3)
    for source, translation, batched in zip(SOURCES, TRANSLATIONS, together, strict=True):
        if not translation:
            continue
        source_ids = torch.tensor([tokenizer(source)["input_ids"]])
        labels = torch.tensor([tokenizer(text_target=translation)["input_ids"]])
        alone = forced_cross_attention(model, source_ids, torch.ones_like(source_ids), labels)
        torch.testing.assert_close(batched.attention, torch.stack([layer[0] for layer in alone]), rtol=1e-5, atol=1e-6)


def test_word_alignments_link_every_target_word_once_in_target_order(loaded):
    model, tokenizer = loaded
    alignments = word_alignments(model, tokenizer, SOURCES, TRANSLATIONS, batch_size=2)
    for links, source, translation in zip(alignments, SOURCES, TRANSLATIONS, strict=True):
        assert [target for _, target in links] == list(range(len(translation.split())))
        assert all(0 <= s < len(source.split()) for s, _ in links)
    assert alignments[-1] == []  # an empty translation has no words to link
    attention = sentence_attention(model, tokenizer, SOURCES, TRANSLATIONS)
    assert alignments == [
        [] if a is None else a.links(ALIGNMENT_LAYER, ALIGNMENT_HEADS, ALIGNMENT_AGGREGATION) for a in attention
    ]


def test_word_alignments_refuse_what_they_cannot_align(loaded):
    model, tokenizer = loaded
    with pytest.raises(ValueError, match="2 source sentences and 1 translations"):
        word_alignments(model, tokenizer, SOURCES[:2], TRANSLATIONS[:1])
    with pytest.raises(InputError, match="sentence 2 is empty"):
        word_alignments(model, tokenizer, ["A man.", " "], ["Ein Mann.", "x"])
    with pytest.raises(InputError, match="translations is a str"):
        word_alignments(model, tokenizer, ["A man."], "Ein Mann.")
    with pytest.raises(ValueError, match="unknown aggregation"):
        word_alignments(model, tokenizer, SOURCES, TRANSLATIONS, aggregation="median")

    class Exported:  # as translation/ctranslate2.py's CTranslate2Model: no attention weights to read
        engine = "ctranslate2"

    with pytest.raises(ValueError, match="need.s. the PyTorch model's attention weights"):
        word_alignments(Exported(), tokenizer, SOURCES, TRANSLATIONS)


# ---- (c) Pharaoh text --------------------------------------------------------------------------------------------


def test_pharaoh_by_hand():
    assert pharaoh([(0, 0), (2, 1), (1, 2), (10, 3)]) == "0-0 2-1 1-2 10-3"
    assert pharaoh([]) == ""
    assert parse_pharaoh("0-0 2-1  1-2\n3?4") == [(0, 0), (2, 1), (1, 2), (3, 4)]
    assert parse_pharaoh("") == []
    for bad in ([(-1, 0)], [(0, 1, 2)], [(0.0, 1)], [(True, 1)]):
        with pytest.raises(ValueError, match="not a pair of word positions"):
            pharaoh(bad)
    for bad in ("0-", "a-1", "1:2", "0-1-2"):
        with pytest.raises(ValueError, match="not a Pharaoh link"):
            parse_pharaoh(bad)


# ---- (d) quality against eflomal, with the main job's model (slow) -----------------------------------------------

SAMPLE = Path(__file__).parent / "data" / "alignment_test2016_sample.jsonl"
# The main job's model (vaswani-train's output, `runs/small/averaged` in the checkout) or VASWANI_ALIGNMENT_MODEL.
MAIN_MODEL = Path(os.environ.get("VASWANI_ALIGNMENT_MODEL", REPO / "runs" / "small" / "averaged"))
# The bound: F1 against eflomal of at least F1_FLOOR (%), and at least MARGIN points above the diagonal baseline's.
F1_FLOOR = 70.0
MARGIN = 10.0


def f1(predicted, reference) -> float:
    hits = sum(len(set(p) & set(r)) for p, r in zip(predicted, reference, strict=True))
    return 200 * hits / (sum(map(len, predicted)) + sum(map(len, reference)))


@pytest.mark.slow
def test_alignments_of_the_main_model_agree_with_eflomal_past_the_bound():
    """The sample is every 10th test2016 pair (100): the source, the main job's translation of it (38.44 BLEU model),
    and eflomal's grow-diag-final-and links of that pair, trained on Multi30k train + the model's validation and
    test2016 pairs, all written by `benchmarks/alignment.py --write_sample`."""
    if not (MAIN_MODEL / "config.json").exists():
        pytest.skip(f"no trained model at {MAIN_MODEL} (run vaswani-train, or set VASWANI_ALIGNMENT_MODEL)")
    rows = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 100
    sources, translations = [r["source"] for r in rows], [r["translation"] for r in rows]
    reference = [parse_pharaoh(r["eflomal"]) for r in rows]
    model = VaswaniForConditionalGeneration.from_pretrained(MAIN_MODEL).eval()
    tokenizer = AutoTokenizer.from_pretrained(MAIN_MODEL)
    mine = word_alignments(model, tokenizer, sources, translations)
    diagonal = [
        [(min(len(s.split()) - 1, int((j + 0.5) * len(s.split()) / len(t.split()))), j) for j in range(len(t.split()))]
        for s, t in zip(sources, translations, strict=True)
    ]
    ours, baseline = f1(mine, reference), f1(diagonal, reference)
    assert ours >= F1_FLOOR and ours >= baseline + MARGIN, f"F1 {ours:.1f} against eflomal, diagonal {baseline:.1f}"
