"""What travels with every checkpoint as remote code, and how config.json names it: the one list of payload files.

`save_pretrained` (so the Trainer's checkpoints and pushes too) and the toolkit's Hub push both write it. transformers'
remote-code loader copies a class's file and the sibling files it imports; the pipeline's file, which no model file
imports, is copied and declared wherever it is present. Payload itself: it imports only the standard library.
"""

import shutil
from pathlib import Path

PAYLOAD_FILES = (
    "configuration_vaswani.py",
    "modeling_vaswani.py",
    "generation_vaswani.py",
    "kernels_vaswani.py",
    "allocator_vaswani.py",
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
