"""Small configurations and inputs shared by the model tests (fast on two CPU cores)."""

import torch

from modeling_vaswani import VaswaniConfig, VaswaniForConditionalGeneration

BOS, PAD, EOS = 0, 1, 2


def tiny_config(**overrides) -> VaswaniConfig:
    values = dict(
        vocab_size=61, d_model=32, d_ff=64, num_heads=4, encoder_layers=2, decoder_layers=2, max_position_embeddings=64
    )
    return VaswaniConfig(**{**values, **overrides})


def tiny_model(seed: int = 0, **overrides) -> VaswaniForConditionalGeneration:
    torch.manual_seed(seed)
    return VaswaniForConditionalGeneration(tiny_config(**overrides)).eval()


def padded_batch(lengths, vocab_size: int = 61, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded token ids ending in EOS, one row per length, and the matching attention mask."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.full((len(lengths), max(lengths)), PAD)
    for row, length in enumerate(lengths):
        ids[row, : length - 1] = torch.randint(4, vocab_size, (length - 1,), generator=generator)
        ids[row, length - 1] = EOS
    return ids, ids.ne(PAD).long()
