"""The Transformer of Vaswani et al. 2017, "Attention Is All You Need" (arXiv:1706.03762), Section 3, top to bottom.

Self-contained on purpose: `save_pretrained` copies this file and configuration_vaswani.py flat into checkpoints as
remote code, so the only relative import allowed is the configuration.

Where we follow tensor2tensor (the paper's code) rather than the paper's text, the comment says so.
"""

import math
import shutil
from pathlib import Path

import torch
from torch import nn
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.generation import GenerationConfig, GenerationMixin, StoppingCriteria, StoppingCriteriaList
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel
from transformers.utils import can_return_tuple
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .configuration_vaswani import VaswaniConfig

# ---------------------------------------------------------------------------------------------------------------------
# The linear maps: every W of Sections 3.2.2, 3.3 and 3.4
# ---------------------------------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------------------------------
# 3.4 Embeddings and 3.5 Positional encoding
# ---------------------------------------------------------------------------------------------------------------------


def sinusoids(num_positions: int, d_model: int, offset: int | torch.Tensor = 0) -> torch.Tensor:
    """Section 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)).

    Sines on even and cosines on odd dimensions (interleaved, unlike the halves layout of Marian and fairseq),
    positions counted from `offset` (0 for the first token; an int, or a 0-dim tensor on the device to compute on).
    Computed in float64 so that long tables stay exact.
    """
    device = offset.device if isinstance(offset, torch.Tensor) else None
    positions = (torch.arange(num_positions, dtype=torch.float64, device=device) + offset)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64, device=device)
    angles = positions / 10000.0 ** (two_i / d_model)
    table = torch.zeros(num_positions, d_model, dtype=torch.float64, device=device)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return table.float()


class PositionalEncoding(nn.Module):
    """The fixed sinusoids of Section 3.5, added to the embeddings at the bottom of both stacks.

    The table is a non-persistent buffer: it is never saved, and `_init_weights` rebuilds it after `from_pretrained`
    (which creates modules on the meta device). Positions past the table are computed on the fly, so any length works.
    """

    def __init__(self, config: VaswaniConfig):
        super().__init__()
        self.d_model = config.d_model
        self.register_buffer("table", sinusoids(config.max_position_embeddings, config.d_model), persistent=False)

    def forward(self, length: int, offset: int | torch.Tensor = 0) -> torch.Tensor:
        # A static cache counts its length in a tensor, so that a compiled step need not be recompiled as it grows:
        # positions from such an offset are computed, as looking them up would read the count back to the host.
        if not isinstance(offset, torch.Tensor) and offset + length <= self.table.shape[0]:
            return self.table[offset : offset + length]
        return sinusoids(length, self.d_model, offset).to(self.table)


# ---------------------------------------------------------------------------------------------------------------------
# 3.2 Attention
# ---------------------------------------------------------------------------------------------------------------------


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Equation 1: Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V, one matrix product for all heads.

    `attention_mask` is additive (0 where allowed, a large negative number where masked), as transformers'
    masking utilities build it for the eager kernel, or boolean (True where allowed), as they build it for SDPA.
    Returns (batch, length, heads, d_v) and the weights.
    """
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None and attention_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
    elif attention_mask is not None:
        scores = scores + attention_mask
    weights = nn.functional.softmax(scores, dim=-1)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return output, weights


def products_attention_forward(*args, **kwargs) -> tuple[torch.Tensor, None]:
    """Equation 1 as `eager_attention_forward` computes it (SDPA's boolean masks included), returning no weights,
    as SDPA does: what the `sdpa` implementation runs for decoding steps on CPU.

    Written here because torch's CPU SDPA kernel spends a fixed cost on every (row, head) block of queries, which is
    most of its time when a block holds the few queries of a decoding step: for one new token per row at batch 32,
    or a sentence's 4 beams attending over its source, two batched products were 1.4-3.5x faster on the 2-core
    benchmark machine (beam search at batch 32 6-9% faster in all, greedy 1-4%). With one or two rows SDPA is faster.
    """
    output, _ = eager_attention_forward(*args, **kwargs)
    return output, None


def is_cpu_decoding_step(module: nn.Module, query: torch.Tensor) -> bool:
    """Whether `query` ([rows, heads, queries, d_k]) is a decoding step that `products_attention_forward` computes
    faster than torch's CPU SDPA: at most 8 queries a row (one new token, or a sentence's beams in encoder-decoder
    attention), at least 16 queries in all, no gradients, not compiled. A causal block of several queries stays with
    SDPA, whose mask may then be left implicit."""
    rows, _, queries, _ = query.shape
    return (
        query.is_cpu
        and queries <= 8
        and rows * queries >= 16
        and (queries == 1 or not module.is_causal)
        and not torch.is_grad_enabled()
        and not torch.compiler.is_compiling()
    )


class MultiHeadAttention(nn.Module):
    """Section 3.2.2: MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    The h projections of each kind are one (d_model x h*d_k) matrix. No biases by default: Equation 1 has none, and
    neither has tensor2tensor (`config.attention_bias` adds them). Serves as encoder self-attention, masked decoder
    self-attention (`is_causal`) and encoder-decoder attention (`key_value_states` from the encoder, Section 3.2.3).

    Encoder-decoder attention also takes k decoder rows per encoder row (rows s*k to s*k+k-1 belong to sentence s):
    generate()'s beams or returned sequences, which share their sentence's encoder output. Each sentence's k rows of
    q positions then attend as one row of k*q queries, so that its keys and values are computed, cached and read once
    instead of once per hypothesis; outputs and attention weights come back one row per hypothesis.
    """

    def __init__(self, config: VaswaniConfig, is_causal: bool = False, layer_idx: int | None = None):
        super().__init__()
        self.config = config
        self.num_heads = config.num_heads
        self.d_k = config.d_k
        self.scaling = self.d_k**-0.5  # the 1/sqrt(d_k) of Equation 1
        self.attention_dropout = config.attention_dropout
        # transformers' SDPA path reads this flag; it must exist, else a skipped mask is taken as causal.
        self.is_causal = is_causal
        self.layer_idx = layer_idx
        bias = config.attention_bias
        self.w_q = Linear(config.d_model, config.d_model, bias=bias)
        self.w_k = Linear(config.d_model, config.d_model, bias=bias)
        self.w_v = Linear(config.d_model, config.d_model, bias=bias)
        self.w_o = Linear(config.d_model, config.d_model, bias=bias)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(*x.shape[:-1], -1, self.d_k).transpose(1, 2)

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        is_cross_attention = key_value_states is not None
        rows = hidden_states.shape
        if is_cross_attention:  # k hypotheses of a sentence become k*q queries over its encoder output
            hidden_states = hidden_states.reshape(key_value_states.shape[0], -1, rows[-1])
        query = self._heads(self.w_q(hidden_states))

        cache = past_key_values
        if isinstance(past_key_values, EncoderDecoderCache):
            cache = (
                past_key_values.cross_attention_cache if is_cross_attention else past_key_values.self_attention_cache
            )
        if is_cross_attention and cache is not None and past_key_values.is_updated.get(self.layer_idx):
            # The encoder output does not change while decoding: its keys and values were computed at the first step.
            key, value = cache.layers[self.layer_idx].keys, cache.layers[self.layer_idx].values
        else:
            source = key_value_states if is_cross_attention else hidden_states
            key, value = self._heads(self.w_k(source)), self._heads(self.w_v(source))
            if cache is not None:
                key, value = cache.update(key, value, self.layer_idx)
                if is_cross_attention:
                    past_key_values.is_updated[self.layer_idx] = True

        implementation = self.config._attn_implementation
        if implementation == "sdpa" and is_cpu_decoding_step(self, query):
            attention = products_attention_forward
        else:
            attention = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)
        output, weights = attention(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.attention_dropout if self.training else 0.0,
            scaling=self.scaling,
            **kwargs,
        )
        output = self.w_o(output.reshape(*hidden_states.shape[:-1], -1)).view(rows)
        if weights is not None and len(weights) != rows[0]:
            weights = weights.unflatten(2, (-1, rows[1])).transpose(1, 2).flatten(0, 1)
        return output, weights


# ---------------------------------------------------------------------------------------------------------------------
# 3.3 Position-wise feed-forward networks
# ---------------------------------------------------------------------------------------------------------------------


class PositionwiseFeedForward(nn.Module):
    """Equation 2: FFN(x) = max(0, x W1 + b1) W2 + b2, inner width d_ff, applied to each position alike."""

    def __init__(self, config: VaswaniConfig):
        super().__init__()
        self.w1 = Linear(config.d_model, config.d_ff)
        self.w2 = Linear(config.d_ff, config.d_model)
        self.activation = ACT2FN[config.activation_function]
        self.activation_dropout = config.activation_dropout  # tensor2tensor's relu_dropout; 0 in the paper

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.activation(self.w1(x))
        hidden = nn.functional.dropout(hidden, p=self.activation_dropout, training=self.training)
        return self.w2(hidden)


# ---------------------------------------------------------------------------------------------------------------------
# 3.1 Encoder and decoder layers
# ---------------------------------------------------------------------------------------------------------------------


class SublayerConnection(nn.Module):
    """Sections 3.1 and 5.4, post-LN: LayerNorm(x + Dropout(Sublayer(x))).

    Holds the LayerNorm; the sublayer's output is passed in. Epsilon from the config (tensor2tensor's 1e-6).
    """

    def __init__(self, config: VaswaniConfig):
        super().__init__()
        self.dropout = config.dropout
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def forward(self, x: torch.Tensor, sublayer_output: torch.Tensor) -> torch.Tensor:
        return self.norm(x + nn.functional.dropout(sublayer_output, p=self.dropout, training=self.training))


class EncoderLayer(GradientCheckpointingLayer):
    """Section 3.1: multi-head self-attention, then the feed-forward network, each wrapped in a SublayerConnection."""

    def __init__(self, config: VaswaniConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(config)
        self.self_attn_sublayer = SublayerConnection(config)
        self.feed_forward = PositionwiseFeedForward(config)
        self.feed_forward_sublayer = SublayerConnection(config)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None, **kwargs) -> torch.Tensor:
        attended, _ = self.self_attn(hidden_states, attention_mask=attention_mask, **kwargs)
        hidden_states = self.self_attn_sublayer(hidden_states, attended)
        return self.feed_forward_sublayer(hidden_states, self.feed_forward(hidden_states))


class DecoderLayer(GradientCheckpointingLayer):
    """Section 3.1: masked self-attention, encoder-decoder attention, feed-forward network; post-LN around each."""

    def __init__(self, config: VaswaniConfig, layer_idx: int):
        super().__init__()
        self.self_attn = MultiHeadAttention(config, is_causal=True, layer_idx=layer_idx)
        self.self_attn_sublayer = SublayerConnection(config)
        self.cross_attn = MultiHeadAttention(config, layer_idx=layer_idx)
        self.cross_attn_sublayer = SublayerConnection(config)
        self.feed_forward = PositionwiseFeedForward(config)
        self.feed_forward_sublayer = SublayerConnection(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        encoder_hidden_states: torch.Tensor,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        **kwargs,
    ) -> torch.Tensor:
        attended, _ = self.self_attn(
            hidden_states, attention_mask=attention_mask, past_key_values=past_key_values, **kwargs
        )
        hidden_states = self.self_attn_sublayer(hidden_states, attended)
        attended, _ = self.cross_attn(
            hidden_states,
            key_value_states=encoder_hidden_states,
            attention_mask=encoder_attention_mask,
            past_key_values=past_key_values,
            **kwargs,
        )
        hidden_states = self.cross_attn_sublayer(hidden_states, attended)
        return self.feed_forward_sublayer(hidden_states, self.feed_forward(hidden_states))


# ---------------------------------------------------------------------------------------------------------------------
# Weight initialization (shared by the stacks and the models)
# ---------------------------------------------------------------------------------------------------------------------


# The translation pipeline's file sits beside this one, in the package and in checkpoints alike; config.json names it.
PIPELINE_FILE = Path(__file__).with_name("pipeline_vaswani.py")
CUSTOM_PIPELINES = {
    "vaswani-translation": {"impl": "pipeline_vaswani.VaswaniTranslationPipeline", "pt": ["AutoModelForSeq2SeqLM"]}
}


class VaswaniPreTrainedModel(PreTrainedModel):
    config: VaswaniConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _no_split_modules = ["EncoderLayer", "DecoderLayer"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _can_compile_fullgraph = True

    @torch.no_grad()
    def _init_weights(self, module: nn.Module):
        """The paper gives no initialization; this is tensor2tensor's and torch.nn.Transformer's.

        Embeddings ~ N(0, d_model^-0.5), so that after the sqrt(d_model) scale of Section 3.4 they have unit variance
        (tensor2tensor); linear weights Xavier-uniform, biases zero (tensor2tensor and torch.nn.Transformer).
        """
        if isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=self.config.d_model**-0.5)
        elif isinstance(module, nn.Linear):
            init.xavier_uniform_(module.weight)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, PositionalEncoding):
            init.copy_(module.table, sinusoids(*module.table.shape))

    def save_pretrained(self, save_directory, *args, **kwargs):
        # transformers writes only this class's own Auto class into `auto_map`; name both model classes, so that
        # AutoModel and AutoModelForSeq2SeqLM can each load any Vaswani checkpoint as remote code. The translation
        # pipeline, whose file travels beside this one, is declared too, so that every save (the Trainer's pushes
        # included) works with pipeline("vaswani-translation", trust_remote_code=True) where the package is absent.
        with_pipeline = self.is_remote_code() and PIPELINE_FILE.exists()
        if self.is_remote_code():
            auto_map = dict(getattr(self.config, "auto_map", None) or {})
            for cls in (VaswaniModel, VaswaniForConditionalGeneration):
                if cls._auto_class is not None:
                    auto_map[cls._auto_class] = f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}"
            self.config.auto_map = auto_map
        if with_pipeline:
            self.config.custom_pipelines = CUSTOM_PIPELINES
        result = super().save_pretrained(save_directory, *args, **kwargs)
        if with_pipeline and kwargs.get("is_main_process", True):
            shutil.copyfile(PIPELINE_FILE, Path(save_directory) / PIPELINE_FILE.name)
        return result


# ---------------------------------------------------------------------------------------------------------------------
# 3.1 The stacks
# ---------------------------------------------------------------------------------------------------------------------


class VaswaniEncoder(VaswaniPreTrainedModel):
    """Section 3.1: embeddings * sqrt(d_model) + positional encodings, dropout, N EncoderLayers, no final norm."""

    _can_record_outputs = {"hidden_states": EncoderLayer, "attentions": MultiHeadAttention}

    def __init__(self, config: VaswaniConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.embed_scale = math.sqrt(config.d_model)  # Section 3.4
        self.positional_encoding = PositionalEncoding(config)
        self.layers = nn.ModuleList([EncoderLayer(config) for _ in range(config.encoder_layers)])
        self.post_init()

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs,
    ) -> BaseModelOutput:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of input_ids and inputs_embeds to the encoder")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        positions = self.positional_encoding(inputs_embeds.shape[1]).to(inputs_embeds.dtype)
        hidden_states = inputs_embeds * self.embed_scale + positions
        hidden_states = nn.functional.dropout(hidden_states, p=self.config.dropout, training=self.training)

        attention_mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=hidden_states, attention_mask=attention_mask
        )
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask, **kwargs)
        return BaseModelOutput(last_hidden_state=hidden_states)


class VaswaniDecoder(VaswaniPreTrainedModel):
    """Section 3.1: the decoder stack, fed the target shifted right by one position; its self-attention is masked
    so that position i sees only positions before i. No final norm."""

    _can_record_outputs = {
        "hidden_states": DecoderLayer,
        "attentions": OutputRecorder(MultiHeadAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(MultiHeadAttention, index=1, layer_name="cross_attn"),
    }

    def __init__(self, config: VaswaniConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.embed_scale = math.sqrt(config.d_model)  # Section 3.4
        self.positional_encoding = PositionalEncoding(config)
        self.layers = nn.ModuleList([DecoderLayer(config, layer_idx=i) for i in range(config.decoder_layers)])
        self.post_init()

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of decoder_input_ids and decoder_inputs_embeds to the decoder")
        if encoder_hidden_states is None:
            raise ValueError("The decoder attends over the encoder output: pass encoder_hidden_states")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        sentences = encoder_hidden_states.shape[0]
        if inputs_embeds.shape[0] % sentences:
            raise ValueError(
                f"The decoder's batch ({inputs_embeds.shape[0]} rows) must be a multiple of the encoder's "
                f"({sentences}): k hypotheses per sentence, rows s*k to s*k+k-1 attending over sentence s"
            )
        if use_cache and past_key_values is None:
            past_key_values = EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))

        # While decoding with a cache, the new tokens continue the positions already cached.
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0
        positions = self.positional_encoding(inputs_embeds.shape[1], past_length).to(inputs_embeds.dtype)
        hidden_states = inputs_embeds * self.embed_scale + positions
        hidden_states = nn.functional.dropout(hidden_states, p=self.config.dropout, training=self.training)

        self_attention_cache = (
            past_key_values.self_attention_cache if isinstance(past_key_values, EncoderDecoderCache) else None
        )
        causal_mask = create_causal_mask(
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=attention_mask,
            past_key_values=self_attention_cache,
        )
        encoder_attention_mask = create_bidirectional_mask(
            config=self.config,
            inputs_embeds=hidden_states.reshape(sentences, -1, hidden_states.shape[-1]),  # grouped as the attention is
            attention_mask=encoder_attention_mask,
            encoder_hidden_states=encoder_hidden_states,
        )
        for layer in self.layers:
            hidden_states = layer(
                hidden_states,
                causal_mask,
                encoder_hidden_states,  # positional, so that gradient checkpointing passes it through
                encoder_attention_mask=encoder_attention_mask,
                past_key_values=past_key_values,
                **kwargs,
            )
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states, past_key_values=past_key_values
        )


# ---------------------------------------------------------------------------------------------------------------------
# The model: one embedding matrix for source, target and output (Section 3.4)
# ---------------------------------------------------------------------------------------------------------------------


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Section 3.1: the decoder input is the output "offset by one position": start token, then labels[:-1].

    Ignored label positions (-100) become padding.
    """
    shifted = labels.new_full(labels.shape, pad_token_id)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)


class VaswaniModel(VaswaniPreTrainedModel):
    """The encoder-decoder of Figure 1 without the output layer: returns the decoder's last hidden states."""

    # Section 3.4: the two embedding layers share one matrix.
    _tied_weights_keys = {
        "encoder.embed_tokens.weight": "shared.weight",
        "decoder.embed_tokens.weight": "shared.weight",
    }

    def __init__(self, config: VaswaniConfig):
        super().__init__(config)
        self.shared = nn.Embedding(config.vocab_size, config.d_model)
        self.encoder = VaswaniEncoder(config)
        self.decoder = VaswaniDecoder(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.shared

    def set_input_embeddings(self, value: nn.Embedding):
        self.shared = value
        self.encoder.embed_tokens = value
        self.decoder.embed_tokens = value

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple[torch.Tensor] | BaseModelOutput | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs,
    ) -> Seq2SeqModelOutput:
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(*encoder_outputs)
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            past_key_values=past_key_values,
            inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            past_key_values=decoder_outputs.past_key_values,
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )


# ---------------------------------------------------------------------------------------------------------------------
# The LM head (Section 3.4) and the paper's decoding (Section 6.1)
# ---------------------------------------------------------------------------------------------------------------------


def gnmt_length_penalty(length: int | torch.Tensor, alpha: float) -> float | torch.Tensor:
    """Section 6.1, from GNMT (Wu et al. 2016): lp(Y) = ((5 + |Y|) / 6)^alpha.

    A finished hypothesis scores log P(Y|X) / lp(Y).
    """
    return ((5 + length) / 6) ** alpha


class MaxLengthPerSentence(StoppingCriteria):
    """Section 6.1: "maximum output length to input length + 50". transformers' max length is one number per call;
    this stops each sentence (and each of its beams) at its own limit."""

    def __init__(self, max_lengths: torch.Tensor):
        self.max_lengths = max_lengths  # per sentence, counting the decoder start token

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.BoolTensor:
        rows_per_sentence = input_ids.shape[0] // self.max_lengths.shape[0]  # beams (or returned sequences)
        limits = self.max_lengths.to(input_ids.device).repeat_interleave(rows_per_sentence)
        return input_ids.shape[1] >= limits


def paper_generation_config(config: VaswaniConfig) -> GenerationConfig:
    """Section 6.1's decoding settings, the defaults of every Vaswani model's `generation_config`."""
    return GenerationConfig(
        num_beams=4,
        length_penalty=0.6,
        early_stopping=False,
        decoder_start_token_id=config.decoder_start_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
    )


class VaswaniForConditionalGeneration(VaswaniPreTrainedModel, GenerationMixin):
    """The Transformer with its output layer: the pre-softmax linear shares the embedding matrix (Section 3.4).

    `generate(..., paper_decoding=True)` decodes as Section 6.1 does (see `generate`).
    """

    _tied_weights_keys = {
        "lm_head.weight": "model.shared.weight",
        "model.encoder.embed_tokens.weight": "model.shared.weight",
        "model.decoder.embed_tokens.weight": "model.shared.weight",
    }

    def __init__(self, config: VaswaniConfig):
        super().__init__(config)
        self.model = VaswaniModel(config)
        self.lm_head = Linear(config.d_model, config.vocab_size, bias=False)
        self._gnmt_alpha = None  # set only inside generate(paper_decoding=True)
        self.post_init()
        self.generation_config = paper_generation_config(config)

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Linear):
        self.lm_head = value

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple[torch.Tensor] | BaseModelOutput | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int = 0,
        **kwargs,
    ) -> Seq2SeqLMOutput:
        r"""
        labels: target token ids, -100 where ignored; the decoder input is derived from them when not given.
        logits_to_keep: if > 0, compute logits for the last `logits_to_keep` positions only (decoding needs one).
        num_items_in_batch (in kwargs, from the Trainer): the number of target tokens in the whole accumulated batch;
            the loss is then a sum divided by it, so gradient accumulation gives the gradient of the full batch.
        """
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)

        outputs = self.model(
            input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        hidden_states = outputs.last_hidden_state
        if logits_to_keep:
            hidden_states = hidden_states[:, -logits_to_keep:]
        logits = self.lm_head(hidden_states)

        loss = None
        if labels is not None:
            loss = self.translation_loss(logits, labels, num_items_in_batch)

        return Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            past_key_values=outputs.past_key_values,
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )

    @staticmethod
    def translation_loss(
        logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None = None
    ) -> torch.Tensor:
        """Token cross-entropy, labels not shifted (logits[i] predicts labels[i]), -100 ignored, in float32.

        A mean over this batch's tokens, or a sum divided by `num_items_in_batch` when the Trainer accumulates
        gradients over several batches. Label smoothing (Section 5.4) is the Trainer's `label_smoothing_factor`.
        """
        logits = logits.float().reshape(-1, logits.shape[-1])
        labels = labels.to(logits.device).reshape(-1)
        if num_items_in_batch is None:
            return nn.functional.cross_entropy(logits, labels, ignore_index=-100)
        loss = nn.functional.cross_entropy(logits, labels, ignore_index=-100, reduction="sum")
        return loss / torch.as_tensor(num_items_in_batch, device=loss.device)

    def generate(self, *args, paper_decoding: bool = False, **kwargs):
        """`GenerationMixin.generate`, plus the decoding of Section 6.1 when `paper_decoding=True`:

        - beam search with the model's `generation_config.num_beams` (4) unless `num_beams` is passed;
        - hypotheses ranked by log P(Y|X) / lp(Y) with GNMT's lp(Y) = ((5 + |Y|) / 6)^alpha, alpha being
          `length_penalty` (generation_config: 0.6). Stock transformers divides by |Y|^alpha instead, which ranks
          hypotheses differently; that stays the behaviour without `paper_decoding`;
        - at most (source length + 50) output tokens per sentence, the source length counting non-padding tokens;
          the search over a sentence ends as soon as no live beam can beat its finished ones.
        """
        if not paper_decoding:
            return super().generate(*args, **kwargs)
        for name in ("max_length", "max_new_tokens"):
            if kwargs.get(name) is not None:
                raise ValueError(
                    "paper_decoding sets the output length of each sentence (source length + 50); "
                    f"got {name}={kwargs[name]}"
                )
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        attention_mask = kwargs.get("attention_mask")
        if input_ids is None:
            raise ValueError("paper_decoding needs input_ids to know each sentence's length")
        if attention_mask is None:
            attention_mask = input_ids.ne(self.config.pad_token_id)
        source_lengths = attention_mask.sum(dim=-1)

        generation_config = kwargs.get("generation_config") or self.generation_config
        alpha = kwargs.pop("length_penalty", generation_config.length_penalty)
        kwargs.setdefault("num_beams", generation_config.num_beams)
        criteria = StoppingCriteriaList(kwargs.pop("stopping_criteria", None) or [])
        criteria.append(MaxLengthPerSentence(1 + source_lengths + 50))  # 1: the decoder start token
        self._gnmt_alpha = alpha
        try:
            return super().generate(
                *args,
                max_new_tokens=int(source_lengths.max()) + 50,
                stopping_criteria=criteria,
                length_penalty=alpha,
                **kwargs,
            )
        finally:
            self._gnmt_alpha = None

    def _expand_inputs_for_generation(self, expand_size=1, is_encoder_decoder=False, input_ids=None, **model_kwargs):
        """generate() repeats every input once per beam (or returned sequence) of a sentence; the encoder output and
        its padding mask stay one per sentence, since the hypotheses of a sentence share them (MultiHeadAttention).

        Its encoder-decoder attention keys and values are then computed and read once per sentence, not once per beam.
        A returned `encoder_hidden_states` or `encoder_attentions` has one row per sentence accordingly.
        """
        shared = {key: model_kwargs.pop(key) for key in ("encoder_outputs", "attention_mask") if key in model_kwargs}
        input_ids, model_kwargs = super()._expand_inputs_for_generation(expand_size, False, input_ids, **model_kwargs)
        return input_ids, {**model_kwargs, **shared}

    def _reorder_cache(self, past_key_values: Cache, beam_idx: torch.LongTensor) -> Cache:
        """Beam search's reordering of the cache after each step, in which only the decoder's self-attention moves.

        A beam only ever continues a beam of its own sentence, and the encoder-decoder attention keys and values
        (Section 3.2.3) are the sentence's own: one row per sentence (see `_expand_inputs_for_generation`), or rows
        equal for its beams where the encoder output was repeated per beam. transformers' default indexes them by beam.
        """
        if isinstance(past_key_values, EncoderDecoderCache):
            past_key_values.self_attention_cache.reorder_cache(beam_idx)
        else:
            past_key_values.reorder_cache(beam_idx)
        return past_key_values

    # The two hooks of transformers' beam search where the length penalty enters (generation/utils.py). Only under
    # paper_decoding: the scores are divided by GNMT's lp here and transformers' own |Y|^alpha is switched off.
    def _update_finished_beams(self, *, topk_log_probs, cur_len, decoder_prompt_len, length_penalty, **kwargs):
        if self._gnmt_alpha is not None:
            output_length = cur_len + 1 - decoder_prompt_len  # |Y|, the end-of-sentence token included
            topk_log_probs = topk_log_probs / gnmt_length_penalty(output_length, self._gnmt_alpha)
            length_penalty = 0.0
        return super()._update_finished_beams(
            topk_log_probs=topk_log_probs,
            cur_len=cur_len,
            decoder_prompt_len=decoder_prompt_len,
            length_penalty=length_penalty,
            **kwargs,
        )

    def _check_early_stop_heuristic(
        self, *, running_beam_scores, max_length, decoder_prompt_len, length_penalty, **kw
    ):
        if self._gnmt_alpha is not None:
            # Log-probabilities only fall as a hypothesis grows while lp(Y) only grows, so the best any live beam can
            # still reach is its score now divided by lp at the maximum length (tensor2tensor's exact bound).
            running_beam_scores = running_beam_scores / gnmt_length_penalty(
                max_length - decoder_prompt_len, self._gnmt_alpha
            )
            length_penalty = 0.0
        return GenerationMixin._check_early_stop_heuristic(
            running_beam_scores=running_beam_scores,
            max_length=max_length,
            decoder_prompt_len=decoder_prompt_len,
            length_penalty=length_penalty,
            **kw,
        )


__all__ = [
    "VaswaniPreTrainedModel",
    "VaswaniModel",
    "VaswaniForConditionalGeneration",
    "PositionalEncoding",
    "MultiHeadAttention",
    "sinusoids",
    "gnmt_length_penalty",
]
