"""Running models for translation beyond PyTorch: a CTranslate2 export, and choosing the engine for a model name."""
