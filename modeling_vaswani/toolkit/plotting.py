"""Pictures people would rather look at: training curves, and attention maps as in Figures 3-5 of the paper."""

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display needed
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402


def plot_training_curves(log_history: Sequence[dict], path: str | Path) -> Path:
    """Loss, learning rate and any BLEU against the step, from the Trainer's `state.log_history`, as one PNG."""
    series = {
        "training loss": [(e["step"], e["loss"]) for e in log_history if "loss" in e],
        "learning rate": [(e["step"], e["learning_rate"]) for e in log_history if "learning_rate" in e],
        "validation BLEU": [(e["step"], e["eval_sacrebleu"]) for e in log_history if "eval_sacrebleu" in e],
    }
    series = {name: points for name, points in series.items() if points}
    if not series:
        raise ValueError("log_history holds no loss, learning rate or BLEU to plot")
    figure, axes = plt.subplots(1, len(series), figsize=(5 * len(series), 3.6), squeeze=False)
    for axis, (name, points) in zip(axes[0], series.items(), strict=True):
        steps, values = zip(*points, strict=True)
        axis.plot(steps, values, marker="." if len(steps) < 50 else None)
        axis.set_title(name)
        axis.set_xlabel("step")
        axis.grid(alpha=0.3)
    figure.tight_layout()
    path = Path(path)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def plot_attention_map(
    weights: torch.Tensor, query_tokens: Sequence[str], key_tokens: Sequence[str], title: str, path: str | Path
) -> Path:
    """One head's attention weights (queries down, keys across) as a heatmap PNG."""
    if weights.shape != (len(query_tokens), len(key_tokens)):
        raise ValueError(
            f"attention weights of shape {tuple(weights.shape)} do not match {len(query_tokens)} query and "
            f"{len(key_tokens)} key tokens"
        )
    size = max(4.0, 0.35 * max(len(query_tokens), len(key_tokens)))
    figure, axis = plt.subplots(figsize=(size, size))
    axis.imshow(weights.float().cpu().numpy(), cmap="viridis", vmin=0.0)
    axis.set_xticks(range(len(key_tokens)), key_tokens, rotation=90, fontsize=8)
    axis.set_yticks(range(len(query_tokens)), query_tokens, fontsize=8)
    axis.set_title(title, fontsize=10)
    figure.tight_layout()
    path = Path(path)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


ATTENTION_KINDS = {
    "encoder": ("encoder_attentions", "encoder self-attention"),
    "decoder": ("decoder_attentions", "decoder self-attention"),
    "cross": ("cross_attentions", "encoder-decoder attention"),
}


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
    """Figures 3-5 of the paper for one sentence: translates it, then draws the chosen layers' and heads'
    attention maps (encoder self-attention, decoder self-attention, cross-attention) as PNG heatmaps.

    Layers and heads count from 0; by default the last layer and every head. Returns the files written.
    """
    unknown = set(kinds) - set(ATTENTION_KINDS)
    if unknown:
        raise ValueError(f"unknown attention kinds {sorted(unknown)}; expected some of {list(ATTENTION_KINDS)}")
    model.eval()
    source = tokenizer(sentence, return_tensors="pt").to(model.device)
    target = model.generate(**source, paper_decoding=True)
    # Maps need the eager kernel (SDPA computes no weights); the forward pass re-reads the translation.
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        outputs = model(**source, decoder_input_ids=target[:, :-1], output_attentions=True)
    finally:
        model.set_attn_implementation(previous)
    source_tokens = tokenizer.convert_ids_to_tokens(source["input_ids"][0])
    target_tokens = tokenizer.convert_ids_to_tokens(target[0, :-1])
    tokens = {"encoder": (source_tokens, source_tokens), "decoder": (target_tokens, target_tokens)}
    tokens["cross"] = (target_tokens, source_tokens)
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for kind in kinds:
        field_name, title = ATTENTION_KINDS[kind]
        maps = getattr(outputs, field_name)
        for layer in layers if layers is not None else [len(maps) - 1]:
            if not 0 <= layer < len(maps):
                raise ValueError(f"layer {layer} does not exist; the {title} has layers 0 to {len(maps) - 1}")
            for head in heads if heads is not None else range(maps[layer].shape[1]):
                if not 0 <= head < maps[layer].shape[1]:
                    raise ValueError(f"head {head} does not exist; expected 0 to {maps[layer].shape[1] - 1}")
                path = output_dir / f"{kind}_layer{layer}_head{head}.png"
                queries, keys = tokens[kind]
                label = f"{title}, layer {layer}, head {head}"
                written.append(plot_attention_map(maps[layer][0, head], queries, keys, label, path))
    return written
