"""Tests for the shared BPE tokenizer, trained for real on a slice of the shipped Multi30k data."""

import gzip
import subprocess

import pytest
from helpers.training_setup import REPO
from helpers.training_setup import command as run_command
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from modeling_vaswani import VaswaniConfig
from modeling_vaswani.toolkit.cli import train_tokenizer as train_tokenizer_command
from modeling_vaswani.toolkit.data.tokenizer import train_tokenizer

MULTI30K = REPO / "modeling_vaswani" / "toolkit" / "data" / "multi30k"
SLICE_LINES = 2000
VOCAB_SIZE = 1000


def gz_lines(path):
    with gzip.open(path, "rt", encoding="utf-8", newline="") as stream:
        return stream.read().removesuffix("\n").split("\n")


@pytest.fixture(scope="module")
def slice_files(tmp_path_factory):
    """The first SLICE_LINES lines of train.en and train.de, gzip-compressed like the shipped files."""
    folder = tmp_path_factory.mktemp("slice")
    paths = []
    for lang in ("en", "de"):
        path = folder / f"train.{lang}.gz"
        with gzip.open(path, "wt", encoding="utf-8") as stream:
            stream.write("\n".join(gz_lines(MULTI30K / f"train.{lang}.gz")[:SLICE_LINES]) + "\n")
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def saved_dir(slice_files, tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("tokenizer")
    train_tokenizer(slice_files, vocab_size=VOCAB_SIZE, output_dir=output_dir)
    return output_dir


@pytest.fixture(scope="module")
def tokenizer(saved_dir):
    return AutoTokenizer.from_pretrained(saved_dir)


def test_reloaded_tokenizer_is_fast_with_config_special_ids(tokenizer):
    config = VaswaniConfig()
    assert isinstance(tokenizer, PreTrainedTokenizerFast) and tokenizer.is_fast
    assert len(tokenizer) == VOCAB_SIZE
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (
        config.pad_token_id,
        config.bos_token_id,
        config.eos_token_id,
    )
    assert config.decoder_start_token_id == tokenizer.bos_token_id
    assert tokenizer.unk_token_id == 3
    names = {"pad": "<pad>", "bos": "<s>", "eos": "</s>", "unk": "<unk>"}
    ids = {name: getattr(tokenizer, f"{name}_token_id") for name in names}
    assert sorted(ids.values()) == [0, 1, 2, 3]
    assert tokenizer.convert_ids_to_tokens([ids[name] for name in names]) == list(names.values())


def test_source_and_target_end_with_eos_only(tokenizer):
    plain = tokenizer("A man in a blue shirt.", add_special_tokens=False)["input_ids"]
    eos, bos = tokenizer.eos_token_id, tokenizer.bos_token_id
    assert tokenizer("A man in a blue shirt.")["input_ids"] == plain + [eos]
    encoded = tokenizer("A man in a blue shirt.", text_target="Ein Mann in einem blauen Hemd.")
    assert encoded["input_ids"] == plain + [eos]
    labels = encoded["labels"]
    assert labels[-1] == eos and labels.count(eos) == 1 and bos not in labels
    assert labels[:-1] == tokenizer("Ein Mann in einem blauen Hemd.", add_special_tokens=False)["input_ids"]


def test_decode_reproduces_multi30k_lines(tokenizer):
    # Validation text was not seen in training; the train.de lines with leading/trailing spaces are kept as is.
    spaced = [line for line in gz_lines(MULTI30K / "train.de.gz") if line != line.strip()]
    assert len(spaced) == 40
    lines = gz_lines(MULTI30K / "val.en.gz") + gz_lines(MULTI30K / "val.de.gz") + spaced
    ids = tokenizer(lines)["input_ids"]
    decoded = tokenizer.batch_decode(ids, skip_special_tokens=True)
    assert [(line, text) for line, text in zip(lines, decoded, strict=True) if line != text] == []


@pytest.mark.parametrize(
    "text",
    [
        "Brenmark Tools &amp; Verbindungselemente",
        "  two  leading spaces and a tab\there ",
        "Straße, Größe: 3½ € 😀 漢字",
        "a literal </s> and <unk> stay text",
    ],
)
def test_decode_is_lossless_beyond_the_training_alphabet(tokenizer, text):
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.unk_token_id not in ids
    assert tokenizer.decode(ids, skip_special_tokens=True) == text


def test_sentence_initial_word_shares_the_mid_sentence_token(tokenizer):
    assert tokenizer.tokenize("A") == tokenizer.tokenize("with A")[-1:]


def test_train_without_output_dir_returns_requested_vocab(slice_files):
    tokenizer = train_tokenizer(slice_files[:1], vocab_size=300)
    assert len(tokenizer) == 300
    assert tokenizer("Two dogs")["input_ids"][-1] == tokenizer.eos_token_id


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_cli_saves_a_loadable_tokenizer(slice_files, tmp_path):
    output_dir = tmp_path / "cli_tokenizer"
    command = [*run_command("train_tokenizer"), "--files", *map(str, slice_files)]
    command += ["--vocab_size", "500", "--output_dir", str(output_dir), "--min_frequency", "2"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert str(output_dir) in result.stdout and "500" in result.stdout
    assert len(AutoTokenizer.from_pretrained(output_dir)) == 500


def test_cli_reports_bad_input_as_usage_error(tmp_path, capsys):
    main = train_tokenizer_command.main
    missing = tmp_path / "missing.en"
    with pytest.raises(SystemExit) as exit_info:
        main(["--files", str(missing), "--output_dir", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert str(missing) in capsys.readouterr().err


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"vocab_size": 259}, r"vocab_size=259; expected an int of at least 260 \(4 special tokens"),
        ({"vocab_size": 1000.0}, r"vocab_size=1000.0; expected an int"),
        ({"min_frequency": 0}, "min_frequency=0; expected an int of at least 1"),
    ],
)
def test_bad_numbers_are_named(slice_files, kwargs, message):
    with pytest.raises(ValueError, match=message):
        train_tokenizer(slice_files, **kwargs)


def test_missing_file_is_named(tmp_path):
    missing = tmp_path / "nope.de"
    with pytest.raises(FileNotFoundError, match="nope.de"):
        train_tokenizer([missing])
    with pytest.raises(ValueError, match="files is empty"):
        train_tokenizer([])


def test_blank_corpus_and_bad_bytes_are_rejected(tmp_path):
    blank = tmp_path / "blank.en"
    blank.write_text("\n  \n\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no text in"):
        train_tokenizer(blank, vocab_size=300)
    latin1 = tmp_path / "latin1.de"
    latin1.write_bytes("Ein Mann.\nZwei Hunde.\nGrüße\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1\.de, line 3: not valid UTF-8"):
        train_tokenizer(latin1, vocab_size=300)


def test_the_recipe_trains_from_the_dataset_as_from_the_files(slice_files, tokenizer, tmp_path):
    """The job streams the training split's sentences from Arrow, a batch at a time, instead of writing them to
    files: the vocabulary must come out exactly as from the same sentences in files (source file, then target)."""
    from modeling_vaswani.toolkit.data.corpora import load_text_pairs
    from modeling_vaswani.toolkit.training.recipe import ModelArguments, prepare_tokenizer, split_texts

    pairs = load_text_pairs(*slice_files, source_lang="en", target_lang="de")
    assert list(split_texts(pairs, "de", batch_size=7)) == gz_lines(slice_files[1])  # order kept across batches
    streamed = prepare_tokenizer(ModelArguments(vocab_size=VOCAB_SIZE), pairs, "en", "de", tmp_path)
    assert streamed.get_vocab() == tokenizer.get_vocab()
    assert streamed.backend_tokenizer.to_str() == tokenizer.backend_tokenizer.to_str()  # merges in the same order


def test_the_cached_tokenizer_is_keyed_on_the_data_taken(tmp_path):
    """The trained vocabulary is reused for the same split, loaded again, and not for another slice of it (the key
    is datasets' public generate_fingerprint of the split, not its private _fingerprint)."""
    from datasets import Dataset, load_from_disk

    from modeling_vaswani.toolkit.training.recipe import _cached_tokenizer_dir

    pairs = [{"en": f"A dog {i}.", "de": f"Ein Hund {i}."} for i in range(50)]
    Dataset.from_dict({"translation": pairs}).save_to_disk(tmp_path / "pairs")
    first, again = load_from_disk(tmp_path / "pairs"), load_from_disk(tmp_path / "pairs")
    folder = _cached_tokenizer_dir(first, 400, "en", "de")
    assert folder is not None and folder.parent == tmp_path / "pairs"
    assert _cached_tokenizer_dir(again, 400, "en", "de") == folder
    others = {
        _cached_tokenizer_dir(first.select(range(10)), 400, "en", "de"),
        _cached_tokenizer_dir(first, 500, "en", "de"),
    }
    assert folder not in others and len(others) == 2
