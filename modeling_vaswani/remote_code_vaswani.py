"""What travels with every checkpoint as remote code, and how config.json names it: the one list of payload files.

`save_pretrained` (so the Trainer's checkpoints and pushes too) and the toolkit's Hub push both write it. transformers'
remote-code loader copies a class's file and the sibling files it imports; the pipeline's file, which no model file
imports, is copied and declared wherever it is present. Payload itself: it imports only the standard library, and
torch's public FSDPModule when a model is saved.
"""

import shutil
from pathlib import Path

PAYLOAD_FILES = (
    "configuration_vaswani.py",
    "modeling_vaswani.py",
    "generation_vaswani.py",
    "search_vaswani.py",
    "decoding_vaswani.py",
    "guidance_vaswani.py",
    "constraints_vaswani.py",
    "compat_vaswani.py",
    "kernels_vaswani.py",
    "remote_code_vaswani.py",
    "pipeline_vaswani.py",
)
# Both model classes, whichever one is saved, so that AutoModel and AutoModelForSeq2SeqLM each load any checkpoint.
AUTO_MAP = {
    "AutoConfig": "configuration_vaswani.VaswaniConfig",
    "AutoModel": "modeling_vaswani.VaswaniModel",
    "AutoModelForSeq2SeqLM": "modeling_vaswani.VaswaniForConditionalGeneration",
}
PIPELINE_FILE = "pipeline_vaswani.py"
TRANSLATION_TASK = "vaswani-translation"  # transformers 5 refuses "translation" to registered pipelines
CUSTOM_PIPELINES = {
    TRANSLATION_TASK: {"impl": "pipeline_vaswani.VaswaniTranslationPipeline", "pt": ["AutoModelForSeq2SeqLM"]}
}
HERE = Path(__file__).parent  # the package, or transformers' module cache for a checkpoint loaded as remote code


def payload_files(folder: Path = HERE) -> list[Path]:
    """The payload files present in `folder`: all of them in the package; loaded as remote code, the pipeline's file
    only if the pipeline was loaded too."""
    return [folder / name for name in PAYLOAD_FILES if (folder / name).is_file()]


def declare_remote_code(config, folder: Path = HERE) -> None:
    """Names the payload in `config`: `auto_map`, and `custom_pipelines` where the pipeline's file travels too, so
    that pipeline("vaswani-translation", trust_remote_code=True) works where the package is not installed."""
    config.auto_map = {**(getattr(config, "auto_map", None) or {}), **AUTO_MAP}
    if (folder / PIPELINE_FILE).is_file():
        config.custom_pipelines = CUSTOM_PIPELINES


def copy_payload(destination: Path, folder: Path = HERE) -> None:
    for path in payload_files(folder):
        shutil.copyfile(path, Path(destination) / path.name)


def is_sharded_class(cls: type) -> bool:
    """Whether `cls` is the class FSDP2's `fully_shard` puts in place of a model's: `FSDP<Class>(FSDPModule, Class)`,
    defined in torch at run time."""
    import torch

    if not torch.distributed.is_available():  # no FSDP in this build of torch
        return False
    from torch.distributed.fsdp import FSDPModule

    return issubclass(cls, FSDPModule)


class SavesPayload:
    """`save_pretrained` for the model classes (mixed in before PreTrainedModel): a registered or remotely loaded
    class writes the whole payload and names it in config.json, where transformers alone would copy only the file
    defining the saved class and its imports, and name only that class."""

    @classmethod
    def is_remote_code(cls) -> bool:
        # transformers' save_pretrained copies the file defining the saved class, and names that class in auto_map,
        # when this public answer is True. A class FSDP2 made (is_sharded_class) inherits its base's registration
        # but was neither registered nor loaded from the Hub: its file is torch's, and the payload covers its base.
        return super().is_remote_code() and not is_sharded_class(cls)

    def save_pretrained(self, save_directory, *args, **kwargs):
        ours = super(SavesPayload, type(self)).is_remote_code()  # the registration, whether FSDP2 wraps the class
        if ours:
            declare_remote_code(self.config)
        result = super().save_pretrained(save_directory, *args, **kwargs)
        named = {key: (getattr(self.config, "auto_map", None) or {}).get(key) for key in AUTO_MAP}
        if ours and is_sharded_class(type(self)) and named != AUTO_MAP:
            raise RuntimeError(
                f"save_pretrained of the FSDP2-wrapped {type(self).__name__} wrote auto_map {named}, not the "
                f"payload's {AUTO_MAP}: transformers no longer asks is_remote_code() before copying the saved "
                "class's file (SavesPayload.is_remote_code, remote_code_vaswani.py): it names torch's class"
            )
        if ours and kwargs.get("is_main_process", True):
            copy_payload(save_directory)
        return result
