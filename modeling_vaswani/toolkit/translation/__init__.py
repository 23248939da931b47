"""Translating: one request and its check (every refusal a translation can get), the engines that run it (PyTorch,
CTranslate2), sentences, documents and markup, terminology, n-best, scoring and word alignment."""
