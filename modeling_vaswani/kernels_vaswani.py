"""The CPU speed paths of the Transformer (arXiv:1706.03762), each identical to its Section except in how fast it runs.

- `Linear`: identical to the projections of Sections 3.2.2, 3.3 and 3.4 (nn.Linear) except that float32 products on
  CPU go through oneDNN, with a prepacked weight for inference;
- `ATTENTION_FUNCTIONS`: transformers' attention functions (Equation 1, Section 3.2.1), through transformers' public
  extension point for a model's own attention (a local `AttentionInterface` instance: the library-wide one is left
  as it is), identical to Section 3.2 except that
  - "sdpa" computes the decoding steps on CPU by the model's Equation 1, two batched products
    (`is_cpu_decoding_step`), and
  - encoder-decoder attention (Section 3.2.3) takes k decoder rows per encoder row (`by_sentence`).

Payload: travels flat beside modeling_vaswani.py as remote code, so it imports only torch and transformers. Nothing
here changes what the model computes: every path is tested against torch's own (tests/model/test_fast_paths.py), and
`torch.backends.mkldnn.flags(enabled=False)` turns the oneDNN products off.
"""

import functools

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import create_bidirectional_mask

# === The oneDNN linear ===============================================================================================

# Private torch ops, because torch has no public eager oneDNN float32 linear (its public linear calls MKL's sgemm;
# torch.compile's freezing packs weights for oneDNN only inside a compiled graph). Looked up at import, and tried on a
# small product at the first that needs them (`onednn_ops_differ`); their absence or a changed result is an error
# naming them there (`Linear`), never a silent fallback to a slower one.
ONEDNN_LINEAR = torch.backends.mkldnn.is_available()  # a torch built without oneDNN has nothing to go through


def missing_ops(names=("_linear_pointwise", "_reorder_linear_weight")) -> list[str]:
    return [name for name in names if not hasattr(torch.ops.mkldnn, name)]


MISSING_ONEDNN_OPS = missing_ops() if ONEDNN_LINEAR else []


def cpu_info(field: str, cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """The first `field` of Linux's cpuinfo (vendor_id, flags), or None where there is none to read."""
    try:
        with open(cpuinfo) as lines:
            return next((line.split(":", 1)[1].strip() for line in lines if line.split(":")[0].strip() == field), None)
    except OSError:
        return None


# Training's products go through oneDNN where the CPU has AVX-512 and is not Intel's: MKL's sgemm, which nn.Linear
# calls, takes slow code paths on other vendors' CPUs. With AVX-512, oneDNN made training 1.45x MarianMT's
# (2026-11-21) and 1.64x on an AMD EPYC (2026-11-27), while on an Intel Xeon (AMX) MKL's trained 1.19x faster than
# oneDNN's (2026-11-30); on an AVX2 EPYC MKL's were 12-18% faster in training, while inference still gained
# (2026-11-24; docs/performance.md). torch.backends.cpu.get_cpu_capability() names the kernels torch dispatches to.
ONEDNN_TRAINING = (
    torch.backends.cpu.get_cpu_capability().startswith("AVX512") and cpu_info("vendor_id") != "GenuineIntel"
)
# The smallest product (rows x in x out multiply-adds) worth a oneDNN call: each costs about 100 us before its work,
# nn.Linear's 30, so a beam's few rows through a d_model 128 layer took 130 us against 60 (2-core AMD EPYC, avx2,
# 2026-11-29); a 4-row beam through the 8000-token output layer, 4 M, is 3.5x faster through oneDNN.
ONEDNN_SMALLEST = 2**22


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x W^T + b for a 2-D x, through oneDNN; `weight` may be prepacked, or any strided [out x in] matrix."""
    return torch.ops.mkldnn._linear_pointwise.default(x, weight, bias, "none", [], "")


@functools.cache
def onednn_ops_differ() -> str | None:
    """What no longer works as `Linear` expects among the private torch APIs it uses, or None: the two oneDNN ops on a
    small product against nn.functional.linear's, and the version counter (`Tensor._version`, no public API tells
    that a weight changed in place) moving with an in-place update. Checked once a process, at the first product."""
    try:
        with torch.inference_mode(False), torch.no_grad():  # normal tensors, which count versions, in any mode
            x = torch.linspace(-1, 1, 6).reshape(2, 3)
            weight, bias = torch.linspace(-1, 1, 12).reshape(4, 3), torch.linspace(0, 1, 4)
            expected = nn.functional.linear(x, weight, bias)
            plain = onednn_linear(x, weight, bias)
            packed = onednn_linear(x, torch.ops.mkldnn._reorder_linear_weight(weight, None), bias)
            version = weight._version
            weight.add_(1)
            counted = weight._version == version + 1
    except (AttributeError, RuntimeError, TypeError) as error:
        return f"{type(error).__name__}: {error}"
    if not all(torch.allclose(product, expected, atol=1e-6) for product in (plain, packed)):
        return "their product differs from nn.functional.linear's"
    return None if counted else "Tensor._version no longer counts in-place updates"


class OneDNNLinearFunction(torch.autograd.Function):
    """y = x W^T + b with its gradients, every product through oneDNN (torch gives its oneDNN linear no autograd)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.with_bias = bias is not None
        return onednn_linear(x, weight, bias)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_output: torch.Tensor):
        x, weight = ctx.saved_tensors
        grad_output = grad_output.contiguous()
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = onednn_linear(grad_output, weight.t())  # dL/dx = dL/dy W
        if ctx.needs_input_grad[1]:
            grad_weight = onednn_linear(grad_output.t(), x.t())  # dL/dW = (dL/dy)^T x
        if ctx.with_bias and ctx.needs_input_grad[2]:
            grad_bias = grad_output.sum(0)
        return grad_x, grad_weight, grad_bias


class Linear(nn.Linear):
    """Identical to nn.Linear (W^Q, W^K, W^V, W^O of Section 3.2.2, W1 and W2 of Equation 2, the pre-softmax linear of
    Section 3.4) except that its float32 products on CPU of at least ONEDNN_SMALLEST multiply-adds go through oneDNN;
    inference multiplies by a prepacked weight.

    A subclass, because neither torch nor transformers offers this outside a compiled graph: an eager float32 linear
    on CPU, forward and backward, calls MKL's sgemm, which takes its slow code paths on non-Intel CPUs (half oneDNN's
    rate on an AMD EPYC); transformers' hub kernels (`use_kernel_forward_from_hub`) swap forwards only under
    `from_pretrained(use_kernels=True)` and with the `kernels` package, so the default would lose the speed.
    With gradients the weight is used as stored (it changes every step), and only on AVX-512 CPUs not Intel's
    (`ONEDNN_TRAINING`; elsewhere nn.Linear's MKL products train faster). Without, a packed copy (the weight's size
    again in memory) is made on the first call and again whenever the weight changes: its version counter moves with
    every in-place update (optimizer step, load_state_dict); train() drops it, eval() keeps it. Results equal
    nn.Linear's up to float32 rounding (another order of summation). Other dtypes, devices, autocast, tensor
    subclasses (FSDP's DTensor) and compiled graphs take nn.Linear's path; `torch.backends.mkldnn.flags(enabled=False)`
    turns it off.
    """

    _packed = None  # (the weight as it was packed, its version then, the packed weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        small = x.numel() * weight.shape[0] < ONEDNN_SMALLEST  # rows x in x out
        if small or not self._through_onednn(x, weight) or (torch.is_grad_enabled() and not ONEDNN_TRAINING):
            return nn.functional.linear(x, weight, self.bias)
        rows = x.reshape(-1, x.shape[-1])
        if torch.is_grad_enabled():
            output = OneDNNLinearFunction.apply(rows, weight, self.bias)
        else:
            packed = self._packed
            # The packed-from alias keeps its storage alive, so an equal address means the same storage.
            if packed is None or packed[0].data_ptr() != weight.data_ptr() or packed[1] != weight._version:
                alias = weight.detach()
                packed = self._packed = (alias, weight._version, torch.ops.mkldnn._reorder_linear_weight(alias, None))
            output = onednn_linear(rows, packed[2], self.bias)
        return output.view(*x.shape[:-1], self.out_features)

    @staticmethod
    def _through_onednn(x: torch.Tensor, weight: torch.Tensor) -> bool:
        through = (
            ONEDNN_LINEAR
            and x.is_cpu
            and x.dtype == weight.dtype == torch.float32
            and type(x) is torch.Tensor
            and type(weight) in (torch.Tensor, nn.Parameter)
            and x.numel() > 0
            and torch.backends.mkldnn.enabled
            and not torch.is_autocast_enabled("cpu")
            and not torch.compiler.is_compiling()  # inductor chooses its own kernels
        )
        if through and MISSING_ONEDNN_OPS:
            raise RuntimeError(
                f"torch {torch.__version__} has oneDNN but not torch.ops.mkldnn.{' or .'.join(MISSING_ONEDNN_OPS)}, "
                "the private ops kernels_vaswani.Linear multiplies through on CPU. Run under "
                "torch.backends.mkldnn.flags(enabled=False) for nn.Linear's own product, or use a torch that has them."
            )
        if through and onednn_ops_differ() is not None:
            raise RuntimeError(
                f"torch {torch.__version__}: the private APIs kernels_vaswani.Linear multiplies through on CPU "
                f"(torch.ops.mkldnn._linear_pointwise, ._reorder_linear_weight, Tensor._version) changed: "
                f"{onednn_ops_differ()}. Run under torch.backends.mkldnn.flags(enabled=False) for nn.Linear's own "
                "product, or use a torch where they work as before."
            )
        return through

    def train(self, mode: bool = True):
        if mode:  # eval() keeps the copy: the version counter already catches a changed weight
            self._packed = None
        return super().train(mode)

    def __getstate__(self):
        # The packed weight is an opaque oneDNN tensor, which can be neither copied nor pickled; it is remade on use.
        state = self.__dict__.copy()
        state.pop("_packed", None)
        return state


# === Attention =======================================================================================================


def is_cpu_decoding_step(module: nn.Module, query: torch.Tensor) -> bool:
    """Whether `query` ([rows, heads, queries, d_k]) is a decoding step for which Equation 1 as two batched products
    (the model's `eager_attention_forward`) beats torch's CPU SDPA kernel: at most 8 queries a row (one new token,
    or a sentence's beams in encoder-decoder attention), at least 16 queries in all, no gradients, not compiled. A
    causal block of several queries stays with SDPA, whose mask may then be left implicit.

    Why: torch's CPU SDPA kernel spends a fixed cost on every (row, head) block of queries, which is most of its time
    when a block holds a decoding step's few queries: for one new token per row at batch 32, or a sentence's 4 beams
    over its source, the two products were 1.4-3.5x faster on the 2-core benchmark machine (beam search at batch 32
    6-9% faster in all, greedy 1-4%). With one or two rows SDPA is faster.
    """
    rows, _, queries, _ = query.shape
    return (
        query.is_cpu
        and queries <= 8
        and rows * queries >= 16
        and (queries == 1 or not module.is_causal)
        and not torch.is_grad_enabled()
        and not torch.compiler.is_compiling()
    )


def sdpa_with_cpu_decoding_steps(module: nn.Module, query: torch.Tensor, *args, equation_1, **kwargs):
    """transformers' "sdpa" attention, except for the CPU decoding steps `is_cpu_decoding_step` picks: those take
    `equation_1`, the model's own Equation 1 (`eager_attention_forward` of modeling_vaswani.py, the default the
    interface receives: its one home), two batched matrix products; its weights are dropped, as SDPA returns none."""
    if is_cpu_decoding_step(module, query):
        return equation_1(module, query, *args, **kwargs)[0], None
    return sdpa_attention_forward(module, query, *args, **kwargs)


def by_sentence(attention, module, query, key, value, attention_mask, **kwargs):
    """`attention`, identical to Section 3.2.3's encoder-decoder attention except that each encoder row may serve k
    decoder rows (rows s*k to s*k+k-1 belong to sentence s): the paper decoding's beams or returned sequences, which
    share their sentence's encoder output. Each sentence's k rows of q queries attend as one row of k*q queries, so
    that its keys and values are computed, cached and read once instead of once per hypothesis; outputs and attention
    weights come back one row per hypothesis. Where query and key rows match (every other call), it is `attention`
    itself."""
    rows, heads, queries, d_k = query.shape
    if rows == key.shape[0]:
        return attention(module, query, key, value, attention_mask, **kwargs)
    # [s*k + j, head, p] -> [s, head, j*q + p]: a view where the projection left the query contiguous
    grouped = query.transpose(1, 2).reshape(key.shape[0], -1, heads, d_k).transpose(1, 2)
    output, weights = attention(module, grouped, key, value, attention_mask, **kwargs)
    output = output.reshape(rows, queries, *output.shape[2:])  # [s, j*q + p, ...] -> [s*k + j, p, ...]
    if weights is not None:
        weights = weights.unflatten(2, (-1, queries)).transpose(1, 2).flatten(0, 1)
    return output, weights


def encoder_attention_mask_by_sentence(config, hidden_states, encoder_hidden_states, attention_mask):
    """transformers' mask for the encoder-decoder attention as `by_sentence` computes it: one row of queries a
    sentence, over that sentence's encoder output."""
    sentences = encoder_hidden_states.shape[0]
    queries = hidden_states  # a row per sentence (training, stock generate()): transformers' own mask
    if hidden_states.shape[0] != sentences:  # the paper's search: k rows a sentence, grouped as by_sentence groups
        if hidden_states.shape[0] % sentences:
            raise ValueError(
                f"The decoder's batch ({hidden_states.shape[0]} rows) must be a multiple of the encoder's "
                f"({sentences}): k hypotheses per sentence, rows s*k to s*k+k-1 attending over sentence s"
            )
        queries = hidden_states.reshape(sentences, -1, hidden_states.shape[-1])
    return create_bidirectional_mask(
        config=config,
        inputs_embeds=queries,
        attention_mask=attention_mask,
        encoder_hidden_states=encoder_hidden_states,
    )


class VaswaniAttentionInterface(AttentionInterface):
    """transformers' attention functions, each taken `by_sentence`."""

    def get_interface(self, attn_implementation: str, default):
        attention = super().get_interface(attn_implementation, default)
        if attention is sdpa_with_cpu_decoding_steps:
            attention = functools.partial(attention, equation_1=default)
        return functools.partial(by_sentence, attention)


ATTENTION_FUNCTIONS = VaswaniAttentionInterface()
ATTENTION_FUNCTIONS["sdpa"] = sdpa_with_cpu_decoding_steps  # this instance only: other models keep transformers' own
