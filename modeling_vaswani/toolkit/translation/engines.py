"""Which engine runs a model name: PyTorch for a checkpoint folder or Hub id, CTranslate2 for an exported folder."""

from pathlib import Path

import torch

from ..checkpoints import is_ctranslate2_folder, load_model_and_tokenizer, local_folder, validate_export

ENGINES = ("pytorch", "ctranslate2")


def load_translator(
    name: str, revision: str | None = None, trust_remote_code: bool = False, engine: str | None = None
):
    """The model and tokenizer to translate with: `engine` "ctranslate2" runs a folder written by
    vaswani-export-ctranslate2 (`serving.ctranslate2.CTranslate2Model`), "pytorch" a checkpoint
    (`checkpoints.load_model_and_tokenizer`); None picks by what the folder holds."""
    if engine not in (None, *ENGINES):
        raise ValueError(f"engine {engine!r} is unknown; expected one of {', '.join(ENGINES)}")
    folder = local_folder(name)
    if folder is not None and revision is not None:
        raise ValueError(f"--revision {revision} applies to Hub ids; {name} is a local folder")
    if runs_on_ctranslate2(folder, engine):
        return load_exported(name, folder)
    return load_model_and_tokenizer(name, revision=revision, trust_remote_code=trust_remote_code)


def runs_on_ctranslate2(folder: Path | None, engine: str | None = None) -> bool:
    """Whether `load_translator` runs the model in `folder` (`checkpoints.local_folder`'s: None for a Hub id) with
    CTranslate2: `engine` says so, or none is named and the folder holds an export. Known before anything loads."""
    return engine == "ctranslate2" or (engine is None and folder is not None and is_ctranslate2_folder(folder))


def load_exported(name: str, folder: Path | None):
    """An exported folder run by CTranslate2, with the tokenizer copied beside it; every file of the folder checked
    (`checkpoints.validate_export`) before CTranslate2 is imported or reads any of them."""
    if folder is None:
        raise ValueError(
            f"--engine ctranslate2 runs a local folder written by vaswani-export-ctranslate2; {name} is a Hub id"
        )
    if not is_ctranslate2_folder(folder):
        raise ValueError(
            f"model folder {folder} holds no CTranslate2 model (model.bin and config.json); expected a folder "
            "written by vaswani-export-ctranslate2"
        )
    export = validate_export(folder)
    from .ctranslate2 import CTranslate2Model  # needs the optional ctranslate2 package

    return CTranslate2Model(folder, export), export.tokenizer


def load_ensemble(names: list[str], revision: str | None = None, trust_remote_code: bool = False, engine=None):
    """The first model and its tokenizer, and the other models of an ensemble (`generate(ensemble=...)`): PyTorch
    checkpoints whose tokenizers are the same (the same tokens at the same ids, the same way of splitting text), since
    every model reads the first one's token ids and the search mixes their predictions id by id."""
    loaded = [load_translator(name, revision, trust_remote_code, engine) for name in names]
    model, tokenizer = loaded[0]
    for name, (other, other_tokenizer) in zip(names[1:], loaded[1:], strict=True):
        for each, its in ((names[0], model), (name, other)):
            if not isinstance(its, torch.nn.Module):
                raise ValueError(
                    f"{each} is a CTranslate2 export; an ensemble decodes PyTorch checkpoints (CTranslate2 decodes "
                    "one model at a time)"
                )
        if tokenizer_identity(other_tokenizer) != tokenizer_identity(tokenizer):
            sizes = f"{len(other_tokenizer)} and {len(tokenizer)} tokens"
            raise ValueError(
                f"{name} and {names[0]} have different tokenizers ({sizes}); expected models that share a vocabulary "
                "to decode as an ensemble"
            )
    return model, tokenizer, [other for other, _ in loaded[1:]]


def tokenizer_identity(tokenizer) -> str | dict:
    """What makes two tokenizers the same: a fast tokenizer's whole definition, else its vocabulary."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return backend.to_str() if backend is not None else tokenizer.get_vocab()
