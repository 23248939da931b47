"""A real tokenizer and a tiny model on a slice of the shipped Multi30k, for the training tests."""

from pathlib import Path

import torch

from modeling_vaswani import VaswaniForConditionalGeneration
from modeling_vaswani.data import load_multi30k, multi30k_files, read_sentences, tokenize_pairs
from modeling_vaswani.tokenizer import train_tokenizer
from modeling_vaswani.training import preset_config

REPO = Path(__file__).resolve().parent.parent
TINY = {"d_model": 32, "d_ff": 64, "num_heads": 4, "encoder_layers": 2, "decoder_layers": 2}


def tiny_checkpoint(folder: Path, seed: int = 0, lines: int = 2000) -> Path:
    """A BPE tokenizer trained on the first `lines` Multi30k pairs and an untrained tiny model, saved together."""
    folder.mkdir(parents=True, exist_ok=True)
    texts = []
    for language, path in multi30k_files("train").items():
        text = folder / f"corpus.{language}"
        text.write_text("\n".join(read_sentences(path)[:lines]) + "\n", encoding="utf-8")
        texts.append(text)
    tokenizer = train_tokenizer(texts, vocab_size=400, output_dir=folder)
    for text in texts:
        text.unlink()
    torch.manual_seed(seed)
    model = VaswaniForConditionalGeneration(preset_config("small", tokenizer, **TINY))
    model.save_pretrained(folder)
    return folder


def tokenized_slice(tokenizer, count: int, split: str = "train"):
    return tokenize_pairs(load_multi30k(split).select(range(count)), tokenizer, "en", "de")
