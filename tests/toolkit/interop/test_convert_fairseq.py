"""vaswani-convert fairseq against independent references written here: a checkpoint file in fairseq's layout (a dict
of "args", an argparse.Namespace, and "model", the state dict) with random weights; fairseq's Transformer forward and
decoding from its equations (fairseq/models/transformer, modules/transformer_layer.py, multihead_attention.py,
sinusoidal_positional_embedding.py, utils.make_positions); subword-nmt's BPE applied by rank; Moses' rules for the
common cases; BPE codes learned on Multi30k and a dictionary built as fairseq-preprocess builds it."""

import argparse
import collections
import json
import math
import os
import pathlib
import pickle
import re

import pytest
import torch
from helpers.fresh_process import reload_in_fresh_process
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, GenerationConfig

from modeling_vaswani import VaswaniForConditionalGeneration
from modeling_vaswani.toolkit.cli import convert
from modeling_vaswani.toolkit.data.corpora import multi30k_files, read_sentences
from modeling_vaswani.toolkit.interop.convert import ConversionError, departures
from modeling_vaswani.toolkit.interop.fairseq import (
    MOSES_NORMALIZER,
    MOSES_PRE_TOKENIZER,
    convert_fairseq,
    convert_fairseq_checkpoint,
    fairseq_tokenizer,
    find_release_files,
    load_checkpoint,
    read_codes,
    read_dictionary,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: tests/conftest.py

BOS, PAD, EOS, UNK = 0, 1, 2, 3
D_MODEL, HEADS, D_FF, LAYERS, MAX_POSITIONS = 16, 4, 32, 2, 64
SOURCES = ["A man in a blue shirt is riding a bike.", "Two dogs play in the snow.", "A girl, well-known, sings!"]
TARGETS = ["Ein Mann in einem blauen Hemd fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "Ein Mädchen singt."]


# === Moses and subword-nmt, as references ============================================================================


def moses(text: str) -> list[str]:
    """tokenizer.perl -l en -a (sacremoses as fairseq's hub calls it), its rules for the common cases, in its order,
    escaping last."""
    text = " ".join(text.split())
    text = re.sub(r"([^\w\s.'`,\-])", r" \1 ", text)  # everything but alphanumerics, whitespace and . ' ` , -
    text = re.sub(r"([^\W_])-(?=[^\W_])", r"\1 @-@ ", text)  # -a
    text = re.sub(r"([^\d]),", r"\1 , ", text)
    text = re.sub(r",([^\d])", r" , \1", text)
    text = re.sub(r"(\d),$", r"\1 ,", text)
    text = re.sub(r"([^a-zA-Z\u00C0-\u024F])'([^a-zA-Z\u00C0-\u024F])", r"\1 ' \2", text)  # English apostrophes
    text = re.sub(r"([^a-zA-Z\u00C0-\u024F\d])'([a-zA-Z\u00C0-\u024F])", r"\1 ' \2", text)
    text = re.sub(r"([a-zA-Z\u00C0-\u024F])'([^a-zA-Z\u00C0-\u024F])", r"\1 ' \2", text)
    text = re.sub(r"([a-zA-Z\u00C0-\u024F])'([a-zA-Z\u00C0-\u024F])", r"\1 '\2", text)
    text = re.sub(r"(\d)'(s)", r"\1 '\2", text)
    words = text.split()
    if words and re.fullmatch(r"\S+\.", words[-1]):  # the final period, unless the word is like "U.S."
        stem = words[-1][:-1]
        if not ("." in stem and re.search(r"[^\W\d_]", stem)):
            words[-1:] = [stem, "."]
    escapes = {"&": "&amp;", "|": "&#124;", "<": "&lt;", ">": "&gt;", "'": "&apos;", '"': "&quot;"}
    escapes.update({"[": "&#91;", "]": "&#93;"})
    return ["".join(escapes.get(character, character) for character in word) for word in words]


def learn_codes(words: list[str], vocab_size: int) -> list[tuple[str, str]]:
    """BPE merges with subword-nmt 0.2's word-final </w>, learned by the tokenizers library's trainer."""
    learner = Tokenizer(models.BPE(end_of_word_suffix="</w>"))
    learner.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, end_of_word_suffix="</w>", show_progress=False)
    learner.train_from_iterator([" ".join(words)], trainer=trainer)
    return [tuple(merge) for merge in json.loads(learner.to_str())["model"]["merges"]]


def subword_nmt(word: str, ranks: dict) -> list[str]:
    """subword-nmt 0.2's apply_bpe: </w> on the last character, the lowest-ranked pair merged everywhere, repeated;
    pieces of a word but its last end in "@@"."""
    symbols = [*word[:-1], word[-1] + "</w>"]
    while len(symbols) > 1:
        rank, pair = min((ranks.get(pair, math.inf), pair) for pair in zip(symbols, symbols[1:], strict=False))
        if rank == math.inf:
            break
        merged, i = [], 0
        while i < len(symbols):
            if tuple(symbols[i : i + 2]) == pair:
                merged.append(pair[0] + pair[1])
                i += 2
            else:
                merged.append(symbols[i])
                i += 1
        symbols = merged
    return [symbol.removesuffix("</w>") if symbol.endswith("</w>") else symbol + "@@" for symbol in symbols]


def fairseq_dictionary(pieces: list[str]) -> list[str]:
    """dict.txt's lines as fairseq-preprocess writes them: symbols by count, padded to a multiple of 8 (with the 4
    special symbols) with madeupwordNNNN."""
    counts = collections.Counter(pieces)
    lines = [f"{symbol} {count}" for symbol, count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))]
    lines += [f"madeupword{i:04d} 0" for i in range(-(len(lines) + 4) % 8)]
    return lines


class Corpus:
    """Codes learned on 1500 Multi30k training pairs (Moses-tokenized), the reference BPE, and dictionaries."""

    def __init__(self):
        files = multi30k_files("train")
        self.train = read_sentences(files["en"])[:1500] + read_sentences(files["de"])[:1500]
        self.words = [word for sentence in self.train for word in moses(sentence)]
        self.merges = learn_codes(self.words, 700)
        self.ranks = {merge: rank for rank, merge in enumerate(self.merges)}
        self.cache = {}

    def bpe(self, word: str) -> list[str]:
        if word not in self.cache:
            self.cache[word] = subword_nmt(word, self.ranks)
        return self.cache[word]

    def dictionary_lines(self, cover_merges: bool) -> list[str]:
        """From the segmented training text, as fairseq-preprocess builds it; with `cover_merges`, every symbol of
        the merges too (count 0), so that the tokenizer needs no ids past the dictionary."""
        pieces = [piece for word in self.words for piece in self.bpe(word)]
        if cover_merges:
            names = {name for left, right in self.merges for name in (left, right, left + right)}
            pieces += [name.removesuffix("</w>") if name.endswith("</w>") else name + "@@" for name in names]
        return fairseq_dictionary(pieces)

    def reference_ids(self, sentence: str, symbols: list[str]) -> list[int]:
        """The ids fairseq feeds: Moses, BPE, Dictionary.encode_line (unknown pieces <unk>), then </s>."""
        index = {symbol: i for i, symbol in enumerate(symbols)}
        return [index.get(piece, UNK) for word in moses(sentence) for piece in self.bpe(word)] + [EOS]


# === fairseq's Transformer, as a reference ===========================================================================


def fairseq_settings(**overrides) -> argparse.Namespace:
    values = dict(
        arch="transformer_vaswani_wmt_en_de_big",
        encoder_embed_dim=D_MODEL,
        decoder_embed_dim=D_MODEL,
        encoder_ffn_embed_dim=D_FF,
        decoder_ffn_embed_dim=D_FF,
        encoder_layers=LAYERS,
        decoder_layers=LAYERS,
        encoder_attention_heads=HEADS,
        decoder_attention_heads=HEADS,
        share_all_embeddings=True,
        share_decoder_input_output_embed=True,
        encoder_normalize_before=False,
        decoder_normalize_before=False,
        no_scale_embedding=False,
        dropout=0.3,
        attention_dropout=0.1,
        activation_fn="relu",
        max_source_positions=MAX_POSITIONS,
        max_target_positions=MAX_POSITIONS,
        source_lang="en",
        target_lang="de",
        left_pad_source=True,
    )
    return argparse.Namespace(**{**values, **overrides})


def random_state_dict(vocab_size: int, seed: int = 0) -> dict:
    """A fairseq Transformer's state dict (modern names, with its bookkeeping buffers), every weight random."""
    generator = torch.Generator().manual_seed(seed)

    def normal(*shape, mean=0.0, std=0.3):
        return torch.randn(*shape, generator=generator) * std + mean

    embedding = normal(vocab_size, D_MODEL, std=D_MODEL**-0.5)
    state = {"encoder.embed_tokens.weight": embedding, "decoder.embed_tokens.weight": embedding.clone()}
    state["decoder.output_projection.weight"] = embedding.clone()
    for stack in ("encoder", "decoder"):
        state[f"{stack}.version"] = torch.tensor([3.0])
        state[f"{stack}.embed_positions._float_tensor"] = torch.tensor([1.0])
        attentions = ("self_attn", "encoder_attn") if stack == "decoder" else ("self_attn",)
        for i in range(LAYERS):
            prefix = f"{stack}.layers.{i}"
            for attention in attentions:
                for projection in ("q_proj", "k_proj", "v_proj", "out_proj"):
                    state[f"{prefix}.{attention}.{projection}.weight"] = normal(D_MODEL, D_MODEL)
                    state[f"{prefix}.{attention}.{projection}.bias"] = normal(D_MODEL, std=0.2)
            state[f"{prefix}.fc1.weight"], state[f"{prefix}.fc1.bias"] = normal(D_FF, D_MODEL), normal(D_FF)
            state[f"{prefix}.fc2.weight"], state[f"{prefix}.fc2.bias"] = normal(D_MODEL, D_FF), normal(D_MODEL)
            for norm in (*(f"{attention}_layer_norm" for attention in attentions), "final_layer_norm"):
                state[f"{prefix}.{norm}.weight"] = normal(D_MODEL, mean=1.0, std=0.2)
                state[f"{prefix}.{norm}.bias"] = normal(D_MODEL, std=0.2)
    return state


def sinusoidal_positions(tokens: torch.Tensor) -> torch.Tensor:
    """SinusoidalPositionalEmbedding: make_positions numbers non-padding tokens from PAD + 1 (padding keeps PAD),
    rows [sin | cos] of position * exp(-i log(10000) / (half - 1)), the padding row zero."""
    mask = tokens.ne(PAD).long()
    positions = torch.cumsum(mask, dim=1) * mask + PAD
    half = D_MODEL // 2
    frequencies = torch.exp(torch.arange(half, dtype=torch.float) * -(math.log(10000) / (half - 1)))
    angles = torch.arange(int(positions.max()) + 1, dtype=torch.float)[:, None] * frequencies[None, :]
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    table[PAD] = 0
    return table[positions]


def linear(state, prefix, x):
    return x @ state[f"{prefix}.weight"].T + state[f"{prefix}.bias"]


def layer_norm(state, prefix, x):
    return torch.nn.functional.layer_norm(x, (D_MODEL,), state[f"{prefix}.weight"], state[f"{prefix}.bias"], 1e-5)


def attention(state, prefix, query, key_value, key_padding, causal=False):
    """MultiheadAttention: q scaled by head_dim^-0.5 after its projection, padded keys and future positions -inf."""
    head_dim = D_MODEL // HEADS

    def heads(x):
        return x.view(x.shape[0], x.shape[1], HEADS, head_dim).transpose(1, 2)

    q = heads(linear(state, f"{prefix}.q_proj", query) * head_dim**-0.5)
    k, v = heads(linear(state, f"{prefix}.k_proj", key_value)), heads(linear(state, f"{prefix}.v_proj", key_value))
    scores = (q @ k.transpose(2, 3)).masked_fill(key_padding[:, None, None, :], -math.inf)
    if causal:
        future = torch.ones(query.shape[1], key_value.shape[1], dtype=torch.bool).triu(1)
        scores = scores.masked_fill(future, -math.inf)
    output = (scores.softmax(-1) @ v).transpose(1, 2).reshape(query.shape)
    return linear(state, f"{prefix}.out_proj", output)


def feed_forward(state, prefix, x):
    return linear(state, f"{prefix}.fc2", torch.relu(linear(state, f"{prefix}.fc1", x)))


def reference_logits(state: dict, source: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
    """fairseq's post-LN Transformer with shared embeddings: x = sqrt(d) E[tokens] + positions, then per sublayer
    x = LayerNorm(x + Sublayer(x)); logits = x E^T."""
    embedding, scale = state["encoder.embed_tokens.weight"], math.sqrt(D_MODEL)
    x = scale * embedding[source] + sinusoidal_positions(source)
    source_padding = source.eq(PAD)
    for i in range(LAYERS):
        prefix = f"encoder.layers.{i}"
        x = layer_norm(
            state, f"{prefix}.self_attn_layer_norm", x + attention(state, f"{prefix}.self_attn", x, x, source_padding)
        )
        x = layer_norm(state, f"{prefix}.final_layer_norm", x + feed_forward(state, prefix, x))
    y = scale * embedding[previous] + sinusoidal_positions(previous)
    for i in range(LAYERS):
        prefix = f"decoder.layers.{i}"
        attended = attention(state, f"{prefix}.self_attn", y, y, previous.eq(PAD), causal=True)
        y = layer_norm(state, f"{prefix}.self_attn_layer_norm", y + attended)
        attended = attention(state, f"{prefix}.encoder_attn", y, x, source_padding)
        y = layer_norm(state, f"{prefix}.encoder_attn_layer_norm", y + attended)
        y = layer_norm(state, f"{prefix}.final_layer_norm", y + feed_forward(state, prefix, y))
    return y @ embedding.T


def reference_log_probs(state, source, previous):
    """fairseq's SequenceGenerator step: log-softmax of the last position, <pad> never chosen."""
    log_probs = reference_logits(state, source, previous)[:, -1].log_softmax(-1)
    log_probs[:, PAD] = -math.inf
    return log_probs


def reference_greedy(state, source: torch.Tensor, steps: int) -> list[list[int]]:
    """Greedy decoding from </s>, each sentence stopping at its </s>."""
    results = []
    for row in source:
        row = row[row.ne(PAD)][None]
        tokens = torch.tensor([[EOS]])
        for _ in range(steps):
            token = reference_log_probs(state, row, tokens).argmax(-1)
            tokens = torch.cat([tokens, token[:, None]], dim=1)
            if token.item() == EOS:
                break
        results.append(tokens[0].tolist())
    return results


def reference_beam(state, row: torch.Tensor, beams: int, steps: int) -> list[int]:
    """Beam search summing log-probabilities: the best 2k extensions of the k live hypotheses; one ending in </s>
    among the best k is finished; stop once k are finished (or after `steps`, the live ones joining them)."""
    row = row[row.ne(PAD)][None]
    live, finished = [([EOS], 0.0)], []
    for _ in range(steps):
        candidates = []
        for tokens, score in live:
            log_probs = reference_log_probs(state, row, torch.tensor([tokens]))[0]
            values, indices = log_probs.topk(2 * beams)
            candidates += [
                (score + value.item(), tokens + [index.item()]) for value, index in zip(values, indices, strict=True)
            ]
        candidates.sort(key=lambda candidate: -candidate[0])
        live = []
        for rank, (score, tokens) in enumerate(candidates[: 2 * beams]):
            if tokens[-1] == EOS:
                if rank < beams:
                    finished.append((score, tokens))
            elif len(live) < beams:
                live.append((tokens, score))
        if len(finished) >= beams:
            break
    finished += [(score, tokens) for tokens, score in live] if len(finished) < beams else []
    return max(finished, key=lambda hypothesis: hypothesis[0])[1]


# === Fixtures ========================================================================================================


@pytest.fixture(scope="module")
def corpus():
    return Corpus()


def write_release(folder: pathlib.Path, corpus: Corpus, cover_merges: bool = True, seed: int = 0, **settings):
    """A released folder as the tarballs unpack: model.pt (args + model), dict.en.txt, dict.de.txt, bpecodes."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = corpus.dictionary_lines(cover_merges)
    for lang in ("en", "de"):
        (folder / f"dict.{lang}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    codes = ["#version: 0.2", *(f"{left} {right}" for left, right in corpus.merges)]
    (folder / "bpecodes").write_text("\n".join(codes) + "\n", encoding="utf-8")
    state = random_state_dict(len(lines) + 4, seed)
    torch.save(
        {"args": fairseq_settings(**settings), "model": state, "extra_state": {"epoch": 3}}, folder / "model.pt"
    )
    return folder


@pytest.fixture(scope="module")
def release(corpus, tmp_path_factory):
    return write_release(tmp_path_factory.mktemp("fairseq") / "wmt16.en-de.joined-dict.transformer", corpus)


@pytest.fixture(scope="module")
def converted_folder(release, tmp_path_factory):
    folder = tmp_path_factory.mktemp("converted") / "vaswani"
    convert.main(["fairseq", str(release), str(folder)])
    return folder


@pytest.fixture(scope="module")
def converted(converted_folder):
    return AutoModelForSeq2SeqLM.from_pretrained(converted_folder).eval(), AutoTokenizer.from_pretrained(
        converted_folder
    )


@pytest.fixture(scope="module")
def state(release):
    return load_checkpoint(release / "model.pt")["model"]


@pytest.fixture(scope="module")
def batch(converted):
    _, tokenizer = converted
    return tokenizer(SOURCES, text_target=TARGETS, padding=True, return_tensors="pt")


def logits_difference(model, state, batch) -> float:
    """Largest |ours - reference| over the real (non-padding) target positions."""
    with torch.no_grad():
        ours = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]
        ).logits
    previous = model.prepare_decoder_input_ids_from_labels(batch["labels"])
    expected = reference_logits(state, batch["input_ids"], previous)
    real = batch["labels"].ne(PAD)
    return (ours[..., : expected.shape[-1]] - expected)[real].abs().max().item()


# === The tokenizer ===================================================================================================


def test_moses_rules_of_the_common_cases():
    text = "The dog's ball, well-known (red) & [blue], costs 1,000 dollars; don't \"run\"!"
    expected = (
        "The dog &apos;s ball , well @-@ known ( red ) &amp; &#91; blue &#93; , costs 1,000 dollars ; don &apos;t "
        "&quot; run &quot; !"
    )
    assert moses(text) == expected.split()
    sentences = (text, "A man in the U.S. rides a bike.", "Two dogs play in the snow .", "1990's rock 'n' roll.")
    for sentence in sentences:
        normalized = MOSES_NORMALIZER.normalize_str(sentence)
        assert [word for word, _ in MOSES_PRE_TOKENIZER.pre_tokenize_str(normalized)] == moses(sentence), sentence


@pytest.mark.parametrize("split", ["train", "validation"])
def test_the_tokenizer_feeds_the_ids_of_moses_subword_nmt_and_fairseqs_dictionary(corpus, split, tmp_path):
    """300 Multi30k sentences per language, seen (the dictionary's text) and unseen. Merge symbols the dictionary
    lacks get ids past it (the converted model embeds them as <unk>): counted as <unk> here."""
    lines = corpus.dictionary_lines(False)
    (tmp_path / "dict.txt").write_text("\n".join(lines) + "\n")
    symbols = read_dictionary(tmp_path / "dict.txt")
    assert symbols == ["<s>", "<pad>", "</s>", "<unk>"] + [line.rsplit(" ", 1)[0] for line in lines]
    tokenizer = fairseq_tokenizer(symbols, corpus.merges)
    files = multi30k_files(split)
    sentences = read_sentences(files["en"])[:300] + read_sentences(files["de"])[:300]
    got = [[UNK if token >= len(symbols) else token for token in ids] for ids in tokenizer(sentences)["input_ids"]]
    expected = [corpus.reference_ids(sentence, symbols) for sentence in sentences]
    assert got == expected
    unknown = sum(ids.count(UNK) for ids in expected)
    assert (unknown == 0) if split == "train" else (unknown > 0)  # unseen text meets pieces the dictionary lacks


def test_decoding_joins_the_pieces_and_undoes_the_common_spacing(converted, corpus):
    _, tokenizer = converted
    sentences = read_sentences(multi30k_files("validation")["en"])[:300]
    plain = [sentence for sentence in sentences if re.fullmatch(r"[\w ,.!?;:()\-]+", sentence)]
    assert len(plain) > 250
    decoded = tokenizer.batch_decode(tokenizer(plain)["input_ids"], skip_special_tokens=True)
    unknown = [sentence for sentence, ids in zip(plain, tokenizer(plain)["input_ids"], strict=True) if UNK in ids]
    assert [text for text, sentence in zip(decoded, plain, strict=True) if sentence not in unknown] == [
        sentence for sentence in plain if sentence not in unknown
    ]
    assert tokenizer.decode(tokenizer("A well-known dog (red).")["input_ids"], skip_special_tokens=True) == (
        "A well-known dog (red)."
    )


def test_codes_and_dictionaries_are_read_as_subword_nmt_and_fairseq_read_them(tmp_path):
    (tmp_path / "codes").write_text("#version: 0.2\nt h\nth e</w>\n")
    assert read_codes(tmp_path / "codes") == [("t", "h"), ("th", "e</w>")]
    (tmp_path / "fast").write_text("t h 120\nth e</w> 80\n")  # fastBPE: a count column, the same convention
    assert read_codes(tmp_path / "fast") == [("t", "h"), ("th", "e</w>")]
    (tmp_path / "old").write_text("t h\nth e\ne </w>\n")
    with pytest.raises(ConversionError, match="no '#version: 0.2' header: subword-nmt 0.1 codes"):
        read_codes(tmp_path / "old")
    (tmp_path / "dict.txt").write_text("the 10\n<unk> 1 #fairseq:overwrite\ncat@@ 3\n")
    assert read_dictionary(tmp_path / "dict.txt") == ["<s>", "<pad>", "</s>", "<unk>", "the", "cat@@"]
    (tmp_path / "dict.txt").write_text("the 10\nthe 3\n")
    with pytest.raises(ConversionError, match="line 2: 'the' is already in the dictionary"):
        read_dictionary(tmp_path / "dict.txt")
    (tmp_path / "dict.txt").write_text("the\n")
    with pytest.raises(ConversionError, match="line 1: 'the'; expected 'symbol count'"):
        read_dictionary(tmp_path / "dict.txt")


# === The model =======================================================================================================


def test_logits_equal_fairseqs(converted, state, batch):
    model, _ = converted
    assert type(model) is VaswaniForConditionalGeneration
    assert model.config.vocab_size == state["encoder.embed_tokens.weight"].shape[0]  # the dictionary covers the codes
    difference = logits_difference(model, state, batch)
    assert difference < 1e-5, difference
    with torch.no_grad():
        assert model(**batch).logits.abs().max() > 1  # logits of random weights, not near zero: a wrong mapping shows


def test_in_float64_the_logits_agree_to_its_rounding(converted, state, batch):
    """The mapping is exact: what float32 leaves (each side's own rounding) vanishes in float64."""
    model, _ = converted
    model64 = VaswaniForConditionalGeneration(model.config).double().eval()
    model64.load_state_dict(model.state_dict())
    state64 = {key: tensor.double() for key, tensor in state.items()}
    previous = model.prepare_decoder_input_ids_from_labels(batch["labels"])
    with torch.no_grad():
        ours = model64(**batch).logits
    expected = reference_logits(state64, batch["input_ids"], previous)
    difference = (ours - expected)[batch["labels"].ne(PAD)].abs().max().item()
    assert difference < 1e-12, difference


def decoding_settings(model, **values) -> GenerationConfig:
    """The converted model's generation settings (<pad> suppressed, as fairseq's generator does), changed by
    `values`; with num_beams k, length_penalty 0 and early stopping, transformers' beam search is reference_beam's."""
    return GenerationConfig(**{**model.generation_config.to_dict(), "do_sample": False, **values})


def test_greedy_tokens_equal_fairseqs(converted, state, batch):
    model, _ = converted
    source = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    settings = decoding_settings(model, num_beams=1, max_new_tokens=10)
    got = model.generate(**source, generation_config=settings)
    expected = reference_greedy(state, batch["input_ids"], steps=10)
    assert [row[: len(reference)] for row, reference in zip(got.tolist(), expected, strict=True)] == expected
    assert all(
        row[len(reference) :] == [PAD] * (len(row) - len(reference))
        for row, reference in zip(got.tolist(), expected, strict=True)
    )
    assert max(map(len, expected)) > 5


def test_beam_tokens_equal_fairseqs(converted, state, batch):
    model, _ = converted
    settings = decoding_settings(model, num_beams=4, max_new_tokens=6, length_penalty=0.0, early_stopping=True)
    source = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    got = model.generate(**source, generation_config=settings).tolist()
    for row, ids in zip(got, batch["input_ids"], strict=True):
        expected = reference_beam(state, ids, beams=4, steps=6)
        assert row == expected + [PAD] * (len(row) - len(expected))


def test_special_ids_decoder_start_and_departures_are_carried_over(converted, batch):
    model, tokenizer = converted
    config = model.config
    config_ids = (config.bos_token_id, config.pad_token_id, config.eos_token_id, config.decoder_start_token_id)
    assert config_ids == (BOS, PAD, EOS, EOS)  # fairseq's Dictionary; its prev_output_tokens begin with </s>
    tokenizer_ids = (tokenizer.bos_token_id, tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id)
    assert tokenizer_ids == (BOS, PAD, EOS, UNK)
    assert departures(config) == {
        "attention_bias": True,
        "layer_norm_eps": 1e-5,
        "position_embedding_type": "learned",
    }
    assert model.generation_config.suppress_tokens == [PAD]
    assert (model.generation_config.num_beams, model.generation_config.length_penalty) == (4, 0.6)  # Section 6.1
    lengths = batch["attention_mask"].sum(-1)
    assert batch["input_ids"][torch.arange(len(SOURCES)), lengths - 1].eq(EOS).all()  # sources end with </s> alone
    assert batch["input_ids"].eq(EOS).sum() == len(SOURCES) and batch["input_ids"][:, 0].ne(BOS).all()
    source = tokenizer(SOURCES, padding=True, return_tensors="pt")
    translated = model.generate(**source, paper_decoding=True, max_new_tokens=4)
    assert (translated[:, 0] == EOS).all()  # the decoder starts with </s>, as fairseq's prev_output_tokens


def test_the_position_table_is_fairseqs_sinusoids_from_position_two(converted):
    model, _ = converted
    table = model.model.encoder.positional_encoding.weight
    assert table.shape == (MAX_POSITIONS, D_MODEL)
    first_tokens = torch.tensor([[7] * MAX_POSITIONS])
    assert torch.equal(table, sinusoidal_positions(first_tokens)[0])
    assert torch.equal(model.model.decoder.positional_encoding.weight, table)


def test_the_saved_folder_reloads_in_a_fresh_process_and_translates(
    converted, converted_folder, state, batch, tmp_path
):
    model, tokenizer = converted
    reported, logits = reload_in_fresh_process(converted_folder, batch, SOURCES, tmp_path, max_new_tokens=8)
    assert reported["ids"] == tokenizer(SOURCES, padding=True)["input_ids"]
    source = tokenizer(SOURCES, padding=True, return_tensors="pt")
    expected = tokenizer.batch_decode(model.generate(**source, max_new_tokens=8), skip_special_tokens=True)
    assert reported["text"] == expected and all(expected)
    previous = model.prepare_decoder_input_ids_from_labels(batch["labels"])
    reference = reference_logits(state, batch["input_ids"], previous)
    assert (logits - reference)[batch["labels"].ne(PAD)].abs().max() < 1e-5


def test_a_dictionary_without_every_merge_symbol_embeds_those_as_unk(corpus, tmp_path):
    """fairseq-preprocess's dictionary holds the pieces of the segmented training text only; a merge symbol that
    never ends a segmentation there is <unk> to fairseq. The tokenizer gives it an id past the dictionary, which the
    converted model embeds as <unk> and never generates."""
    release = write_release(tmp_path / "release", corpus, cover_merges=False, seed=1)
    symbols = read_dictionary(release / "dict.en.txt")
    model, tokenizer = convert_fairseq(load_checkpoint(release / "model.pt"), symbols, corpus.merges)
    extra = len(tokenizer) - len(symbols)
    assert extra > 0 and model.config.vocab_size == len(tokenizer)
    assert model.generation_config.suppress_tokens == [PAD, *range(len(symbols), len(tokenizer))]
    shared = model.model.shared.weight
    assert torch.equal(shared[len(symbols) :], shared[[UNK] * extra])
    files = multi30k_files("validation")
    sentences = read_sentences(files["en"])[:300] + read_sentences(files["de"])[:300]
    ids = tokenizer(sentences)["input_ids"]
    hits = [(sentence, row) for sentence, row in zip(sentences, ids, strict=True) if max(row) >= len(symbols)]
    assert hits  # unseen text meets them
    state = load_checkpoint(release / "model.pt")["model"]
    for sentence, row in hits[:3]:
        reference = corpus.reference_ids(sentence, symbols)
        assert [UNK if token >= len(symbols) else token for token in row] == reference
        source, previous = torch.tensor([row]), torch.tensor([[EOS, 5, 6]])
        with torch.no_grad():
            ours = model(input_ids=source, decoder_input_ids=previous).logits
        expected = reference_logits(state, torch.tensor([reference]), previous)
        assert (ours[..., : len(symbols)] - expected).abs().max() < 1e-5
        assert torch.equal(ours[..., len(symbols) :], ours[..., [UNK] * extra])


def test_older_checkpoints_with_stacked_projections_and_listed_norms_convert_alike(release, state, batch, tmp_path):
    legacy = {}
    for key, tensor in state.items():
        match = re.fullmatch(r"(.+)\.(q_proj|k_proj|v_proj)\.(weight|bias)", key)
        if match:
            prefix, _, kind = match.groups()
            parts = [state[f"{prefix}.{projection}.{kind}"] for projection in ("q_proj", "k_proj", "v_proj")]
            legacy[f"{prefix}.in_proj_{kind}"] = torch.cat(parts)
            continue
        key = re.sub(r"(encoder\.layers\.\d+)\.self_attn_layer_norm", r"\1.layer_norms.0", key)
        legacy[re.sub(r"(encoder\.layers\.\d+)\.final_layer_norm", r"\1.layer_norms.1", key)] = tensor
    legacy.pop("decoder.output_projection.weight")  # older checkpoints tie it without storing it
    checkpoint = {"cfg": {"model": vars(fairseq_settings())}, "model": legacy}  # cfg as a plain dict
    symbols = read_dictionary(release / "dict.en.txt")
    model, _ = convert_fairseq(checkpoint, symbols, read_codes(release / "bpecodes"))
    assert logits_difference(model, state, batch) < 1e-5


# === Refusals ========================================================================================================


@pytest.mark.parametrize(
    "settings, words",
    [
        ({"encoder_normalize_before": True}, "encoder_normalize_before is True; expected False: post-LN"),
        ({"decoder_normalize_before": True}, "decoder_normalize_before is True; expected False: post-LN"),
        ({"share_all_embeddings": False}, "share_all_embeddings is False; expected True: one dictionary"),
        ({"no_scale_embedding": True}, r"no_scale_embedding is True; expected False: embeddings multiplied by sqrt"),
        ({"layernorm_embedding": True}, "layernorm_embedding is True; expected False"),
        ({"encoder_learned_pos": True}, "encoder_learned_pos is True; expected False"),
        ({"decoder_ffn_embed_dim": 64}, "encoder_ffn_embed_dim is 32 and decoder_ffn_embed_dim 64; expected one"),
        ({"activation_fn": "relu_squared"}, "activation_fn is 'relu_squared'; expected one of"),
    ],
)
def test_settings_that_do_not_fit_are_refused_by_name(release, tmp_path, settings, words, capsys):
    checkpoint = load_checkpoint(release / "model.pt")
    checkpoint["args"] = fairseq_settings(**settings)
    torch.save(checkpoint, tmp_path / "model.pt")
    with pytest.raises(SystemExit):
        convert.main(
            [
                "fairseq",
                str(tmp_path / "model.pt"),
                str(release / "dict.en.txt"),
                str(release / "bpecodes"),
                str(tmp_path / "out"),
            ]
        )
    assert re.search(words, capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def _unknown_weight(state):
    state["encoder.layernorm_embedding.weight"] = torch.ones(D_MODEL)


def _untied_output(state):
    state["decoder.output_projection.weight"] = state["decoder.output_projection.weight"] + 1


def _separate_embeddings(state):
    state["decoder.embed_tokens.weight"] = torch.randn_like(state["decoder.embed_tokens.weight"])


def _more_rows(state):
    for key in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "decoder.output_projection.weight"):
        state[key] = torch.cat([state[key], state[key][:8]])


@pytest.mark.parametrize(
    "change, words",
    [
        (_unknown_weight, "unknown weight encoder.layernorm_embedding.weight; expected only the weights of a post-LN"),
        (_untied_output, "decoder.output_projection.weight differs from encoder.embed_tokens.weight; expected one"),
        (_separate_embeddings, "decoder.embed_tokens.weight differs from encoder.embed_tokens.weight"),
        (_more_rows, r"the embedding has \d+ rows and the dictionary \d+ symbols; expected one row per symbol"),
    ],
)
def test_weights_that_do_not_fit_are_refused_by_name(release, state, change, words):
    changed = dict(state)
    change(changed)
    symbols, merges = read_dictionary(release / "dict.en.txt"), read_codes(release / "bpecodes")
    with pytest.raises(ConversionError, match=words):
        convert_fairseq({"args": fairseq_settings(), "model": changed}, symbols, merges)


def test_a_checkpoint_needing_other_globals_is_refused_without_unpickling_them(release, state, tmp_path):
    torch.save(
        {"args": fairseq_settings(), "model": state, "where": pathlib.PurePosixPath("/data")}, tmp_path / "model.pt"
    )
    with pytest.raises(
        ConversionError, match=r"needs globals outside the allow-list to load \(pathlib.PurePosixPath\)"
    ):
        load_checkpoint(tmp_path / "model.pt")


class RunsCode:
    """A pickle that, unpickled by a plain pickle.load, would call os.mkdir(marker): proof of what was run."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_a_legacy_format_checkpoint_loads_as_the_zip_format_does(release, tmp_path):
    """torch.save(_use_new_zipfile_serialization=False), as releases before torch 1.6 were written: read weights-only
    all the same, and converted alike."""
    checkpoint = load_checkpoint(release / "model.pt")
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    for path in release.iterdir():
        (legacy / path.name).write_bytes(path.read_bytes())
    torch.save(checkpoint, legacy / "model.pt", _use_new_zipfile_serialization=False)
    assert (legacy / "model.pt").read_bytes()[:2] != b"PK"  # not a zip file
    loaded = load_checkpoint(legacy / "model.pt")
    assert vars(loaded["args"]) == vars(checkpoint["args"]) and loaded["model"].keys() == checkpoint["model"].keys()
    assert all(torch.equal(loaded["model"][key], tensor) for key, tensor in checkpoint["model"].items())
    model = convert_fairseq_checkpoint(*find_release_files(legacy), tmp_path / "out")
    assert (tmp_path / "out" / "model.safetensors").is_file() and isinstance(model, VaswaniForConditionalGeneration)


@pytest.mark.parametrize("legacy", [False, True], ids=["zip format", "legacy format"])
def test_a_checkpoint_whose_pickle_carries_code_is_refused_by_name_and_not_run(release, state, tmp_path, legacy):
    marker = tmp_path / "was-run"
    checkpoint = {"args": fairseq_settings(), "model": state, "hook": RunsCode(marker)}
    torch.save(checkpoint, tmp_path / "model.pt", _use_new_zipfile_serialization=not legacy)
    with pytest.raises(ConversionError) as refused:
        load_checkpoint(tmp_path / "model.pt")
    message = str(refused.value)
    assert message.startswith(f"{tmp_path / 'model.pt'} needs globals outside the allow-list to load (")
    assert f"{os.mkdir.__module__}.mkdir" in message  # the global named
    assert "only weights-only pickles are read (torch.load(weights_only=True))" in message
    assert "expected a fairseq checkpoint saved by torch.save" in message
    assert not marker.exists()


def test_a_plain_pickle_or_a_truncated_checkpoint_is_refused_naming_the_file(release, tmp_path):
    plain = tmp_path / "plain.pt"
    plain.write_bytes(pickle.dumps({"args": vars(fairseq_settings()), "model": {"w": [1.0, 2.0]}}))
    with pytest.raises(ConversionError) as refused:
        load_checkpoint(plain)
    assert str(refused.value).startswith(f"{plain} is not a file torch.save writes")
    assert "expected a fairseq checkpoint saved by torch.save: a dict of 'args' (or 'cfg') and 'model'" in str(
        refused.value
    )
    for legacy in (False, True):
        truncated = tmp_path / f"truncated-{legacy}.pt"
        torch.save(load_checkpoint(release / "model.pt"), truncated, _use_new_zipfile_serialization=not legacy)
        data = truncated.read_bytes()
        truncated.write_bytes(data[: len(data) // 2])
        with pytest.raises(ConversionError, match=rf"^{re.escape(str(truncated))} is not a readable torch.save file"):
            load_checkpoint(truncated)
    with pytest.raises(ConversionError, match=rf"^{re.escape(str(tmp_path / 'none.pt'))} does not exist; expected"):
        load_checkpoint(tmp_path / "none.pt")


def test_release_folders_with_separate_dictionaries_or_no_codes_are_refused(release, tmp_path, capsys):
    folder = tmp_path / "release"
    folder.mkdir()
    for path in release.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    (folder / "dict.de.txt").write_text("Hund 5\n" + (release / "dict.de.txt").read_text())
    with pytest.raises(SystemExit):
        convert.main(["fairseq", str(folder), str(tmp_path / "out")])
    assert "dict.de.txt and dict.en.txt differ: separate dictionaries; expected one shared" in capsys.readouterr().err
    (folder / "dict.de.txt").write_bytes((release / "dict.de.txt").read_bytes())
    (folder / "bpecodes").unlink()
    with pytest.raises(SystemExit):
        convert.main(["fairseq", str(folder), str(tmp_path / "out")])
    assert "has no bpecodes; expected a released folder (model.pt, dict.*.txt, bpecodes)" in capsys.readouterr().err


def test_the_command_refuses_an_occupied_output_folder_and_a_wrong_number_of_paths(release, tmp_path, capsys):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit):
        convert.main(["fairseq", str(release), str(tmp_path / "out")])
    assert "holds notes.txt, which vaswani-convert did not write" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        convert.main(["fairseq", str(release / "model.pt"), str(release / "dict.en.txt"), str(tmp_path / "other")])
    assert "got 3 paths; expected FOLDER OUTPUT_DIR or CHECKPOINT DICT BPECODES OUTPUT_DIR" in capsys.readouterr().err
