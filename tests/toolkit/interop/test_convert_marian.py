"""vaswani-convert marian against an independent reference: transformers' MarianMTModel with random weights and a
real MarianTokenizer (a SentencePiece model trained here on Multi30k), converted; the two compute the same. And
`to_marian`, the other way: a round trip either way gives back the same tensors."""

import copy
import json
import os

import pytest
import sentencepiece
import torch
from helpers.fresh_process import reload_in_fresh_process
from helpers.tiny_models import tiny_config
from safetensors.torch import load_file, save_file
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    BartConfig,
    GenerationConfig,
    MarianConfig,
    MarianMTModel,
    MarianTokenizer,
)
from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

from modeling_vaswani import VaswaniConfig, VaswaniForConditionalGeneration
from modeling_vaswani.modeling_vaswani import sinusoids
from modeling_vaswani.toolkit.cli import convert
from modeling_vaswani.toolkit.data.corpora import multi30k_files, read_sentences
from modeling_vaswani.toolkit.interop.marian import (
    POSITION_KEYS,
    ConversionError,
    check_marian_config,
    check_tokenizer,
    convert_marian,
    convert_marian_checkpoint,
    halves_to_interleaved,
)
from modeling_vaswani.toolkit.interop.marian_export import to_marian

SOURCES = ["A man in a blue shirt is riding a bike.", "Two dogs play in the snow.", "A girl sings."]
TARGETS = ["Ein Mann in einem blauen Hemd fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "Ein Mädchen singt."]


def marian_tokenizer(folder) -> MarianTokenizer:
    """A MarianTokenizer as OPUS-MT ships them: a SentencePiece model per side (here one, trained on 300 English and
    300 German Multi30k sentences) and a vocabulary with </s> 0, <unk> 1 and <pad> last."""
    files = multi30k_files("train")
    lines = read_sentences(files["en"])[:300] + read_sentences(files["de"])[:300]
    prefix = folder / "spm"
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(prefix), vocab_size=250, num_threads=1, minloglevel=2
    )
    processor = sentencepiece.SentencePieceProcessor(model_file=f"{prefix}.model")
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    pieces = [piece for piece in pieces if piece not in ("<unk>", "<s>", "</s>")]
    vocab = {piece: index for index, piece in enumerate(["</s>", "<unk>", *pieces, "<pad>"])}
    (folder / "vocab.json").write_text(json.dumps(vocab))
    return MarianTokenizer(f"{prefix}.model", f"{prefix}.model", str(folder / "vocab.json"), "en", "de")


def random_marian(tokenizer, seed: int = 0, **overrides) -> MarianMTModel:
    """A small MarianMTModel as OPUS-MT configures them (swish, scaled embeddings, pad starts the decoder), every
    weight random (LayerNorms and biases included) and a nonzero final_logits_bias."""
    values = dict(
        vocab_size=len(tokenizer),
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        activation_function="swish",
        scale_embedding=True,
        max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.pad_token_id,
        forced_eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    model = MarianMTModel(MarianConfig(**{**values, **overrides})).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "embed_positions" not in name:
                parameter.normal_(1.0 if name.endswith("layer_norm.weight") else 0.0, 0.2)
        model.final_logits_bias.normal_(0.0, 1.0)
    model.generation_config.bad_words_ids = [[tokenizer.pad_token_id]]  # as OPUS-MT's: padding is never an output
    return model


@pytest.fixture(scope="module")
def marian_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("marian")
    tokenizer = marian_tokenizer(folder)
    random_marian(tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def converted_folder(marian_folder, tmp_path_factory):
    folder = tmp_path_factory.mktemp("converted") / "vaswani"
    convert.main(["marian", str(marian_folder), str(folder)])
    return folder


@pytest.fixture(scope="module")
def models(marian_folder, converted_folder):
    marian = MarianMTModel.from_pretrained(marian_folder).eval()
    ours = AutoModelForSeq2SeqLM.from_pretrained(converted_folder).eval()
    return marian, ours


@pytest.fixture(scope="module")
def batch(marian_folder):
    tokenizer = MarianTokenizer.from_pretrained(marian_folder)
    return tokenizer(SOURCES, text_target=TARGETS, padding=True, return_tensors="pt")


@pytest.mark.parametrize("d_model", [32, 7])
def test_the_permutation_maps_marians_halves_onto_the_papers_interleaved_sinusoids(d_model):
    halves = MarianSinusoidalPositionalEmbedding(64, d_model).create_weight()
    assert torch.allclose(halves[:, halves_to_interleaved(d_model)], sinusoids(64, d_model), atol=1e-6, rtol=0)


def test_logits_and_loss_equal_marians(models, batch):
    marian, ours = models
    assert type(ours) is VaswaniForConditionalGeneration
    with torch.no_grad():
        expected, got = marian(**batch), ours(**batch)
    difference = (got.logits - expected.logits).abs().max().item()
    assert difference < 1e-5, difference
    assert expected.logits.abs().max() > 1  # logits of random weights, not near zero: a wrong mapping shows
    assert torch.allclose(got.loss, expected.loss, atol=1e-5, rtol=0)


def test_in_float64_the_logits_agree_to_its_rounding(models, batch):
    """The mapping is exact: what float32 leaves (each model's own rounding) vanishes in float64."""
    marian, ours = (copy.deepcopy(model).double() for model in models)
    with torch.no_grad():
        difference = (ours(**batch).logits - marian(**batch).logits).abs().max().item()
    assert difference < 1e-12, difference


@pytest.mark.parametrize("num_beams", [1, 4])
def test_generated_tokens_equal_marians(models, batch, num_beams):
    marian, ours = models
    settings = GenerationConfig(
        num_beams=num_beams, max_new_tokens=12, do_sample=False, length_penalty=1.0, early_stopping=False
    )
    for name in ("decoder_start_token_id", "pad_token_id", "eos_token_id", "bad_words_ids", "forced_eos_token_id"):
        setattr(settings, name, getattr(marian.generation_config, name))
    source = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    expected = marian.generate(**source, generation_config=settings)
    got = ours.generate(**source, generation_config=settings)  # paper_decoding off
    assert got.tolist() == expected.tolist()
    assert expected.shape[1] > 5  # hypotheses of several tokens, not an immediate end


def test_special_ids_decoder_start_and_generation_settings_are_carried_over(models, marian_folder, converted_folder):
    marian, ours = models
    for name in ("pad_token_id", "eos_token_id", "decoder_start_token_id"):
        assert getattr(ours.config, name) == getattr(marian.config, name), name
    assert ours.config.decoder_start_token_id == ours.config.pad_token_id  # Marian starts the decoder with <pad>
    assert ours.config.bos_token_id is None
    assert ours.generation_config.bad_words_ids == [[marian.config.pad_token_id]]
    assert ours.generation_config.forced_eos_token_id == marian.config.eos_token_id
    assert (ours.generation_config.num_beams, ours.generation_config.length_penalty) == (4, 0.6)  # Section 6.1
    assert ours.config.attention_bias and ours.config.final_logits_bias
    assert (ours.config.layer_norm_eps, ours.config.activation_function) == (1e-5, "swish")

    original, loaded = MarianTokenizer.from_pretrained(marian_folder), AutoTokenizer.from_pretrained(converted_folder)
    for name in ("pad_token_id", "eos_token_id", "unk_token_id"):
        assert getattr(loaded, name) == getattr(original, name), name
    assert loaded(SOURCES, text_target=TARGETS).data == original(SOURCES, text_target=TARGETS).data
    translated = ours.generate(**loaded(SOURCES, padding=True, return_tensors="pt"), paper_decoding=True)
    assert (translated[:, 0] == ours.config.decoder_start_token_id).all()


def test_the_saved_folder_reloads_in_a_fresh_process_with_the_same_logits(models, batch, converted_folder, tmp_path):
    marian, _ = models
    reported, logits = reload_in_fresh_process(converted_folder, batch, [SOURCES[0]], tmp_path)
    assert reported["ids"] == [MarianTokenizer.from_pretrained(converted_folder)(SOURCES[0])["input_ids"]]
    with torch.no_grad():
        expected = marian(**batch).logits
    assert (logits - expected).abs().max() < 1e-5


def test_a_zero_logits_bias_converts_to_the_papers_head_without_one(marian_folder):
    tokenizer = MarianTokenizer.from_pretrained(marian_folder)
    marian = random_marian(tokenizer, seed=1)
    marian.final_logits_bias.zero_()
    ours = convert_marian(marian, tokenizer)
    assert not ours.config.final_logits_bias and ours.lm_head.bias is None
    source = tokenizer(SOURCES, text_target=TARGETS, padding=True, return_tensors="pt")
    with torch.no_grad():
        assert (ours(**source).logits - marian(**source).logits).abs().max() < 1e-5


def test_the_logits_bias_is_an_option_off_by_default():
    assert not VaswaniConfig().final_logits_bias
    assert VaswaniForConditionalGeneration(tiny_config()).lm_head.bias is None  # the paper's pre-softmax linear
    model = VaswaniForConditionalGeneration(tiny_config(final_logits_bias=True))
    assert model.lm_head.bias.shape == (model.config.vocab_size,)
    assert model.lm_head.weight is model.model.shared.weight  # the matrix stays tied
    with pytest.raises(ValueError, match="final_logits_bias must be True or False, got 'yes'"):
        tiny_config(final_logits_bias="yes")


@pytest.mark.parametrize(
    "overrides, words",
    [
        ({"share_encoder_decoder_embeddings": False}, "share_encoder_decoder_embeddings is False; expected True"),
        ({"decoder_vocab_size": 300}, "decoder_vocab_size is 300; expected 250"),
        ({"tie_word_embeddings": False}, "tie_word_embeddings is False; expected True"),
        ({"scale_embedding": False}, "scale_embedding is False; expected True"),
        ({"normalize_before": True}, "normalize_before is True; expected False: post-LN"),
        ({"normalize_embedding": True}, "normalize_embedding is True; expected False"),
        ({"static_position_embeddings": False}, "static_position_embeddings is False; expected True"),
        ({"decoder_attention_heads": 2}, "decoder_attention_heads is 2; expected 4"),
        ({"decoder_ffn_dim": 128}, "decoder_ffn_dim is 128; expected 64"),
    ],
)
def test_configurations_that_do_not_fit_are_refused_by_name(overrides, words):
    values = dict(vocab_size=250, scale_embedding=True, encoder_attention_heads=4, decoder_attention_heads=4)
    values.update(encoder_ffn_dim=64, decoder_ffn_dim=64)
    with pytest.raises(ConversionError, match=words):
        check_marian_config(MarianConfig(**{**values, **overrides}))


def test_another_model_type_is_refused():
    with pytest.raises(ConversionError, match="model_type is 'bart'; expected 'marian'"):
        check_marian_config(BartConfig())


def _learned_positions(model):
    model.model.encoder.embed_positions.weight.data.normal_()


def _untied_head(model):
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach() + 1)


def _embedding_layer_norm(model):
    model.model.encoder.layernorm_embedding = torch.nn.LayerNorm(model.config.d_model)


@pytest.mark.parametrize(
    "change, words",
    [
        (_learned_positions, "model.encoder.embed_positions.weight is not the sinusoid table; expected Section 3.5"),
        (_untied_head, "lm_head.weight differs from model.shared.weight; expected one tied embedding matrix"),
        (_embedding_layer_norm, "unknown weight model.encoder.layernorm_embedding.weight; expected only"),
    ],
)
def test_weights_that_do_not_fit_are_refused_by_name(marian_folder, change, words):
    tokenizer = MarianTokenizer.from_pretrained(marian_folder)
    marian = random_marian(tokenizer)
    change(marian)
    with pytest.raises(ConversionError, match=words):
        convert_marian(marian, tokenizer)


@pytest.mark.parametrize(
    "key, words",
    [
        ("model.encoder.layernorm_embedding.weight", r"1 unknown weights \(model.encoder.layernorm_embedding"),
        ("model.decoder.embed_positions.weight", "model.decoder.embed_positions.weight is not the sinusoid table"),
    ],
)
def test_checkpoint_files_with_weights_that_do_not_fit_are_refused(marian_folder, tmp_path, key, words):
    folder = tmp_path / "marian"
    folder.mkdir()
    for path in marian_folder.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    weights = load_file(folder / "model.safetensors")
    weights[key] = torch.ones(32) if "layernorm" in key else torch.randn(64, 32)
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ConversionError, match=words):
        convert_marian_checkpoint(folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def copy_folder(source, folder):
    folder.mkdir()
    for path in source.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    return folder


def test_a_tensor_whose_shape_does_not_fit_the_config_is_refused_by_name_before_loading(marian_folder, tmp_path):
    """Not transformers' ignore_mismatched_sizes traceback: the tensor, both shapes and the file, before its loader."""
    folder = copy_folder(marian_folder, tmp_path / "marian")
    weights = load_file(folder / "model.safetensors")
    weights["model.encoder.layers.1.fc1.weight"] = torch.zeros(63, 32)  # d_ff is 64
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ConversionError) as refused:
        convert_marian_checkpoint(folder, tmp_path / "out")
    assert str(refused.value).startswith(
        f"{folder / 'model.safetensors'}: tensor 'model.encoder.layers.1.fc1.weight' is (63, 32) but {folder}'s "
        "config.json (vocab_size 250, d_model 32, encoder_ffn_dim 64, 2+2 layers, max_position_embeddings 64) "
        "implies (64, 32)"
    )
    assert not (tmp_path / "out").exists()


def test_a_truncated_safetensors_file_is_named(marian_folder, tmp_path):
    folder = copy_folder(marian_folder, tmp_path / "marian")
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=rf"^{folder / 'model.safetensors'} is not a readable safetensors file"):
        convert_marian_checkpoint(folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()


class RunsCode:
    """A pickle that, unpickled by a plain pickle.load, would call os.mkdir(marker): proof of what was run."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def bin_folder(marian_folder, folder, legacy: bool = False, **extra):
    """The Marian folder with its weights as a pytorch_model.bin (torch.save's zip or legacy format), `extra`
    entries added to the state dict."""
    copy_folder(marian_folder, folder)
    weights = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    torch.save({**weights, **extra}, folder / "pytorch_model.bin", _use_new_zipfile_serialization=not legacy)
    return folder


@pytest.mark.parametrize("legacy", [False, True], ids=["zip format", "legacy format"])
def test_a_pytorch_model_bin_converts_when_weights_only_and_is_refused_by_name_when_its_pickle_carries_code(
    marian_folder, models, batch, tmp_path, legacy
):
    marian, _ = models
    folder = bin_folder(marian_folder, tmp_path / "bin", legacy)
    ours = convert_marian_checkpoint(folder, tmp_path / "out")
    with torch.no_grad():
        assert (ours(**batch).logits - marian(**batch).logits).abs().max() < 1e-5
    marker = tmp_path / "was-run"
    folder = bin_folder(marian_folder, tmp_path / "code", legacy, hook=RunsCode(marker))
    with pytest.raises(ConversionError) as refused:
        convert_marian_checkpoint(folder, tmp_path / "out2")
    message = str(refused.value)
    assert message.startswith(f"{folder / 'pytorch_model.bin'} needs globals outside the allow-list to load (")
    assert f"{os.mkdir.__module__}.mkdir" in message
    assert "only weights-only pickles are read (torch.load(weights_only=True))" in message
    assert "convert it to safetensors" in message
    assert not marker.exists() and not (tmp_path / "out2").exists()


def test_a_misshapen_pytorch_model_bin_is_refused_by_name(marian_folder, tmp_path):
    folder = bin_folder(marian_folder, tmp_path / "bin", **{"final_logits_bias": torch.zeros(1, 7)})
    with pytest.raises(ConversionError, match=r"pytorch_model\.bin: tensor 'final_logits_bias' is \(1, 7\) but .*"
                       r"implies \(1, 250\)"):  # fmt: skip
        convert_marian_checkpoint(folder, tmp_path / "out")


def test_tokenizers_that_do_not_fit_are_refused(marian_folder):
    tokenizer = MarianTokenizer.from_pretrained(marian_folder)
    config = MarianConfig(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, eos_token_id=0)
    check_tokenizer(tokenizer, config)
    with pytest.raises(ConversionError, match="pad_token_id is 249; expected the model's, 3"):
        check_tokenizer(tokenizer, MarianConfig(vocab_size=len(tokenizer), pad_token_id=3, eos_token_id=0))
    with pytest.raises(ConversionError, match="250 tokens; expected at most vocab_size \\(100\\)"):
        check_tokenizer(tokenizer, MarianConfig(vocab_size=100, pad_token_id=249, eos_token_id=0))
    tokenizer.separate_vocabs = True
    with pytest.raises(ConversionError, match="separate_vocabs=True; expected one vocabulary"):
        check_tokenizer(tokenizer, config)


def test_the_command_refuses_an_occupied_output_folder_and_a_missing_kind(marian_folder, tmp_path, capsys):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit):
        convert.main(["marian", str(marian_folder), str(tmp_path / "out")])
    assert "holds notes.txt, which vaswani-convert did not write" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        convert.main([str(marian_folder), str(tmp_path / "other")])
    assert "invalid choice" in capsys.readouterr().err


def test_ours_to_marian_and_back_gives_identical_tensors_and_logits(models, batch, marian_folder):
    """ours -> to_marian -> convert_marian: every tensor and the logits bit for bit (the permutations only move
    values; the round trip's configuration is the converted one's: biases, epsilon 1e-5, a logits bias, swish)."""
    _, ours = models
    again = convert_marian(to_marian(ours), MarianTokenizer.from_pretrained(marian_folder))
    expected, got = ours.state_dict(), again.state_dict()
    assert expected.keys() == got.keys()
    assert [key for key in expected if not torch.equal(expected[key], got[key])] == []
    with torch.no_grad():
        assert torch.equal(again(**batch).logits, ours(**batch).logits)


def test_marian_to_ours_and_back_gives_the_marian_weights(models):
    """Every weight back bit for bit. The position tables are Marian's own sinusoids: the export's has the rows the
    longest accepted source's translation reaches (max_position_embeddings + 50), the original's first rows first."""
    marian, ours = models
    expected, got = marian.state_dict(), to_marian(ours).state_dict()
    assert expected.keys() == got.keys()
    for key in POSITION_KEYS:
        rows = marian.config.max_position_embeddings
        assert got[key].shape[0] == rows + 50 and torch.equal(got.pop(key)[:rows], expected.pop(key))
    assert [key for key in expected if not torch.equal(expected[key], got[key])] == []


def test_the_papers_model_as_marian_has_zero_biases_and_computes_the_same():
    """The paper's configuration (no attention or logits biases) at Marian's epsilon, so that only the mapping can
    make the logits differ; Marian's biases, which ours lacks, are zero."""
    ours = VaswaniForConditionalGeneration(tiny_config(layer_norm_eps=1e-5)).eval()
    marian = to_marian(ours)
    biases = [name for name, tensor in marian.state_dict().items() if name.endswith("_proj.bias")]
    assert len(biases) == 4 * 2 + 8 * 2  # four projections a self-attention, eight with cross-attention; 2+2 layers
    assert all(not marian.state_dict()[name].any() for name in [*biases, "final_logits_bias"])
    input_ids, decoder_input_ids = torch.randint(3, 61, (2, 7)), torch.randint(3, 61, (2, 5))
    with torch.no_grad():
        expected = ours(input_ids=input_ids, decoder_input_ids=decoder_input_ids).logits
        got = marian(input_ids=input_ids, decoder_input_ids=decoder_input_ids).logits
    assert expected.abs().max() > 0.1  # logits of random weights, not near zero: a wrong mapping shows
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        ({"position_embedding_type": "learned"}, "position_embedding_type is 'learned'; expected 'sinusoidal'"),
        ({"tie_word_embeddings": False}, "tie_word_embeddings is False; expected True"),
        ({"d_k": 4}, "d_k is 4; expected 8: MarianMT's queries and keys are d_model / h wide"),
    ],
)
def test_what_marian_cannot_hold_is_refused_by_name(overrides, words):
    with pytest.raises(ConversionError, match=words):
        to_marian(VaswaniForConditionalGeneration(tiny_config(**overrides)))


def test_a_weight_without_a_marian_counterpart_is_refused():
    ours = VaswaniForConditionalGeneration(tiny_config())
    ours.model.encoder.layers[0].extra = torch.nn.Linear(2, 2)
    with pytest.raises(ConversionError, match="model.encoder.layers.0.extra.weight has no MarianMTModel counterpart"):
        to_marian(ours)
