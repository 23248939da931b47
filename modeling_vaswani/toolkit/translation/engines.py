"""The engines a model runs on, behind one interface: each `Engine` says which loaded models it holds, which folders
it recognizes, how it loads one, and what it can do (`can`, from CAPABILITIES), so that a request's check
(`request.TranslationRequest.check`) asks the engine instead of naming it. PyTorch runs a checkpoint folder or Hub id,
CTranslate2 a folder written by vaswani-export-ctranslate2, onnxruntime one written by vaswani-export-onnx. Adding an
engine is one subclass and its entry in ENGINES."""

from pathlib import Path
from typing import ClassVar

import torch

from ..checkpoints import (
    is_ctranslate2_folder,
    is_onnx_folder,
    load_model_and_tokenizer,
    local_folder,
    validate_export,
    validate_onnx,
)


class Capability:
    """Something an engine may be unable to do: what a request asking for it needs, and how an engine without it is
    said to lack it (refusals read "--constraints need(s) NEED; M runs on CTranslate2, which LACKS")."""

    def __init__(self, need: str, lack: str):
        self.need, self.lack = need, lack


CAPABILITIES = {
    "constraints": Capability("the paper's search with lexical constraints", "has no lexical constraints"),
    "attention": Capability("the PyTorch model's attention weights (word alignments)", "does not give them"),
    "ensembles": Capability("several models' predictions averaged at each step", "decodes one model at a time"),
}


class Engine:
    """One way of running a model. Class-level: an engine is chosen before anything loads."""

    name: ClassVar[str]
    title: ClassVar[str]  # how refusals name it
    can: ClassVar[frozenset[str]]  # of CAPABILITIES
    instead: ClassVar[str] = ""  # what a refusal of a capability it lacks suggests

    @classmethod
    def holds(cls, model) -> bool:
        """Whether `model`, loaded, runs on this engine."""
        raise NotImplementedError

    @classmethod
    def recognizes(cls, folder: Path | None) -> bool:
        """Whether a local `folder` (None: a Hub id) holds this engine's files, so that it runs them unless another
        engine is named."""
        raise NotImplementedError

    @classmethod
    def load(cls, name: str, folder: Path | None, revision: str | None, trust_remote_code: bool):
        """The model and tokenizer of `name` (`folder`: `checkpoints.local_folder(name)`)."""
        raise NotImplementedError


class PyTorch(Engine):
    name, title = "pytorch", "PyTorch"
    can = frozenset(CAPABILITIES)

    @classmethod
    def holds(cls, model) -> bool:
        return isinstance(model, torch.nn.Module)

    @classmethod
    def recognizes(cls, folder: Path | None) -> bool:
        return False  # the default: whatever no other engine recognizes

    @classmethod
    def load(cls, name: str, folder: Path | None, revision: str | None, trust_remote_code: bool):
        return load_model_and_tokenizer(name, revision=revision, trust_remote_code=trust_remote_code)


class CTranslate2(Engine):
    name, title = "ctranslate2", "CTranslate2"
    can = frozenset()
    instead = "give the checkpoint it was exported from, on the PyTorch engine"

    @classmethod
    def holds(cls, model) -> bool:
        return getattr(model, "engine", None) == cls.name  # ctranslate2.CTranslate2Model, without importing it

    @classmethod
    def recognizes(cls, folder: Path | None) -> bool:
        return folder is not None and is_ctranslate2_folder(folder)

    @classmethod
    def load(cls, name: str, folder: Path | None, revision: str | None, trust_remote_code: bool):
        return load_exported(name, folder)


class OnnxRuntime(Engine):
    name, title = "onnxruntime", "onnxruntime"
    can = frozenset()
    instead = "give the checkpoint it was exported from, on the PyTorch engine"

    @classmethod
    def holds(cls, model) -> bool:
        return getattr(model, "engine", None) == cls.name  # onnxruntime.OnnxRuntimeModel, without importing it

    @classmethod
    def recognizes(cls, folder: Path | None) -> bool:
        return folder is not None and is_onnx_folder(folder)

    @classmethod
    def load(cls, name: str, folder: Path | None, revision: str | None, trust_remote_code: bool):
        """A folder written by vaswani-export-onnx, every file checked (`checkpoints.validate_onnx`) before
        onnxruntime is imported or reads any of them."""
        if folder is None or not is_onnx_folder(folder):
            raise ValueError(
                f"--engine onnxruntime runs a local folder written by vaswani-export-onnx; {name} is "
                f"{'a Hub id' if folder is None else 'not one (no onnx/ or vaswani_onnx.json)'}"
            )
        export = validate_onnx(folder)
        from .onnxruntime import OnnxRuntimeModel  # needs the optional onnxruntime package

        return OnnxRuntimeModel(folder, export), export.tokenizer


ENGINES: dict[str, type[Engine]] = {engine.name: engine for engine in (PyTorch, CTranslate2, OnnxRuntime)}


def engine_named(engine: str | None) -> type[Engine] | None:
    """The engine of `--engine` (None: none named), refused naming the value where it is no engine's."""
    if engine is not None and engine not in ENGINES:
        raise ValueError(f"engine {engine!r} is unknown; expected one of {', '.join(ENGINES)}")
    return ENGINES.get(engine)


def engine_for(folder: Path | None, engine: str | None = None) -> type[Engine]:
    """The engine that runs the model in `folder` (`checkpoints.local_folder`'s: None for a Hub id): the one named,
    else the one that recognizes the folder's files, else PyTorch. Known before anything loads."""
    named = engine_named(engine)
    return named or next((each for each in ENGINES.values() if each.recognizes(folder)), PyTorch)


def engine_of(model) -> type[Engine]:
    """The engine a loaded `model` runs on, refused (TypeError) where no engine holds it."""
    held = next((each for each in ENGINES.values() if each.holds(model)), None)
    if held is None:
        expected = ", ".join(f"{each.title}'s" for each in ENGINES.values())
        raise TypeError(f"a model of type {type(model).__name__} runs on no engine; expected a model {expected}")
    return held


def load_translator(
    name: str, revision: str | None = None, trust_remote_code: bool = False, engine: str | None = None
):
    """The model and tokenizer to translate with: `engine` "ctranslate2" runs a folder written by
    vaswani-export-ctranslate2 (`ctranslate2.CTranslate2Model`), "pytorch" a checkpoint
    (`checkpoints.load_model_and_tokenizer`); None picks by what the folder holds (`engine_for`)."""
    engine_named(engine)
    folder = local_folder(name)
    if folder is not None and revision is not None:
        raise ValueError(f"--revision {revision} applies to Hub ids; {name} is a local folder")
    return engine_for(folder, engine).load(name, folder, revision, trust_remote_code)


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
    """The first model and its tokenizer, and the other models of an ensemble (`generate(ensemble=...)`): models on
    an engine that decodes ensembles, whose tokenizers are the same (the same tokens at the same ids, the same way of
    splitting text), since every model reads the first one's token ids and the search mixes their predictions id by
    id."""
    loaded = [load_translator(name, revision, trust_remote_code, engine) for name in names]
    model, tokenizer = loaded[0]
    for name, (other, other_tokenizer) in zip(names[1:], loaded[1:], strict=True):
        for each, its in ((names[0], model), (name, other)):
            runs_on = engine_of(its)
            if "ensembles" not in runs_on.can:
                raise ValueError(
                    f"{each} runs on {runs_on.title}; an ensemble needs {CAPABILITIES['ensembles'].need}, which "
                    f"{runs_on.title} {CAPABILITIES['ensembles'].lack}"
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
