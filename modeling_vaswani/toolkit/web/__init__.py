"""Translation in the browser: the static page that `vaswani-export-onnx --web` writes beside an ONNX export.

The page (index.html, page.js, and beam.js: Section 6.1's beam search, which transformers.js lacks) runs the export
with transformers.js and onnxruntime-web's WebAssembly in the visitor's browser, loading everything from its own
folder: the model's files, and the JavaScript that `npm ci` installs there from package.json and package-lock.json,
which travel with the page. model_files.json lists the files the page loads with their sizes, so that the page names
a missing or truncated one before it loads anything.
"""

import json
import shutil
from importlib import resources
from pathlib import Path

PAGE_FILES = ("index.html", "page.js", "beam.js", "package.json", "package-lock.json", ".npmrc")
# What transformers.js reads of a "marian" export at full precision (src/models/session_config.js: Seq2Seq).
MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "onnx/encoder_model.onnx",
    "onnx/decoder_model_merged.onnx",
)
LISTING = "model_files.json"


def write_web_page(folder: str | Path) -> None:
    """Writes the page's files and LISTING into `folder`, an ONNX export (its staged folder, while it is written);
    FileNotFoundError naming the files the page would load and that `folder` lacks, before writing anything."""
    folder = Path(folder)
    missing = [name for name in MODEL_FILES if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{folder} lacks {', '.join(missing)}: the browser page loads an ONNX export's {', '.join(MODEL_FILES)}"
        )
    page = resources.files(__package__)
    for name in PAGE_FILES:
        with resources.as_file(page / name) as source:
            shutil.copyfile(source, folder / name)
    sizes = {name: (folder / name).stat().st_size for name in MODEL_FILES}
    (folder / LISTING).write_text(json.dumps({"files": sizes}, indent=2) + "\n", encoding="utf-8")
