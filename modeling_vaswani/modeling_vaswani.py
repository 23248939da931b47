"""The Transformer of Vaswani et al. 2017 (arXiv:1706.03762), Section 3 bottom-up: parts, layers, stacks, model.

The parts (3.5 positional encoding, 3.2 attention, 3.3 feed-forward), then the layers of 3.1, the base class the
stacks need, the stacks of 3.1, and the model of Figure 1 with the shared embeddings and output layer of 3.4.
Where we follow tensor2tensor (the paper's code) rather than the paper's text, the comment says so. Payload: copied
flat into checkpoints as remote code (remote_code_vaswani.py), it imports only torch, transformers and its siblings:
the configuration, the CPU speed paths (kernels_vaswani.py, each identical to its Section except in speed), the
decoder's KV cache (decoding_vaswani.py, which decoding alone needs) and the paper's decoding of Section 6.1
(generation_vaswani.py).
"""

import math

import torch
from torch import nn
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.modeling_utils import PreTrainedModel
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, can_return_tuple
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .compat_vaswani import CACHE, either_cache_name, output_cache
from .configuration_vaswani import VaswaniConfig
from .decoding_vaswani import decoder_cache, keys_and_values
from .generation_vaswani import VaswaniGenerationMixin, paper_generation_config
from .kernels_vaswani import ATTENTION_FUNCTIONS as ALL_ATTENTION_FUNCTIONS  # set_attn_implementation() seeks the name
from .kernels_vaswani import Linear, encoder_attention_mask_by_sentence
from .remote_code_vaswani import SavesPayload


# === 3.5 Positional encoding (Table 3 row E: learned) ================================================================
def sinusoids(num_positions: int, d_model: int, offset: int | torch.Tensor = 0) -> torch.Tensor:
    """Section 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)).
    Sines on even and cosines on odd dimensions (interleaved, unlike the halves layout of Marian and fairseq),
    positions from `offset` (an int, or a 0-dim tensor on the device to compute on); float64 keeps long tables exact.
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
    """The fixed sinusoids of Section 3.5, added to the embeddings at the bottom of both stacks. A buffer never saved:
    `_init_weights` rebuilds it after `from_pretrained` (which creates modules on the meta device). Positions past the
    table are computed on the fly, so any length works."""

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


class LearnedPositionalEmbedding(nn.Embedding):
    """Table 3 row (E): a trained max_position_embeddings x d_model table in place of the sinusoids, one per stack, as
    in ConvS2S (Gehring et al. 2017, which Section 3.5 cites). Initialized as the token embeddings, N(0, d_model^-0.5)
    (`_init_weights`), which is fairseq's choice for its Transformer's learned positions (`--encoder-learned-pos`)."""

    def __init__(self, config: VaswaniConfig):
        super().__init__(config.max_position_embeddings, config.d_model)

    def forward(self, length: int, offset: int | torch.Tensor = 0) -> torch.Tensor:
        if not isinstance(offset, torch.Tensor) and offset + length > self.num_embeddings:
            raise ValueError(
                f"Learned positions cover max_position_embeddings ({self.num_embeddings}) positions; "
                f"got positions up to {offset + length - 1}"
            )
        return super().forward(torch.arange(length, device=self.weight.device) + offset)


# === 3.2 Attention ===================================================================================================
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
    """Equation 1: Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V, one matrix product for all heads. The mask is
    additive (0 where allowed), as transformers builds it for eager attention, or boolean (True where allowed), as
    for SDPA. Returns (batch, length, heads, d_v) and the weights."""
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None and attention_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
    elif attention_mask is not None:
        scores = scores + attention_mask
    weights = nn.functional.softmax(scores, dim=-1)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return output, weights


class MultiHeadAttention(nn.Module):
    """Section 3.2.2: MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    The h projections of each kind are one matrix: W^Q, W^K (d_model x h*d_k), W^V (d_model x h*d_v), W^O
    (h*d_v x d_model); d_k and d_v need not be d_model / h (Table 3). No biases by default: Equation 1 has none, and
    neither has tensor2tensor (`config.attention_bias` adds them). Serves as encoder self-attention, masked decoder
    self-attention (`is_causal`) and encoder-decoder attention (`key_value_states` from the encoder, Section 3.2.3).
    Equation 1 is the attention function of `config._attn_implementation`, from kernels_vaswani.py's interface; a call
    with `output_attentions=True` on SDPA, which computes no weights, takes `eager_attention_forward` instead."""

    def __init__(self, config: VaswaniConfig, is_causal: bool = False, layer_idx: int | None = None):
        super().__init__()
        self.config = config
        self.num_heads = config.num_heads
        self.scaling = config.d_k**-0.5  # the 1/sqrt(d_k) of Equation 1
        self.attention_dropout = config.attention_dropout
        # transformers' SDPA path reads this flag; it must exist, else a skipped mask is taken as causal.
        self.is_causal = is_causal
        self.layer_idx = layer_idx
        bias = config.attention_bias
        heads_k, heads_v = config.num_heads * config.d_k, config.num_heads * config.d_v
        self.w_q = Linear(config.d_model, heads_k, bias=bias)
        self.w_k = Linear(config.d_model, heads_k, bias=bias)
        self.w_v = Linear(config.d_model, heads_v, bias=bias)
        self.w_o = Linear(heads_v, config.d_model, bias=bias)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(*x.shape[:-1], self.num_heads, -1).transpose(1, 2)

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        is_cross_attention = key_value_states is not None
        query = self._heads(self.w_q(hidden_states))

        source = key_value_states if is_cross_attention else hidden_states
        key, value = keys_and_values(
            past_key_values,
            self.layer_idx,
            is_cross_attention,
            lambda: (self._heads(self.w_k(source)), self._heads(self.w_v(source))),
        )

        implementation = self.config._attn_implementation
        if implementation == "sdpa" and kwargs.get("output_attentions"):
            # Section 3.2.1: this call asks for Equation 1's weights, softmax(Q K^T / sqrt(d_k)), which SDPA never
            # returns; it alone takes the eager function (the config, which other callers read, stays as it is).
            implementation = "eager"
        attention = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)
        dropout = self.attention_dropout if self.training else 0.0
        output, weights = attention(
            self, query, key, value, attention_mask, dropout=dropout, scaling=self.scaling, **kwargs
        )
        return self.w_o(output.reshape(*hidden_states.shape[:-1], -1)), weights  # Concat(head_1, ..., head_h) W^O


# === 3.3 Position-wise feed-forward networks =========================================================================
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


# === 3.1 Encoder and decoder layers ==================================================================================
class SublayerConnection(nn.Module):
    """Sections 3.1 and 5.4, post-LN: LayerNorm(x + Dropout(Sublayer(x))); the sublayer's output is passed in.
    Epsilon from the config (tensor2tensor's 1e-6)."""

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


# === The models' base class: weight initialization, and the code that travels with a checkpoint ======================
class VaswaniPreTrainedModel(SavesPayload, PreTrainedModel):  # SavesPayload: save_pretrained writes the whole payload
    config: VaswaniConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _no_split_modules = ["EncoderLayer", "DecoderLayer"]
    _supports_sdpa = True
    _supports_flex_attn = True
    _can_compile_fullgraph = True

    def get_expanded_tied_weights_keys(self, all_submodels: bool = False) -> dict:
        """The ties transformers must make: those of `_tied_weights_keys` between two modules.

        The stacks' embed_tokens are `shared` itself (see VaswaniModel.__init__): their entries name one parameter
        under three names. They stay in `_tied_weights_keys`, so that save_pretrained writes the matrix once, as
        `shared.weight`, but are no ties to make: `from_pretrained` flags each tie's target as initialized, and a
        target that is its source flagged a missing `shared.weight` too, which was then neither initialized nor moved
        off the meta device, nor reported missing.
        """
        tied = super().get_expanded_tied_weights_keys(all_submodels)
        if all_submodels:  # the union of each submodel's own answer (this method, all_submodels=False)
            return tied
        owner = lambda name: self.get_submodule(name.rpartition(".")[0])  # noqa: E731
        return {target: source for target, source in tied.items() if owner(target) is not owner(source)}

    @torch.no_grad()
    def _init_weights(self, module: nn.Module):
        """The paper gives no initialization; by default this is tensor2tensor's and torch.nn.Transformer's.

        Embeddings ~ N(0, d_model^-0.5), so that after the sqrt(d_model) scale of Section 3.4 they have unit variance
        (tensor2tensor); linear weights Xavier-uniform, biases zero (tensor2tensor and torch.nn.Transformer).
        With `config.init_std` set, every embedding and linear weight is N(0, init_std) instead (BERT, BART, MarianMT).
        """
        std = self.config.init_std
        if isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=self.config.d_model**-0.5 if std is None else std)
        elif isinstance(module, nn.Linear):
            if std is None:
                init.xavier_uniform_(module.weight)
            else:
                init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, PositionalEncoding):
            init.copy_(module.table, sinusoids(*module.table.shape))


# === 3.1 The stacks ==================================================================================================
class VaswaniStack(VaswaniPreTrainedModel):
    """What the two stacks of Section 3.1 share: the input embedding times sqrt(d_model) (Section 3.4) plus the
    positional encodings (Section 3.5; Table 3 row E: learned), with dropout (Section 5.4), under N identical layers.
    No final norm."""

    def __init__(self, config: VaswaniConfig, layers: list[nn.Module]):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.embed_scale = math.sqrt(config.d_model)
        positions = LearnedPositionalEmbedding if config.position_embedding_type == "learned" else PositionalEncoding
        self.positional_encoding = positions(config)
        self.layers = nn.ModuleList(layers)
        self.post_init()

    def embed(self, input_ids: torch.LongTensor | None, inputs_embeds: torch.Tensor | None, offset=0) -> torch.Tensor:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError(f"Pass exactly one of input_ids and inputs_embeds to {type(self).__name__}")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        positions = self.positional_encoding(inputs_embeds.shape[1], offset).to(inputs_embeds.dtype)
        hidden_states = inputs_embeds * self.embed_scale + positions
        return nn.functional.dropout(hidden_states, p=self.config.dropout, training=self.training)


class VaswaniEncoder(VaswaniStack):
    """Section 3.1: the encoder stack, N EncoderLayers over the embedded source."""

    _can_record_outputs = {"hidden_states": EncoderLayer, "attentions": MultiHeadAttention}

    def __init__(self, config: VaswaniConfig):
        super().__init__(config, [EncoderLayer(config) for _ in range(config.encoder_layers)])

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs,
    ) -> BaseModelOutput:
        hidden_states = self.embed(input_ids, inputs_embeds)
        attention_mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=hidden_states, attention_mask=attention_mask
        )
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask, **kwargs)
        return BaseModelOutput(last_hidden_state=hidden_states)


class VaswaniDecoder(VaswaniStack):
    """Section 3.1: the decoder stack, fed the target shifted right by one position; its self-attention is masked
    so that position i sees only positions before i."""

    _can_record_outputs = {
        "hidden_states": DecoderLayer,
        "attentions": OutputRecorder(MultiHeadAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(MultiHeadAttention, index=1, layer_name="cross_attn"),
    }

    def __init__(self, config: VaswaniConfig):
        super().__init__(config, [DecoderLayer(config, layer_idx=i) for i in range(config.decoder_layers)])

    @merge_with_config_defaults
    @capture_outputs
    @either_cache_name
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
        if encoder_hidden_states is None:
            raise ValueError("The decoder attends over the encoder output: pass encoder_hidden_states")
        past_key_values, self_attention_cache = decoder_cache(self.config, past_key_values, use_cache)
        # While decoding with a cache, the new tokens continue the positions already cached.
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0
        hidden_states = self.embed(input_ids, inputs_embeds, past_length)
        causal_mask = create_causal_mask(
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=attention_mask,
            **{CACHE: self_attention_cache},
            # SDPA's implicit causal mask (None) would leave Equation 1's weights unmasked (MultiHeadAttention)
            allow_is_causal_skip=not kwargs.get("output_attentions"),
        )
        # Section 3.2.3's mask as kernels_vaswani.by_sentence attends: a sentence's k decoder rows, one row of queries
        encoder_attention_mask = encoder_attention_mask_by_sentence(
            self.config, hidden_states, encoder_hidden_states, encoder_attention_mask
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
        return BaseModelOutputWithPastAndCrossAttentions(last_hidden_state=hidden_states, **{CACHE: past_key_values})


# === The model: one embedding matrix for source, target and output (Section 3.4) =====================================
def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Section 3.1: the decoder input is the output "offset by one position": start token, then labels[:-1].
    Ignored label positions (-100) become padding."""
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
        # One module, not three holding one tied matrix: FSDP2 (torch >= 2.13) refuses a parameter seen by two shard
        # groups, and accelerate puts `shared` with the lm_head in one group, the stacks' embed_tokens in the root's.
        self.encoder.embed_tokens = self.decoder.embed_tokens = self.shared
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.shared

    def set_input_embeddings(self, value: nn.Embedding):
        self.shared = self.encoder.embed_tokens = self.decoder.embed_tokens = value

    @can_return_tuple
    @either_cache_name
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
        **kwargs: Unpack[TransformersKwargs],
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
            inputs_embeds=decoder_inputs_embeds,
            **{CACHE: past_key_values},
            use_cache=use_cache,
            **kwargs,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            **{CACHE: output_cache(decoder_outputs)},
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )


# === The LM head (Section 3.4) =======================================================================================
class VaswaniForConditionalGeneration(VaswaniPreTrainedModel, VaswaniGenerationMixin):
    """The Transformer with its output layer: the pre-softmax linear shares the embedding matrix (Section 3.4).
    `generate(..., paper_decoding=True)` decodes as Section 6.1 does (see `generate`)."""

    _tied_weights_keys = {
        "lm_head.weight": "model.shared.weight",
        "model.encoder.embed_tokens.weight": "model.shared.weight",
        "model.decoder.embed_tokens.weight": "model.shared.weight",
    }

    def __init__(self, config: VaswaniConfig):
        super().__init__(config)
        self.model = VaswaniModel(config)
        # Only the matrix is tied; `config.final_logits_bias` (off: not in the paper) adds MarianMT's logits bias.
        self.lm_head = Linear(config.d_model, config.vocab_size, bias=config.final_logits_bias)
        self.post_init()
        self.generation_config = paper_generation_config(config)

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Linear):
        self.lm_head = value

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    @can_return_tuple
    @either_cache_name
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
        **kwargs: Unpack[TransformersKwargs],
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
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **{CACHE: past_key_values},
            **kwargs,
        )
        logits = self.lm_head(outputs.last_hidden_state[:, -logits_to_keep:])  # [:, -0:] keeps every position
        loss = None if labels is None else self.translation_loss(logits, labels, num_items_in_batch)
        # The model's outputs (the same names in both classes), with the logits in place of the last hidden state.
        fields = {name: value for name, value in outputs.items() if name != "last_hidden_state"}
        return Seq2SeqLMOutput(loss=loss, logits=logits, **fields)

    @staticmethod
    def translation_loss(
        logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None = None
    ) -> torch.Tensor:
        """Token cross-entropy, labels not shifted (logits[i] predicts labels[i]), -100 ignored, in float32: a mean
        over this batch's tokens, or a sum divided by `num_items_in_batch` when the Trainer accumulates gradients over
        several batches. Label smoothing (Section 5.4) is the Trainer's `label_smoothing_factor`."""
        logits = logits.float().reshape(-1, logits.shape[-1])
        labels = labels.to(logits.device).reshape(-1)
        if num_items_in_batch is None:
            return nn.functional.cross_entropy(logits, labels, ignore_index=-100)
        loss = nn.functional.cross_entropy(logits, labels, ignore_index=-100, reduction="sum")
        return loss / torch.as_tensor(num_items_in_batch, device=loss.device)


__all__ = [
    "VaswaniPreTrainedModel",
    "VaswaniModel",
    "VaswaniForConditionalGeneration",
    "PositionalEncoding",
    "LearnedPositionalEmbedding",
    "MultiHeadAttention",
    "sinusoids",
]
