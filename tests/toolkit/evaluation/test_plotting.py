"""Training curves and attention maps (Figures 3-5 of the paper) as PNGs, with tokens labelled as readable text."""

import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import matplotlib.image
import pytest
import torch
from helpers.tiny_models import tiny_model
from helpers.training_setup import REPO, TINY_PAIRS, trained_tiny_checkpoint
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from modeling_vaswani import VaswaniForConditionalGeneration
from modeling_vaswani.toolkit.data.corpora import multi30k_files, read_sentences
from modeling_vaswani.toolkit.data.tokenizer import train_tokenizer
from modeling_vaswani.toolkit.evaluation import plotting
from modeling_vaswani.toolkit.outputs import MARKER
from modeling_vaswani.toolkit.translation.translate import translate

SOURCE = "Ein Mann fährt Fahrrad."
TRANSLATION = "A man rides a bike."


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    """Byte-level BPE trained on 1000 German and English Multi30k lines: small enough to split "fährt"."""
    folder = tmp_path_factory.mktemp("tokenizer")
    texts = []
    for language, path in multi30k_files("train").items():
        texts.append(folder / f"train.{language}")
        texts[-1].write_text("\n".join(read_sentences(path)[:1000]) + "\n", encoding="utf-8")
    return train_tokenizer(texts, vocab_size=400)


def words(labels):
    """The words the labels spell: a "##" label continues the word before it."""
    joined = []
    for label in labels:
        if label.startswith(plotting.CONTINUATION):
            joined[-1] += label.removeprefix(plotting.CONTINUATION)
        else:
            joined.append(label)
    return joined


def test_labels_read_as_the_sentences_words(tokenizer):
    ids = tokenizer(SOURCE)["input_ids"]
    tokens, labels = tokenizer.convert_ids_to_tokens(ids), plotting.token_labels(tokenizer, ids)
    assert len(tokens) > len(SOURCE.split()) + 1 and "Ã¤" in "".join(tokens)  # split into byte-level pieces
    assert len(labels) == len(ids) and labels[-1] == "</s>"
    assert not any(symbol in label for label in labels for symbol in "ÃĠ\ufffd")
    assert words(labels[:-1]) == SOURCE.split()
    assert any("ä" in label for label in labels)


def test_a_character_split_across_tokens_is_shown_whole(tokenizer):
    # Multi30k holds no emoji, so each of the bicycle's four UTF-8 bytes is a token of its own.
    sentence = "Ein Fahrrad 🚲 kostet 5 €."
    ids = tokenizer(sentence)["input_ids"]
    labels = plotting.token_labels(tokenizer, ids)
    assert "\ufffd" not in "".join(labels) and any("🚲" in label for label in labels)
    assert labels.count(plotting.CONTINUATION) >= 3  # the bytes after the bicycle's first
    assert words(labels[:-1]) == sentence.split()


def test_labels_spell_what_the_tokenizer_decodes(tokenizer):
    for path in multi30k_files("validation").values():
        for sentence in read_sentences(path)[:50]:
            ids = tokenizer(sentence, add_special_tokens=False)["input_ids"]
            assert words(plotting.token_labels(tokenizer, ids)) == tokenizer.decode(ids).split()


def test_a_vocabulary_that_is_not_byte_level_keeps_its_tokens():
    backend = Tokenizer(models.WordLevel({"ein": 0, "mann": 1, "<unk>": 2}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    word_level = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>")
    assert plotting.token_labels(word_level, [0, 1, 2]) == ["ein", "mann", "<unk>"]


@pytest.fixture
def model(tokenizer, monkeypatch):
    """A tiny untrained model that "translates" SOURCE to TRANSLATION: untrained, it would write 50 random tokens."""
    model = tiny_model(vocab_size=len(tokenizer))
    target = torch.tensor([[tokenizer.bos_token_id, *tokenizer(TRANSLATION)["input_ids"]]])
    monkeypatch.setattr(model, "generate", lambda **kwargs: target)
    return model


def test_one_figure_per_kind_and_layer_with_a_map_per_chosen_head(model, tokenizer, tmp_path, monkeypatch):
    figures = []
    draw = plotting.attention_figure
    monkeypatch.setattr(plotting, "attention_figure", lambda *args: figures.append(draw(*args)) or figures[-1])
    written = plotting.plot_attention(model, tokenizer, SOURCE, tmp_path, layers=[0, 1], heads=[0, 2])
    names = [f"{kind}_layer{layer}.png" for kind in ("encoder", "decoder", "cross") for layer in (0, 1)]
    shown = sorted(p.name for p in tmp_path.iterdir() if p.name != MARKER)  # beside the marker of its command
    assert [path.name for path in written] == names and shown == sorted(names)
    for path in written:
        image = matplotlib.image.imread(path)
        assert image.ndim == 3 and image.shape[2] in (3, 4) and image.shape[0] >= 300 and image.shape[1] >= 600
    assert [len(figure.axes) for figure in figures] == [2] * 6
    assert [axis.get_title() for axis in figures[0].axes] == ["head 0", "head 2"]
    assert figures[5].get_suptitle() == "encoder-decoder attention, layer 1"
    cross = figures[5].axes[0]  # queries: the translation after <s>; keys: the source
    assert words([label.get_text() for label in cross.get_xticklabels()][:-1]) == SOURCE.split()
    assert words([label.get_text() for label in cross.get_yticklabels()][1:]) == TRANSLATION.split()


def test_every_head_of_the_last_layer_by_default(model, tokenizer, tmp_path):
    written = plotting.plot_attention(model, tokenizer, SOURCE, tmp_path, kinds=["encoder"])
    assert [path.name for path in written] == ["encoder_layer1.png"]
    assert matplotlib.image.imread(written[0]).shape[1] > 4 * 300  # four heads side by side


@pytest.mark.parametrize(
    "choice, message",
    [
        (
            {"kinds": ["self"]},
            r"unknown attention kinds \['self'\]; expected some of \['encoder', 'decoder', 'cross'\]",
        ),
        ({"layers": [0, 2]}, r"layer 2 does not exist; the encoder self-attention has layers 0 to 1"),
        ({"heads": [4]}, r"head 4 does not exist; layer 1 of the encoder self-attention has heads 0 to 3"),
    ],
)
def test_a_bad_choice_is_named_before_any_file_is_written(model, tokenizer, tmp_path, choice, message):
    with pytest.raises(ValueError, match=message):
        plotting.plot_attention(model, tokenizer, SOURCE, tmp_path / "maps", **choice)
    assert not (tmp_path / "maps").exists()


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_a_kernel_that_returns_no_weights_is_named_not_drawn_empty(tokenizer, monkeypatch):
    model = tiny_model(vocab_size=len(tokenizer), attn_implementation="flex_attention")
    target = torch.tensor([[tokenizer.bos_token_id, *tokenizer(TRANSLATION)["input_ids"]]])
    monkeypatch.setattr(model, "generate", lambda **kwargs: target)
    message = r"'flex_attention' attention did not return every layer's encoder, decoder, cross attention weights"
    with pytest.raises(ValueError, match=message):
        plotting.attention_maps(model, tokenizer, SOURCE)
    assert model.config._attn_implementation == "flex_attention"


LOG_HISTORY = [
    {"loss": 6.5, "learning_rate": 1e-4, "step": 10},
    {"eval_loss": 6.1, "eval_sacrebleu": 0.5, "step": 10},
    {"loss": 5.2, "learning_rate": 2e-4, "step": 20},
    {"eval_loss": 5.0, "eval_sacrebleu": 3.0, "step": 20},
    {"train_loss": 5.8, "train_runtime": 12.0, "step": 20},
]


def test_training_curves_show_validation_loss_beside_training_loss(tmp_path):
    figure = plotting.training_curves_figure(LOG_HISTORY)
    assert [axis.get_title() for axis in figure.axes] == ["loss", "learning rate", "validation BLEU"]
    loss = figure.axes[0]
    assert [line.get_label() for line in loss.get_lines()] == ["training", "validation"]
    assert [text.get_text() for text in loss.get_legend().get_texts()] == ["training", "validation"]
    assert list(loss.get_lines()[1].get_xdata()) == [10, 20] and list(loss.get_lines()[1].get_ydata()) == [6.1, 5.0]
    assert list(figure.axes[2].get_lines()[0].get_ydata()) == [0.5, 3.0]
    path = plotting.plot_training_curves(LOG_HISTORY, tmp_path / "curves.png")
    height, width, _ = matplotlib.image.imread(path).shape
    assert (height, width) == (round(3.6 * plotting.DPI), 3 * 5 * plotting.DPI)


def test_training_curves_without_evaluation_leave_its_panel_out():
    training_only = [entry for entry in LOG_HISTORY if "eval_loss" not in entry]
    figure = plotting.training_curves_figure(training_only)
    assert [axis.get_title() for axis in figure.axes] == ["loss", "learning rate"]
    assert [line.get_label() for line in figure.axes[0].get_lines()] == ["training"]
    with pytest.raises(ValueError, match="log_history holds no loss, eval_loss, learning_rate or eval_sacrebleu"):
        plotting.training_curves_figure([{"train_runtime": 1.0, "step": 0}])


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_importing_and_drawing_leave_the_programs_backend_alone(tmp_path):
    # matplotlib.use("Agg") at import, or pyplot, would switch a program's backend (here svg) behind its back.
    code = (
        "import sys, matplotlib\n"
        "from modeling_vaswani.toolkit.evaluation.plotting import plot_training_curves\n"
        f"plot_training_curves([{{'loss': 1.0, 'step': 1}}], {str(tmp_path / 'curves.png')!r})\n"
        "print(matplotlib.get_backend(), 'matplotlib.pyplot' in sys.modules)\n"
    )
    env = {**os.environ, "MPLBACKEND": "svg"}
    result = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["svg", "False"]
    assert matplotlib.image.imread(tmp_path / "curves.png").ndim == 3


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The tiny model that learned TINY_PAIRS by heart, loaded as a server loads it (SDPA), and its tokenizer."""
    folder = trained_tiny_checkpoint(tmp_path_factory.mktemp("trained"))
    model = VaswaniForConditionalGeneration.from_pretrained(folder).eval()
    return model, AutoTokenizer.from_pretrained(folder)


def maps_of(outputs) -> dict[str, list[torch.Tensor]]:
    return {kind: list(getattr(outputs, field_name)) for kind, (field_name, _) in plotting.ATTENTION_KINDS.items()}


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_threads_sharing_one_model_get_whole_maps_and_the_same_translations(trained):
    """A server's threads share one model: attention maps and translations asked for at once must each be what a lone
    call gives, and no call may switch the model's attention kernel under the others (it once did, for maps)."""
    model, tokenizer = trained
    original = model.config._attn_implementation
    assert original == "sdpa"
    sources = [source for source, _ in TINY_PAIRS]
    layers = {"encoder": model.config.encoder_layers, "decoder": model.config.decoder_layers}
    layers["cross"] = model.config.decoder_layers
    alone_maps = [maps_of(plotting.attention_maps(model, tokenizer, source)[0]) for source in sources]
    alone_translations = [translate(model, tokenizer, [source], progress=False) for source in sources]
    assert alone_translations == [[target] for _, target in TINY_PAIRS]  # it learned them
    threads, rounds = 4, 20
    start = threading.Barrier(threads)

    def work(thread: int, round_: int):
        start.wait()  # every thread at once
        sentence = (thread + round_) % len(sources)
        if (thread + round_) % 2:
            return "translation", sentence, translate(model, tokenizer, [sources[sentence]], progress=False)
        return "maps", sentence, maps_of(plotting.attention_maps(model, tokenizer, sources[sentence])[0])

    kernels = set()  # what each attention layer finds in the shared config while the threads run
    hooks = [
        module.register_forward_pre_hook(lambda module, args: kernels.add(model.config._attn_implementation))
        for name, module in model.named_modules()
        if name.endswith(("self_attn", "cross_attn"))
    ]
    try:
        with ThreadPoolExecutor(threads) as pool:
            for round_ in range(rounds):
                futures = [pool.submit(work, thread, round_) for thread in range(threads)]
                for what, sentence, result in (future.result(timeout=120) for future in futures):
                    if what == "translation":
                        assert result == alone_translations[sentence], (round_, sentence)
                        continue
                    assert {kind: len(maps) for kind, maps in result.items()} == layers, (round_, sentence)
                    for kind, maps in result.items():
                        for layer, (weights, alone) in enumerate(zip(maps, alone_maps[sentence][kind], strict=True)):
                            assert torch.allclose(weights, alone, atol=1e-5), (round_, sentence, kind, layer)
    finally:
        for hook in hooks:
            hook.remove()
    assert kernels == {original} and model.config._attn_implementation == original
