"""Pictures people would rather look at: training curves, and attention maps as in Figures 3-5 of the paper.

Figures are drawn on `matplotlib.figure.Figure` objects, never through pyplot: importing this module or drawing
with it leaves the backend and pyplot's list of open figures of the program that uses it as they were, and
`Figure.savefig` writes PNGs without any backend being chosen.
"""

import itertools
import math
from collections.abc import Sequence
from pathlib import Path

import torch
from matplotlib.figure import Figure
from transformers.convert_slow_tokenizer import bytes_to_unicode

from ..outputs import ATTENTION_MAPS, save_figure, staged_folder, writing

DPI = 120
CONTINUATION = "##"  # marks a token that continues the word of the token before it, as in BERT's WordPiece
# Byte-level BPE spells each byte with one printable symbol (GPT-2's table, which tokenizers' ByteLevel uses).
_BYTE_OF_SYMBOL = {symbol: byte for byte, symbol in bytes_to_unicode().items()}


def _save(figure: Figure, path: str | Path) -> Path:
    return save_figure(figure, path, DPI)


def _curve(axis, entries: Sequence[dict], key: str, label: str | None = None) -> None:
    points = [(entry["step"], entry[key]) for entry in entries if key in entry]
    if points:
        steps, values = zip(*points, strict=True)
        axis.plot(steps, values, marker="." if len(steps) < 50 else None, label=label)


def training_curves_figure(log_history: Sequence[dict]) -> Figure:
    """Training and validation loss in one panel, the learning rate (Equation 3 by default) and validation BLEU
    each in its own, against the step, from the Trainer's `state.log_history`; a panel with nothing logged is left
    out.

    Validation loss (`eval_loss`) and BLEU (`eval_sacrebleu`) are there only when the Trainer evaluated during
    training (`--eval_strategy steps`). The Trainer computes both losses alike (label-smoothed by default, Section
    5.4), so they compare directly, but the training loss is measured with dropout on.
    """
    panels = {
        "loss": {"loss": "training", "eval_loss": "validation"},
        "learning rate": {"learning_rate": None},
        "validation BLEU": {"eval_sacrebleu": None},
    }
    panels = {title: keys for title, keys in panels.items() if any(key in e for e in log_history for key in keys)}
    if not panels:
        raise ValueError("log_history holds no loss, eval_loss, learning_rate or eval_sacrebleu to plot")
    figure = Figure(figsize=(5 * len(panels), 3.6), layout="constrained")
    for axis, (title, keys) in zip(figure.subplots(1, len(panels), squeeze=False)[0], panels.items(), strict=True):
        for key, label in keys.items():
            _curve(axis, log_history, key, label)
        if len(keys) > 1:
            axis.legend()
        axis.set_title(title)
        axis.set_xlabel("step")
        axis.grid(alpha=0.3)
    return figure


def plot_training_curves(log_history: Sequence[dict], path: str | Path) -> Path:
    """`training_curves_figure` written to `path` as a PNG. Returns the path."""
    return _save(training_curves_figure(log_history), path)


def _is_byte_level(tokenizer) -> bool:
    # Byte-level BPE has a token for each of the 256 byte symbols; any other vocabulary spells text as it is.
    return _BYTE_OF_SYMBOL.keys() <= tokenizer.get_vocab().keys()


def _byte_run_labels(tokens: Sequence[str]) -> list[str]:
    pieces = [bytes(_BYTE_OF_SYMBOL[symbol] for symbol in token) for token in tokens]
    text = b"".join(pieces)
    # A character split across tokens is shown whole in the token holding its first byte: each token's end moves
    # forward past UTF-8 continuation bytes (10xxxxxx) to the next character's start.
    ends = []
    for end in itertools.accumulate(map(len, pieces)):
        while end < len(text) and text[end] & 0xC0 == 0x80:
            end += 1
        ends.append(end)
    labels = []
    for start, end in itertools.pairwise([0, *ends]):
        # Only bytes that are no UTF-8 at all (possible in a generated translation) become U+FFFD.
        piece = text[start:end].decode("utf-8", errors="replace")
        labels.append(piece.lstrip() if piece[:1].isspace() else CONTINUATION + piece)
    return labels


def token_labels(tokenizer, ids: Sequence[int] | torch.Tensor) -> list[str]:
    """One tick label per token id, in the text a reader writes rather than byte-level BPE symbols.

    A token that starts a word (its bytes begin with a space) shows its characters without the space ("ĠMann" ->
    "Mann"); a token that continues the word before it shows "##" and its characters ("Ã¤hrt" -> "##ährt"), so
    labels join back into the text's words: drop each "##" and append that label to the word before it. A
    character whose bytes are split across tokens is shown whole in the token holding its first byte; a token left
    with only the rest of that character reads as a bare "##". Special tokens (<s>, </s>) stay as they are, and so do
    all tokens of a vocabulary that is not byte-level (its tokens are text already).
    """
    tokens = tokenizer.convert_ids_to_tokens([int(i) for i in ids])
    if not _is_byte_level(tokenizer):
        return tokens
    special = set(tokenizer.all_special_tokens)
    labels = []
    for is_special, group in itertools.groupby(tokens, key=special.__contains__):
        run = list(group)
        labels += run if is_special else _byte_run_labels(run)
    return labels


def attention_figure(
    weights: torch.Tensor, heads: Sequence[int], query_labels: Sequence[str], key_labels: Sequence[str], title: str
) -> Figure:
    """The chosen heads of one layer side by side, as Figures 3-5 of the paper show them: one heatmap a head in a
    grid of up to 4 columns (queries down, keys across), `title` above them all and each head's number above its map.

    `weights` is the layer's attention for one sentence, of shape (heads, queries, keys).
    """
    if weights.shape[1:] != (len(query_labels), len(key_labels)):
        raise ValueError(
            f"attention weights of shape {tuple(weights.shape)} do not match {len(query_labels)} query and "
            f"{len(key_labels)} key labels; expected (heads, {len(query_labels)}, {len(key_labels)})"
        )
    columns = min(len(heads), 4)
    rows = math.ceil(len(heads) / columns)
    # About 0.2 inch per token keeps 8-point tick labels apart.
    size = max(3.0, 0.2 * max(len(query_labels), len(key_labels)))
    figure = Figure(figsize=(size * columns, size * rows + 0.4), layout="constrained")
    figure.suptitle(title)
    for position, head in enumerate(heads, start=1):
        axis = figure.add_subplot(rows, columns, position)
        axis.imshow(weights[head].float().cpu().numpy(), cmap="viridis", vmin=0.0)
        axis.set_xticks(range(len(key_labels)), key_labels, rotation=90, fontsize=8)
        axis.set_yticks(range(len(query_labels)), query_labels, fontsize=8)
        axis.set_title(f"head {head}", fontsize=10)
    return figure


ATTENTION_KINDS = {
    "encoder": ("encoder_attentions", "encoder self-attention"),
    "decoder": ("decoder_attentions", "decoder self-attention"),
    "cross": ("cross_attentions", "encoder-decoder attention"),
}


def _check_index(name: str, value: int, count: int, where: str) -> None:
    if not 0 <= value < count:
        raise ValueError(f"{name} {value} does not exist; {where} has {name}s 0 to {count - 1}")


@torch.no_grad()
def attention_maps(model, tokenizer, sentence: str):
    """`sentence` translated with the paper's decoding, then re-read with attention weights: the model's outputs
    (`encoder_attentions`, `decoder_attentions`, `cross_attentions`: a (1, heads, queries, keys) tensor a layer), and
    the source's and the decoder input's tokens as written (`token_labels`)."""
    model.eval()
    source = tokenizer(sentence, return_tensors="pt").to(model.device)
    target = model.generate(**source, paper_decoding=True)
    # The forward pass re-reads the translation. output_attentions=True has this call alone compute Equation 1's
    # weights (SDPA computes none: MultiHeadAttention), so that the model, shared by a server's threads, is left as is.
    outputs = model(**source, decoder_input_ids=target[:, :-1], output_attentions=True)
    config = model.config
    layers = {"encoder": config.encoder_layers, "decoder": config.decoder_layers, "cross": config.decoder_layers}
    maps = {kind: getattr(outputs, field_name) or () for kind, (field_name, _) in ATTENTION_KINDS.items()}
    missing = [kind for kind in ATTENTION_KINDS if len(maps[kind]) != layers[kind]]
    if missing:  # other kernels return no weights (flex attention), or SDPA's per-call Equation 1 is gone
        raise ValueError(
            f"The model's {config._attn_implementation!r} attention did not return every layer's {', '.join(missing)} "
            "attention weights; attention maps need 'sdpa' or 'eager' (from_pretrained(attn_implementation='sdpa'))"
        )
    return outputs, token_labels(tokenizer, source["input_ids"][0]), token_labels(tokenizer, target[0, :-1])


@torch.no_grad()
def plot_attention(
    model,
    tokenizer,
    sentence: str,
    output_dir: str | Path,
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
    kinds: Sequence[str] = tuple(ATTENTION_KINDS),
) -> list[Path]:
    """Figures 3-5 of the paper for one sentence: translates it, then draws the attention of the chosen layers
    (encoder self-attention, decoder self-attention, encoder-decoder attention), one PNG per kind and layer,
    KIND_layerN.png, with the chosen heads side by side (`attention_figure`) and tokens labelled as text
    (`token_labels`).

    Layers and heads count from 0; by default the last layer and every head. Every choice is checked before any
    file is written. `output_dir` is replaced as one set (`outputs.staged_folder`): a kill or a full disk midway
    leaves the earlier figures, never a mix. Returns the files written.
    """
    unknown = set(kinds) - set(ATTENTION_KINDS)
    if unknown:
        raise ValueError(f"unknown attention kinds {sorted(unknown)}; expected some of {list(ATTENTION_KINDS)}")
    outputs, source_labels, target_labels = attention_maps(model, tokenizer, sentence)
    labels = {"encoder": (source_labels, source_labels), "decoder": (target_labels, target_labels)}
    labels["cross"] = (target_labels, source_labels)
    figures = {}  # file name: attention_figure's arguments, every choice checked before anything is written
    for kind in kinds:
        field_name, title = ATTENTION_KINDS[kind]
        maps = getattr(outputs, field_name)
        for layer in layers if layers is not None else [len(maps) - 1]:
            _check_index("layer", layer, len(maps), f"the {title}")
            chosen = heads if heads is not None else range(maps[layer].shape[1])
            for head in chosen:
                _check_index("head", head, maps[layer].shape[1], f"layer {layer} of the {title}")
            figures[f"{kind}_layer{layer}.png"] = (maps[layer][0], chosen, *labels[kind], f"{title}, layer {layer}")
    with staged_folder(output_dir, ATTENTION_MAPS) as staged:
        for name, arguments in figures.items():
            with writing(staged / name) as path:
                attention_figure(*arguments).savefig(path, dpi=DPI, format="png")
    return [Path(output_dir) / name for name in figures]
