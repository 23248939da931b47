"""Which engine runs a model name: PyTorch for a checkpoint folder or Hub id, CTranslate2 for an exported folder."""

from pathlib import Path

from transformers import AutoTokenizer

from ..checkpoints import check_tokenizer_files, is_ctranslate2_folder, load_model_and_tokenizer, local_folder

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
    if engine == "ctranslate2" or (engine is None and folder is not None and is_ctranslate2_folder(folder)):
        return load_exported(name, folder)
    return load_model_and_tokenizer(name, revision=revision, trust_remote_code=trust_remote_code)


def load_exported(name: str, folder: Path | None):
    """An exported folder run by CTranslate2, with the tokenizer copied beside it."""
    if folder is None:
        raise ValueError(
            f"--engine ctranslate2 runs a local folder written by vaswani-export-ctranslate2; {name} is a Hub id"
        )
    if not is_ctranslate2_folder(folder):
        raise ValueError(
            f"model folder {folder} holds no CTranslate2 model (model.bin and config.json); expected a folder "
            "written by vaswani-export-ctranslate2"
        )
    check_tokenizer_files(folder)
    from .ctranslate2 import CTranslate2Model  # needs the optional ctranslate2 package

    return CTranslate2Model(folder), AutoTokenizer.from_pretrained(str(folder))
