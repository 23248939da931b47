"""vaswani-push of the stock variants (issue 54): an ONNX export (its graphs under onnx/, where transformers.js reads
them) and a stock MarianMT export, each pushed to the local Hub-compatible server as it is, with no code of this
package, pulled, and translated by another runtime: transformers.js in Node on the ONNX repository, stock
transformers' MarianMTModel on the Marian one. The tiny model learned TINY_PAIRS by heart, so their translations are
known in advance."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.onnx_export import tiny_onnx_export
from helpers.training_setup import TINY_PAIRS, trained_tiny_checkpoint
from huggingface_hub import snapshot_download
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, MarianMTModel

from modeling_vaswani.remote_code_vaswani import PAYLOAD_FILES
from modeling_vaswani.toolkit.hub.push import push_checkpoint
from modeling_vaswani.toolkit.interop.marian_export import export_marian

pytestmark = pytest.mark.slow  # the session's one ONNX export of a tiny model, if no test made it before
SOURCES, TARGETS = [source for source, _ in TINY_PAIRS], [target for _, target in TINY_PAIRS]
NODE_TRANSLATE = Path(__file__).parents[1] / "web/translate.mjs"
NODE_MODULES = Path(__file__).parents[3] / "modeling_vaswani/toolkit/web/node_modules"
ONNX_REPOSITORY = {
    "README.md",
    "vaswani_push.json",
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vaswani_onnx.json",
    "onnx/encoder_model.onnx",
    "onnx/decoder_model_merged.onnx",
    "onnx/encoder_model_quantized.onnx",  # the int8 variant (--quantize int8), transformers.js's "q8"
    "onnx/decoder_model_merged_quantized.onnx",
}


def test_an_onnx_export_is_pushed_as_transformers_js_reads_it_pulled_and_translated(hub, tmp_path):
    if not (shutil.which("node") and NODE_MODULES.is_dir()):
        pytest.skip(f"no Node or transformers.js: apt-get install nodejs; npm ci --prefix {NODE_MODULES.parent}")
    export = tiny_onnx_export(tmp_path / "export")
    lines = []
    push_checkpoint(export, "user/tiny-onnx", with_results=False, report=lines.append)
    assert "left out index.html (the browser page, which vaswani-export-onnx --web writes)" in lines
    pulled = Path(snapshot_download("user/tiny-onnx", local_dir=tmp_path / "pulled"))
    files = {path.relative_to(pulled).as_posix() for path in pulled.rglob("*") if path.is_file()}
    assert {name for name in files if not name.startswith((".git", ".cache/"))} == ONNX_REPOSITORY
    config = json.loads((pulled / "config.json").read_text())
    assert config["model_type"] == "marian" and "auto_map" not in config
    card = (pulled / "README.md").read_text()
    assert 'pipeline("translation", "user/tiny-onnx"' in card and "trust_remote_code=True" not in card
    (pulled / "node_modules").symlink_to(NODE_MODULES)
    done = subprocess.run(
        ["node", str(NODE_TRANSLATE), str(pulled)],
        input=json.dumps(SOURCES),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert [result["text"] for result in json.loads(done.stdout)] == TARGETS


def test_a_marian_export_is_pushed_pulled_and_translated_by_stock_transformers(hub, tmp_path):
    export = export_marian(str(trained_tiny_checkpoint(tmp_path / "checkpoint")), tmp_path / "export")
    push_checkpoint(export, "user/tiny-marian", with_results=False)
    pulled = snapshot_download("user/tiny-marian", local_dir=tmp_path / "pulled")
    assert not {path.name for path in Path(pulled).iterdir()} & set(PAYLOAD_FILES)
    card = (Path(pulled) / "README.md").read_text()
    assert 'AutoModelForSeq2SeqLM.from_pretrained("user/tiny-marian")' in card and "trust_remote_code=True" not in card
    model = AutoModelForSeq2SeqLM.from_pretrained(pulled)  # no trust_remote_code
    tokenizer = AutoTokenizer.from_pretrained(pulled)
    assert isinstance(model, MarianMTModel)
    batch = tokenizer(SOURCES, return_tensors="pt", padding=True)
    output = model.generate(**batch, num_beams=1, max_new_tokens=batch["input_ids"].shape[1] + 50)
    assert tokenizer.batch_decode(output, skip_special_tokens=True) == TARGETS
