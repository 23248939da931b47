"""CPU kernels of the Transformer (arXiv:1706.03762) that neither torch nor transformers provides in eager mode.

Payload: travels flat beside modeling_vaswani.py as remote code, so it imports only torch. Nothing here changes what
the model computes, only how fast on a CPU: every path is tested against torch's own (tests/test_fast_paths.py), and
`torch.backends.mkldnn.flags(enabled=False)` turns the oneDNN products off.
"""

import torch
from torch import nn

ONEDNN_LINEAR = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x W^T + b for a 2-D x, through oneDNN; `weight` may be prepacked, or any strided [out x in] matrix."""
    return torch.ops.mkldnn._linear_pointwise.default(x, weight, bias, "none", [], "")


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
    """nn.Linear, whose float32 products on CPU go through oneDNN; inference multiplies by a prepacked weight.

    Written here because neither torch nor transformers does it outside a compiled graph: an eager float32 linear on
    CPU, forward and backward, calls MKL's sgemm, and MKL takes its slow code paths on non-Intel CPUs (half oneDNN's
    rate on an AMD EPYC); torch.compile's freezing packs weights for oneDNN, but only inside a compiled graph.
    With gradients the weight is used as stored (it changes every step). Without, a packed copy (the weight's size
    again in memory) is made on the first call and again whenever the weight changes: its version counter moves with
    every in-place update (optimizer step, load_state_dict); train() drops it. Results equal nn.Linear's up to
    float32 rounding (another order of summation). Other dtypes, devices, autocast, tensor subclasses (FSDP's
    DTensor) and compiled graphs take nn.Linear's path; `torch.backends.mkldnn.flags(enabled=False)` turns it off.
    """

    _packed = None  # (the weight as it was packed, its version then, the packed weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        if not self._through_onednn(x, weight):
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
        return (
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

    def train(self, mode: bool = True):
        self._packed = None
        return super().train(mode)

    def __getstate__(self):
        # The packed weight is an opaque oneDNN tensor, which can be neither copied nor pickled; it is remade on use.
        state = self.__dict__.copy()
        state.pop("_packed", None)
        return state


def is_cpu_decoding_step(module: nn.Module, query: torch.Tensor) -> bool:
    """Whether `query` ([rows, heads, queries, d_k]) is a decoding step for which Equation 1 as two batched products
    (`products_attention_forward` in modeling_vaswani.py) beats torch's CPU SDPA kernel: at most 8 queries a row (one
    new token, or a sentence's beams in encoder-decoder attention), at least 16 queries in all, no gradients, not
    compiled. A causal block of several queries stays with SDPA, whose mask may then be left implicit.

    Written here because torch's CPU SDPA kernel spends a fixed cost on every (row, head) block of queries, which is
    most of its time when a block holds a decoding step's few queries: for one new token per row at batch 32, or a
    sentence's 4 beams over its source, the two products were 1.4-3.5x faster on the 2-core benchmark machine (beam
    search at batch 32 6-9% faster in all, greedy 1-4%). With one or two rows SDPA is faster.
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
