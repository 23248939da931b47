"""Equation 1's attention weights, softmax(Q K^T / sqrt(d_k)), computed by hand from what an attention layer was given,
to check the weights the model returns against (Section 3.2.1)."""

import contextlib
import math

import torch
from torch import nn

# Each kind of attention map: the stack and the attention module it comes from, and whether it is masked (3.2.3).
KINDS = {
    "encoder": ("encoder", "self_attn", False),
    "decoder": ("decoder", "self_attn", True),
    "cross": ("decoder", "cross_attn", False),
}


@contextlib.contextmanager
def attention_inputs(model: nn.Module):
    """Yields a dict that fills, while the block runs, with each attention module's inputs as they arrive: its name ->
    (the queries' input, the keys' input: None for self-attention)."""
    caught = {}

    def catch(name, args, kwargs):
        caught[name] = (args[0] if args else kwargs["hidden_states"], kwargs.get("key_value_states"))

    hooks = [
        module.register_forward_pre_hook(
            lambda module, args, kwargs, name=name: catch(name, args, kwargs), with_kwargs=True
        )
        for name, module in model.named_modules()
        if name.endswith(("self_attn", "cross_attn"))
    ]
    try:
        yield caught
    finally:
        for hook in hooks:
            hook.remove()


@torch.no_grad()
def equation_1_weights(module: nn.Module, queries: torch.Tensor, keys: torch.Tensor | None, causal: bool,
                       key_mask: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """softmax(Q K^T / sqrt(d_k)) for every head of `module` ([batch, heads, queries, keys]): Q and K are the inputs
    times its W^Q and W^K (nn.functional.linear, not the module's own products), `keys` None for self-attention;
    `causal` hides later positions, `key_mask` (1 where a key is a token, 0 where padding) padded keys."""
    keys = queries if keys is None else keys
    heads, d_k = module.config.num_heads, module.config.d_k
    q = nn.functional.linear(queries, module.w_q.weight, module.w_q.bias).unflatten(-1, (heads, d_k)).transpose(1, 2)
    k = nn.functional.linear(keys, module.w_k.weight, module.w_k.bias).unflatten(-1, (heads, d_k)).transpose(1, 2)
    logits = q @ k.transpose(-1, -2) / math.sqrt(d_k)
    if causal:  # Section 3.2.3: no position attends to later ones
        logits = logits.masked_fill(torch.ones_like(logits[0, 0]).triu(1).bool(), float("-inf"))
    if key_mask is not None:
        logits = logits.masked_fill(~key_mask.bool()[:, None, None, :], float("-inf"))
    return logits.softmax(-1)


def expected_maps(model: nn.Module, inputs: dict, attention_mask: torch.Tensor | None = None) -> dict[str, list]:
    """Equation 1's weights for every layer of each kind (`KINDS`), from the inputs `attention_inputs` caught; the
    source's `attention_mask` hides padded keys of encoder self-attention and encoder-decoder attention."""
    maps = {}
    for kind, (stack, attention, causal) in KINDS.items():
        layers = model.get_submodule(f"model.{stack}.layers")
        maps[kind] = []
        for layer in range(len(layers)):
            name = f"model.{stack}.layers.{layer}.{attention}"
            queries, keys = inputs[name]
            key_mask = None if causal else attention_mask
            maps[kind].append(equation_1_weights(model.get_submodule(name), queries, keys, causal, key_mask))
    return maps
