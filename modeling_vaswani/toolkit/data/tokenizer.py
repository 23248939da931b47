"""One byte-pair-encoding vocabulary shared by source and target language (Section 5.1 of the paper).

Design: byte-level BPE rather than Metaspace (SentencePiece-style) BPE. Every string is spelled by the 256 byte
symbols, so no input ever maps to <unk> (WMT text holds rare characters and emoji that a character-level alphabet
drops) and decoding inverts encoding exactly, which the detokenized BLEU we report depends on. Instead of the
pre-tokenizer's `add_prefix_space` (skipped when a text already starts with a space, so not invertible) a normalizer
always prepends one space, which the decoder strips again: a sentence-initial word gets the same token as inside the
sentence ("ĠA" in "A man" and "with A"), and any text, leading or repeated spaces included, decodes back unchanged.
NFC normalization makes composed and decomposed "ü" one token; NFC text (Multi30k, WMT) passes through unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from ...configuration_vaswani import VaswaniConfig
from ..outputs import TRAINED_TOKENIZER, check_output_folder, released_on_failure, save_object, staged_folder
from ..texts import iter_text_lines
from ..values import count

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
# BpeTrainer numbers special tokens 0, 1, ... in list order. <pad>, <s> (also the decoder start) and </s> go to
# VaswaniConfig's default ids, so that a default config fits every tokenizer trained here; <unk>, which the config
# does not name, comes after them.
_CONFIG_IDS = {PAD: VaswaniConfig.pad_token_id, BOS: VaswaniConfig.bos_token_id, EOS: VaswaniConfig.eos_token_id}
if sorted(_CONFIG_IDS.values()) != [0, 1, 2]:
    raise RuntimeError(f"VaswaniConfig's default special ids {_CONFIG_IDS} are not 0, 1, 2 in some order")
SPECIAL_TOKENS = (*sorted(_CONFIG_IDS, key=_CONFIG_IDS.get), UNK)
BYTE_ALPHABET = pre_tokenizers.ByteLevel.alphabet()
MIN_VOCAB_SIZE = len(SPECIAL_TOKENS) + len(BYTE_ALPHABET)


def _check_files(files: str | Path | Sequence[str | Path]) -> list[Path]:
    paths = [Path(files)] if isinstance(files, (str, Path)) else [Path(path) for path in files]
    if not paths:
        raise ValueError("files is empty; expected at least one text file to train the vocabulary on")
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"tokenizer training file not found: {str(path)!r}")
    return paths


def _nonblank(texts: Iterable[str], where: object) -> Iterator[str]:
    # Blank lines carry nothing to learn from.
    seen_text = False
    for text in texts:
        if text.strip():
            seen_text = True
            yield text
    if not seen_text:
        raise ValueError(f"no text in {where}; expected sentences to learn a vocabulary from")


def _byte_level_bpe() -> Tokenizer:
    backend = Tokenizer(models.BPE(unk_token=UNK))
    backend.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Prepend(" ")])
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    # ByteLevel joins all tokens into one string, so Strip removes exactly the one space the normalizer prepended.
    backend.decoder = decoders.Sequence([decoders.ByteLevel(), decoders.Strip(" ", 1, 0)])
    return backend


@released_on_failure()  # a refusal after the output check leaves no lock in a process that goes on
def train_tokenizer(
    files: str | Path | Sequence[str | Path],
    vocab_size: int = 37000,
    output_dir: str | Path | None = None,
    min_frequency: int = 2,
    show_progress: bool = False,
) -> PreTrainedTokenizerFast:
    """Train a shared byte-level BPE vocabulary on `files` (source and target text, `.gz` allowed).

    Returns a fast tokenizer whose <pad>, <s> and </s> ids are VaswaniConfig's defaults (<unk> is 3) and which
    appends </s>, and no <s>, to every encoded text, targets included. With `output_dir` (new, empty or an earlier
    tokenizer, replaced whole) it is also saved there, for `AutoTokenizer.from_pretrained(output_dir)`.
    The vocabulary can come out smaller than `vocab_size` when the corpus has fewer pairs seen `min_frequency` times.
    """
    paths = _check_files(files)
    if output_dir is not None:
        check_output_folder(output_dir, TRAINED_TOKENIZER, inputs=paths)
    lines = (text for path in paths for _, text in iter_text_lines(path))  # bad bytes raise with file and line
    where = [str(path) for path in paths]
    return train_tokenizer_from_texts(lines, vocab_size, output_dir, min_frequency, show_progress, where=where)


def train_tokenizer_from_texts(
    texts: Iterable[str],
    vocab_size: int = 37000,
    output_dir: str | Path | None = None,
    min_frequency: int = 2,
    show_progress: bool = False,
    where: object = "the texts",
) -> PreTrainedTokenizerFast:
    """`train_tokenizer` on texts as they stream by (both languages' sentences, one after the other), so that a
    corpus of millions of pairs is never held in memory: the recipe streams them from the dataset's Arrow files.
    `where` names the texts in the error raised when none holds any text."""
    count("vocab_size", vocab_size, MIN_VOCAB_SIZE, f"{len(SPECIAL_TOKENS)} special tokens + 256 bytes")
    count("min_frequency", min_frequency, 1, "occurrences of a pair before it is merged")
    backend = _byte_level_bpe()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=BYTE_ALPHABET,
        show_progress=show_progress,
    )
    backend.train_from_iterator(_nonblank(texts, where), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        add_bos_token=False,
        add_eos_token=True,
        # The clean-up rewrites " ." to "." and the like, which would make decoding lossy.
        clean_up_tokenization_spaces=False,
        # A literal "</s>" in a sentence is text to translate, not a control token.
        split_special_tokens=True,
    )
    if output_dir is not None:
        with staged_folder(output_dir, TRAINED_TOKENIZER) as staged:
            save_object(staged, tokenizer)
    return tokenizer
