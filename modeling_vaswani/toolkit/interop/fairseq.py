"""fairseq Transformer checkpoints (`transformer.wmt16.en-de`, `transformer.wmt14.en-fr` of Ott et al. 2018) as Vaswani
checkpoints, exactly, with a tokenizer built from their dictionary and BPE codes.

fairseq's `transformer_vaswani_wmt_en_de_big` with `--share-all-embeddings` is the network of Section 3: post-LN
layers, one embedding matrix for source, target and the pre-softmax linear, scaled by sqrt(d_model). Its positional
encodings are its own (fairseq/modules/sinusoidal_positional_embedding.py): the halves layout [sin | cos], frequencies
exp(-i log(10000) / (d_model/2 - 1)) rather than Section 3.5's 10000^(-2i/d_model), and positions counted from
padding_idx + 1 (utils.make_positions), so the first token is position 2. No permutation of d_model turns those into
Section 3.5's (the frequencies differ), so they are stored as they are, as the position table of Table 3 row E
(`position_embedding_type="learned"`): row p holds fairseq's encoding of the p-th token, its position padding_idx+1+p.
Every matrix then keeps fairseq's d_model axis unchanged. The table covers max(max_source_positions,
max_target_positions), the longest input fairseq accepts (our learned table does not extrapolate beyond it).

Positions: ours are counted by index, fairseq's make_positions numbers the non-padding tokens only. With right
padding (our tokenizer's, and the decoder's always) both agree on every real token; a padded position's own output
is never read (masked as a key, after the real tokens of its row). Left-padded rows, fairseq's default for sources
(`--left-pad-source`), would shift our positions: pad on the right.

The other departures from the paper are the configuration options made for them: `attention_bias` (fairseq's
projections have biases), `layer_norm_eps` 1e-5 (fairseq's LayerNorm keeps torch's default), `activation_function`
(`--activation-fn`, ReLU by default) and `position_embedding_type` (above). fairseq scales q by head_dim^-0.5 after
its projection, which is our scaled dot product. Anything else (no embedding scale, pre-LN, separate dictionaries or
an untied output projection, LayerNorm on the embeddings, learned positions, unknown weights) is refused by name.

The tokenizer (`fairseq_tokenizer`) reproduces subword-nmt's BPE over fairseq's dictionary; see there for what it
does and does not reproduce of the Moses tokenization in front of it. The tokenizers library needs an id for every
symbol of the BPE merges; those dict.txt lacks (fairseq's dictionary holds the pieces of its segmented training text,
not the intermediate symbols of the merges, and --nwordssrc may cut rare ones) are <unk> to fairseq. They get ids past
the dictionary, and the converted model embeds them as copies of <unk>'s row, so that the encoder and decoder see
exactly what fairseq's see. The logits over the dictionary are fairseq's; the extra columns repeat <unk>'s logit, so a
softmax over all of them gives <unk> its share once per extra symbol more (log-probabilities lower than fairseq's by
log(1 + extra * p(<unk>)), nothing when dict.txt covers the merges); generation never picks them (`suppress_tokens`).
"""

import argparse
import math
import re
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from ...configuration_vaswani import VaswaniConfig
from ...modeling_vaswani import VaswaniForConditionalGeneration
from ..texts import iter_text_lines
from .convert import (
    DECODER_LAYER,
    ENCODER_LAYER,
    SHARED_DEPARTURES,
    ConversionError,
    convert_checkpoint,
    converted_model,
    layer_weight,
)
from .pickles import load_weights_only

SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")  # fairseq's Dictionary: bos 0, pad 1, eos 2, unk 3, then dict.txt
BOS_ID, PAD_ID, EOS_ID, UNK_ID = range(4)
END_OF_WORD, CONTINUATION = "</w>", "@@"  # subword-nmt's marks: in the codes, and in the segmented text

# fairseq's --activation-fn (utils.get_activation_fn) -> transformers' ACT2FN: gelu is the erf form, gelu_accurate
# and gelu_fast the tanh approximation.
ACTIVATIONS = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_accurate": "gelu_new",
    "gelu_fast": "gelu_new",
    "tanh": "tanh",
    "linear": "linear",
    "swish": "silu",
}
# Settings a converted checkpoint must have as stated, with fairseq's default where older checkpoints omit them
# (base_architecture fills them in), and what the paper's network needs.
REQUIRED = {
    "share_all_embeddings": (None, True, "one dictionary and one embedding matrix everywhere (Section 3.4)"),
    "no_scale_embedding": (False, False, "embeddings multiplied by sqrt(d_model) (Section 3.4)"),
    "encoder_normalize_before": (False, False, "post-LN, LayerNorm(x + Sublayer(x)) (Section 3.1)"),
    "decoder_normalize_before": (False, False, "post-LN, LayerNorm(x + Sublayer(x)) (Section 3.1)"),
    "layernorm_embedding": (False, False, "no LayerNorm on the embeddings"),
    "encoder_learned_pos": (False, False, "fairseq's sinusoids"),
    "decoder_learned_pos": (False, False, "fairseq's sinusoids"),
    "no_token_positional_embeddings": (False, False, "positional encodings (Section 3.5)"),
    "adaptive_softmax_cutoff": (None, None, "one softmax over the shared vocabulary (Section 3.4)"),
    "cross_self_attention": (False, False, "decoder self-attention over the target alone (Section 3.2.3)"),
}
SHARED_SIZES = ("embed_dim", "ffn_embed_dim", "attention_heads")  # one d_model, d_ff and h for both stacks

# The layers' modules have MarianMT's names (convert.ENCODER_LAYER, DECODER_LAYER): transformers' port kept fairseq's.
# Older encoders held their two norms as a list (TransformerEncoderLayer.upgrade_state_dict_named renames them).
LEGACY_ENCODER_NORMS = {"layer_norms.0": "self_attn_layer_norm", "layer_norms.1": "final_layer_norm"}
EMBEDDINGS = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")
TIED_OUTPUTS = ("decoder.output_projection.weight", "decoder.embed_out")
CHECKPOINT_EXPECTED = (
    "a fairseq checkpoint saved by torch.save: a dict of 'args' (or 'cfg') and 'model' holding tensors, plain "
    "containers and argparse.Namespace only, which loads with weights_only=True"
)
IGNORED = re.compile(r"(encoder|decoder)\.(version|embed_positions\._float_tensor)")  # bookkeeping buffers


# === The checkpoint file ============================================================================================


def load_checkpoint(path: str | Path) -> dict:
    """fairseq's checkpoint dict, loaded with `weights_only=True` and argparse.Namespace (fairseq's "args") allowed:
    nothing else is unpickled. Both of torch.save's formats load (the zip one, and the legacy one of older releases);
    a file that needs other globals is refused with their names, any other file (a plain pickle, a truncated file)
    with its name and what was expected (`pickles.load_weights_only`)."""
    checkpoint = load_weights_only(
        path,
        ConversionError,
        expected=CHECKPOINT_EXPECTED,
        allowed=[argparse.Namespace],
        remedy="If you trust its source, load it there and torch.save it again holding only those",
    )
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("model"), dict):
        raise ConversionError(f"{path} holds no 'model' state dict; expected {CHECKPOINT_EXPECTED}")
    return checkpoint


def model_settings(checkpoint: dict) -> dict:
    """The model's settings: fairseq's `args` (an argparse.Namespace), or `cfg["model"]` (a dict or Namespace)."""
    settings = checkpoint.get("args")
    if settings is None:
        settings = (checkpoint.get("cfg") or {}).get("model")
    if isinstance(settings, argparse.Namespace):
        settings = vars(settings)
    if not isinstance(settings, dict):
        raise ConversionError(
            f"the checkpoint's settings are {type(settings).__name__}; expected 'args' (argparse.Namespace) or "
            "'cfg' with a 'model' section (a dict or argparse.Namespace)"
        )
    return settings


def check_settings(settings: dict) -> None:
    """Refuses settings that are not the paper's network up to the departures this converter carries over."""
    for name, (default, expected, meaning) in REQUIRED.items():
        value = settings.get(name, default)
        if value != expected:
            raise ConversionError(f"{name} is {value!r}; expected {expected!r}: {meaning}")
    for size in SHARED_SIZES:
        encoder, decoder = settings.get(f"encoder_{size}"), settings.get(f"decoder_{size}")
        if not isinstance(encoder, int) or encoder != decoder:
            raise ConversionError(
                f"encoder_{size} is {encoder!r} and decoder_{size} {decoder!r}; expected one integer for both "
                "(Table 3 has one d_model, d_ff and h)"
            )
    for name in ("encoder_layers", "decoder_layers"):
        if not isinstance(settings.get(name), int):
            raise ConversionError(f"{name} is {settings.get(name)!r}; expected the number of layers N")
    for name in ("decoder_input_dim", "decoder_output_dim"):
        if settings.get(name, settings["decoder_embed_dim"]) != settings["decoder_embed_dim"]:
            raise ConversionError(f"{name} is {settings[name]!r}; expected decoder_embed_dim (no projection)")
    activation = settings.get("activation_fn", "relu")
    if activation not in ACTIVATIONS:
        raise ConversionError(f"activation_fn is {activation!r}; expected one of {sorted(ACTIVATIONS)}")


def vaswani_config(settings: dict, vocab_size: int) -> VaswaniConfig:
    """The VaswaniConfig of (checked) fairseq settings: sizes, dropout, fairseq's special ids and the departures."""
    activation_dropout = settings.get("activation_dropout") or settings.get("relu_dropout") or 0.0  # fairseq's rule
    return VaswaniConfig(
        vocab_size=vocab_size,
        d_model=settings["encoder_embed_dim"],
        encoder_layers=settings["encoder_layers"],
        decoder_layers=settings["decoder_layers"],
        num_heads=settings["encoder_attention_heads"],
        d_ff=settings["encoder_ffn_embed_dim"],
        activation_function=ACTIVATIONS[settings.get("activation_fn", "relu")],
        dropout=settings.get("dropout", 0.1),
        attention_dropout=settings.get("attention_dropout", 0.0),
        activation_dropout=activation_dropout,
        position_embedding_type="learned",
        max_position_embeddings=max(settings.get(f"max_{side}_positions", 1024) for side in ("source", "target")),
        bos_token_id=BOS_ID,
        pad_token_id=PAD_ID,
        eos_token_id=EOS_ID,
        decoder_start_token_id=EOS_ID,  # fairseq's prev_output_tokens begin with </s>
        **SHARED_DEPARTURES,
    )


# === The weights ====================================================================================================


def fairseq_positions(num_positions: int, d_model: int, padding_idx: int = PAD_ID) -> torch.Tensor:
    """fairseq's sinusoids of the tokens at positions padding_idx + 1 ... padding_idx + num_positions: [sin | cos]
    of position * exp(-i log(10000) / (d_model/2 - 1)), a zero column appended for an odd d_model, computed in
    float32 as fairseq computes them (SinusoidalPositionalEmbedding.get_embedding)."""
    half = d_model // 2
    frequencies = torch.exp(torch.arange(half, dtype=torch.float) * -(math.log(10000) / (half - 1)))
    positions = torch.arange(padding_idx + 1, padding_idx + 1 + num_positions, dtype=torch.float)
    angles = positions[:, None] * frequencies[None, :]
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    return torch.cat([table, torch.zeros(num_positions, d_model % 2)], dim=1)


def upgrade_legacy_names(state_dict: dict) -> dict:
    """Older checkpoints' names as fairseq upgrades them on load: `in_proj_weight`/`in_proj_bias` (q, k, v stacked
    in that order) split into q_proj, k_proj, v_proj; an encoder layer's `layer_norms.0/1` renamed."""
    upgraded = {}
    for key, tensor in state_dict.items():
        prefix, _, name = key.rpartition(".")
        if name in ("in_proj_weight", "in_proj_bias"):
            kind = name.removeprefix("in_proj_")
            for projection, part in zip(("q_proj", "k_proj", "v_proj"), tensor.chunk(3), strict=True):
                upgraded[f"{prefix}.{projection}.{kind}"] = part
            continue
        legacy = layer_weight(key, "", LEGACY_ENCODER_NORMS, {})
        if legacy is not None:
            key = "{}.layers.{}.{}.{}".format(*legacy)
        upgraded[key] = tensor
    return upgraded


def shared_embedding(state_dict: dict) -> torch.Tensor:
    """The one embedding matrix: both stacks' embed_tokens and any output projection must be the same matrix."""
    if EMBEDDINGS[0] not in state_dict:
        raise ConversionError(f"the checkpoint has no {EMBEDDINGS[0]}; expected a fairseq Transformer's weights")
    shared = state_dict[EMBEDDINGS[0]]
    for key in (*EMBEDDINGS[1:], *TIED_OUTPUTS):
        if key in state_dict and not torch.equal(state_dict[key], shared):
            raise ConversionError(
                f"{key} differs from {EMBEDDINGS[0]}; expected one matrix for both embeddings and the output "
                "projection (--share-all-embeddings, Section 3.4)"
            )
    return shared


def convert_state_dict(state_dict: dict, config: VaswaniConfig) -> dict:
    """fairseq's weights under our names (d_model axis unchanged), the shared embedding once, fairseq's sinusoids as
    both stacks' position tables; bookkeeping buffers ignored, anything unknown refused by name."""
    state_dict = upgrade_legacy_names(state_dict)
    positions = fairseq_positions(config.max_position_embeddings, config.d_model)
    converted = {
        "model.shared.weight": shared_embedding(state_dict),
        "model.encoder.positional_encoding.weight": positions,
        "model.decoder.positional_encoding.weight": positions.clone(),
    }
    for key, tensor in state_dict.items():
        if key in EMBEDDINGS or key in TIED_OUTPUTS or IGNORED.fullmatch(key):
            continue
        weight = layer_weight(key, "", ENCODER_LAYER, DECODER_LAYER)
        if weight is None:
            raise ConversionError(f"unknown weight {key}; expected only the weights of a post-LN fairseq Transformer")
        stack, index, (name, _), kind = weight
        converted[f"model.{stack}.layers.{index}.{name}.{kind}"] = tensor
    return converted


# === The dictionary and the BPE codes ===============================================================================


def read_dictionary(path: str | Path) -> list[str]:
    """fairseq's Dictionary of dict.txt: <s>, <pad>, </s>, <unk>, then one symbol per line ("symbol count", a
    trailing "#fairseq:overwrite" keeping an earlier symbol's index), madeupwordNNNN fillers included."""
    symbols, known = list(SPECIALS), set(SPECIALS)
    for number, line in iter_text_lines(path):
        fields = line.rstrip().split(" ")
        overwrite = fields[-1] == "#fairseq:overwrite"
        fields = fields[:-1] if overwrite else fields
        if len(fields) < 2 or not fields[-1].lstrip("-").isdigit():
            raise ConversionError(f"{path}, line {number}: {line!r}; expected 'symbol count'")
        symbol = " ".join(fields[:-1])
        if symbol in known and not overwrite:
            raise ConversionError(f"{path}, line {number}: {symbol!r} is already in the dictionary")
        if symbol not in known:
            symbols.append(symbol)
            known.add(symbol)
    return symbols


def read_codes(path: str | Path) -> list[tuple[str, str]]:
    """The merges of subword-nmt codes, by rank: "#version: 0.2" then "left right" lines, end-of-word symbols
    ending in </w>; fastBPE's "left right count" lines (the same word-final convention) are read alike.
    subword-nmt 0.1 codes (no header, </w> a symbol of its own) are refused: the tokenizers library's BPE attaches
    the end-of-word mark to the last character, as 0.2 does, and cannot hold it apart."""
    lines = [text for _, text in iter_text_lines(path)]
    header = lines[0].startswith("#version:") if lines else False
    if header and lines[0].split()[-1] != "0.2":
        raise ConversionError(f"{path} is subword-nmt codes of {lines[0]!r}; expected '#version: 0.2'")
    merges = [tuple(line.split(" ")) for line in lines[header:] if line.strip()]
    for number, merge in enumerate(merges, start=1 + header):
        if len(merge) not in (2, 3) or (len(merge) == 3 and not merge[2].isdigit()):
            raise ConversionError(f"{path}, line {number}: {' '.join(merge)!r}; expected 'left right' merges")
    if not header and merges and len(merges[0]) == 2:
        raise ConversionError(
            f"{path} has no '#version: 0.2' header: subword-nmt 0.1 codes, whose separate </w> symbol the "
            "tokenizers library cannot hold; expected subword-nmt 0.2 codes or fastBPE codes"
        )
    return [merge[:2] for merge in merges]


def bpe_name(symbol: str) -> str:
    """A dictionary symbol as the BPE codes spell it: "low@@" continues a word ("low"), "er" ends one ("er</w>")."""
    return symbol.removesuffix(CONTINUATION) if symbol.endswith(CONTINUATION) else symbol + END_OF_WORD


def bpe_vocabulary(symbols: list[str], merges: list[tuple[str, str]]) -> dict[str, int]:
    """The BPE model's vocabulary: the dictionary's symbols at fairseq's ids, then the merges' symbols that
    dict.txt lacks (which fairseq feeds as <unk>), at ids from len(symbols) on."""
    vocabulary = {symbol: index for index, symbol in enumerate(SPECIALS)}
    for index, symbol in enumerate(symbols[len(SPECIALS) :], start=len(SPECIALS)):
        name = bpe_name(symbol)
        if name in vocabulary:
            raise ConversionError(f"dictionary symbols {symbols[vocabulary[name]]!r} and {symbol!r} are both {name!r}")
        vocabulary[name] = index
    for left, right in merges:
        for name in (left, right, left + right):
            vocabulary.setdefault(name, len(vocabulary))
    return vocabulary


# === The tokenizer ==================================================================================================

# Moses as fairseq's hub applies it (sacremoses, aggressive dash splits, escaping: --moses-no-dash-splits and
# --moses-no-escape off, as tokenizer.perl -a prepared the WMT training text), for the common cases. Moses escapes
# after splitting; here the escapes come first and the splitting rules read "&apos;" where Moses reads "'".
ESCAPES = (("&", "&amp;"), ("|", "&#124;"), ("<", "&lt;"), (">", "&gt;"), ("'", "&apos;"), ('"', "&quot;"))
ESCAPES += (("[", "&#91;"), ("]", "&#93;"))
APOSTROPHE = "&apos;"
MOSES_NORMALIZER = normalizers.Sequence(
    [
        normalizers.Replace(Regex(r"(?<=[\p{L}\p{N}])-(?=[\p{L}\p{N}])"), " @-@ "),  # -a: "well-known"
        normalizers.Replace(Regex(r"(?<![.])(?<!\.\p{L})\.\s*$"), " ."),  # the line's final period, not "U.S."
        *(normalizers.Replace(character, escaped) for character, escaped in ESCAPES),
    ]
)
MOSES_PRE_TOKENIZER = pre_tokenizers.Sequence(
    [
        pre_tokenizers.WhitespaceSplit(),
        # English apostrophes: "it's" -> "it 's", "don't" -> "don 't", "1990's" -> "1990 's"; others stand alone.
        pre_tokenizers.Split(
            Regex(
                rf"(?<![\p{{L}}\p{{N}}]){APOSTROPHE}|(?<=\p{{L}}){APOSTROPHE}(?!\p{{L}})|(?<=\p{{N}}){APOSTROPHE}(?!s)"
            ),
            behavior="isolated",
        ),
        pre_tokenizers.Split(APOSTROPHE, behavior="merged_with_next"),
        # Every character but letters, digits, . ' ` , - stands alone; escapes and "@-@" stay whole.
        pre_tokenizers.Split(
            Regex(r"@-@|&(?:amp|#124|lt|gt|quot|#91|#93);|(?!&apos;)(?<!&apos)[^\p{L}\p{N}\s.`,\-]"),
            behavior="isolated",
        ),
        pre_tokenizers.Split(Regex(r",(?!\p{N})|(?<!\p{N}),"), behavior="isolated"),  # not inside "1,000"
    ]
)
# Joins the BPE pieces ("@@ " removal), undoes the Moses spacing of common punctuation, then the escapes.
DETOKENIZER = [(" @-@ ", "-"), *((f" {mark}", mark) for mark in ".,!?;:)"), ("( ", "(")]
DETOKENIZER += [(escaped, character) for character, escaped in reversed(ESCAPES)]  # &amp; last


def fairseq_tokenizer(symbols: list[str], merges: list[tuple[str, str]]) -> PreTrainedTokenizerFast:
    """A tokenizer feeding the ids fairseq feeds: Moses-style splitting, subword-nmt's BPE, fairseq's dictionary, </s>
    appended (fairseq's sources and targets end with it).

    BPE: the merges applied by rank to each word whose last character carries </w> (subword-nmt 0.2, `tokenizers`'
    BPE model with end_of_word_suffix), pieces looked up in the dictionary ("x@@" for a word's inner piece, "x" for
    its last), ids identical to subword-nmt + fairseq's Dictionary. The tokenizers library needs every symbol of the
    merges in its vocabulary: those dict.txt lacks (fairseq's <unk>) get ids from len(symbols) on, and the converted
    model embeds them as <unk> (`convert_fairseq`).

    Moses (fairseq's hub: sacremoses with aggressive dash splits and escaping) is reproduced for the common cases:
    every character but letters, digits and . ' ` , - split off; hyphens between letters or digits as "@-@"; English
    apostrophes ("it 's", "don 't"); commas outside numbers; the line's final period (not of "U.S."); & | < > ' " [ ]
    escaped as Moses escapes them. Not reproduced: Moses' nonbreaking-prefix lists ("etc." at the end of a line is
    split here), periods inside a line (a line of several sentences keeps "word." whole here), its "..." rule, other
    languages' apostrophe rules (German and French text, targets included, gets English's: "geht 's" where Moses -l de
    writes "geht ' s"), and its punctuation normalization (not applied by fairseq's hub either).
    Decoding joins the pieces, undoes the spacing of . , ! ? ; : ( ) and "@-@", and the escapes; it is not Moses'
    detokenizer (quotes and apostrophes stay spaced as tokenized).
    """
    vocabulary = bpe_vocabulary(symbols, merges)
    backend = Tokenizer(
        models.BPE(vocab=vocabulary, merges=merges, unk_token=SPECIALS[UNK_ID], end_of_word_suffix=END_OF_WORD)
    )
    backend.normalizer = MOSES_NORMALIZER
    backend.pre_tokenizer = MOSES_PRE_TOKENIZER
    detokenize = [decoders.Replace(old, new) for old, new in DETOKENIZER]
    backend.decoder = decoders.Sequence([decoders.BPEDecoder(suffix=END_OF_WORD), decoders.Fuse(), *detokenize])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=SPECIALS[BOS_ID],
        pad_token=SPECIALS[PAD_ID],
        eos_token=SPECIALS[EOS_ID],
        unk_token=SPECIALS[UNK_ID],
        add_bos_token=False,
        add_eos_token=True,
        clean_up_tokenization_spaces=False,
        split_special_tokens=True,  # a literal "</s>" in a sentence is text, which Moses splits and escapes
    )


# === Putting it together ============================================================================================


def convert_fairseq(checkpoint: dict, symbols: list[str], merges: list[tuple[str, str]]):
    """The VaswaniForConditionalGeneration computing what the fairseq checkpoint computes (float32 rounding aside),
    and its tokenizer. The merge symbols dict.txt lacks extend the vocabulary past the dictionary as copies of
    <unk>'s row (see the module's docstring); generation never picks them, nor <pad>, which fairseq's SequenceGenerator
    never picks either."""
    settings = model_settings(checkpoint)
    check_settings(settings)
    tokenizer = fairseq_tokenizer(symbols, merges)
    state_dict = {key: tensor.float() for key, tensor in checkpoint["model"].items()}  # fp16 checkpoints too
    rows = shared_embedding(state_dict).shape[0]
    if rows != len(symbols):
        raise ConversionError(
            f"the embedding has {rows} rows and the dictionary {len(symbols)} symbols; expected one row per symbol "
            "(4 special symbols, then dict.txt's lines)"
        )
    config = vaswani_config(settings, len(tokenizer))
    weights = convert_state_dict(state_dict, config)
    shared = weights["model.shared.weight"]
    weights["model.shared.weight"] = torch.cat([shared, shared[[UNK_ID] * (len(tokenizer) - rows)]])
    model = converted_model(config, weights, "every weight of a fairseq Transformer with attention biases")
    model.generation_config.suppress_tokens = [PAD_ID, *range(rows, len(tokenizer))]
    return model, tokenizer


def find_release_files(folder: str | Path) -> tuple[Path, Path, Path]:
    """model.pt, the dictionary and bpecodes of a released fairseq folder (as the tarballs unpack). A shared
    dictionary ships as dict.SRC.txt and dict.TGT.txt with the same lines; differing ones are refused."""
    folder = Path(folder)
    dictionaries = sorted(folder.glob("dict.*.txt"))
    if not dictionaries:
        raise ConversionError(f"{folder} has no dict.*.txt; expected fairseq's dictionary beside model.pt")
    first = dictionaries[0].read_bytes()
    for other in dictionaries[1:]:
        if other.read_bytes() != first:
            raise ConversionError(
                f"{dictionaries[0].name} and {other.name} differ: separate dictionaries; expected one shared "
                "vocabulary (--share-all-embeddings, Section 3.4)"
            )
    for name in ("model.pt", "bpecodes"):
        if not (folder / name).is_file():
            raise ConversionError(
                f"{folder} has no {name}; expected a released folder (model.pt, dict.*.txt, bpecodes), or pass the "
                "checkpoint, dictionary and BPE codes as three paths (some releases ship no codes: take those of the "
                "data the model was trained on)"
            )
    return folder / "model.pt", dictionaries[0], folder / "bpecodes"


def convert_fairseq_checkpoint(
    checkpoint_path: str | Path, dictionary_path: str | Path, codes_path: str | Path, output_dir: str | Path
) -> VaswaniForConditionalGeneration:
    """Loads, converts and saves (model and tokenizer) into `output_dir` (new, empty or an earlier converted model,
    replaced whole). Returns the model."""
    return convert_checkpoint(
        output_dir,
        lambda: convert_fairseq(
            load_checkpoint(checkpoint_path), read_dictionary(dictionary_path), read_codes(codes_path)
        ),
        inputs=[checkpoint_path, dictionary_path, codes_path],
    )
