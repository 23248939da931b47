"""modeling_vaswani: the Transformer of "Attention Is All You Need" as a transformers model."""

from transformers import AutoConfig

from .configuration_vaswani import VaswaniConfig

AutoConfig.register(VaswaniConfig.model_type, VaswaniConfig)

__all__ = ["VaswaniConfig"]
