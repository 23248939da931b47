"""The payload: the files that travel into checkpoints as remote code import only the standard library, torch,
transformers and each other, and one list of them serves save_pretrained and the Hub push."""

import ast
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.tiny_models import tiny_model

import modeling_vaswani
from modeling_vaswani.remote_code_vaswani import AUTO_MAP, CUSTOM_PIPELINES, PAYLOAD_FILES

PACKAGE = Path(modeling_vaswani.__file__).parent
ALLOWED = {"torch", "transformers"} | set(sys.stdlib_module_names)


def imports(path: Path) -> list[tuple[int, str]]:
    """(level, module) of every import statement in the file, at any depth: level 0 for absolute imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(0, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.level, node.module or ""))
    return found


def test_every_module_beside_the_package_init_is_payload():
    """A new module at the package's top level must be placed: listed as payload, or moved into the toolkit."""
    modules = {path.name for path in PACKAGE.glob("*.py")} - {"__init__.py"}
    assert modules == set(PAYLOAD_FILES)


@pytest.mark.parametrize("name", PAYLOAD_FILES)
def test_payload_imports_only_torch_transformers_and_siblings(name):
    siblings = {Path(file).stem for file in PAYLOAD_FILES}
    for level, module in imports(PACKAGE / name):
        if level:
            assert level == 1 and module in siblings, f"{name}: `from {'.' * level}{module} import` is not a sibling"
        else:
            top = module.split(".")[0]
            assert top in ALLOWED, f"{name} imports {module}: remote code may import only torch and transformers"


def test_the_import_check_catches_what_it_should(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import numpy\nfrom .toolkit import data\n\ndef f():\n    from datasets import load_dataset\n")
    assert imports(bad) == [(0, "numpy"), (1, "toolkit"), (0, "datasets")]


def test_auto_map_and_pipeline_name_payload_classes():
    for reference in [*AUTO_MAP.values(), *(spec["impl"] for spec in CUSTOM_PIPELINES.values())]:
        module, name = reference.rsplit(".", 1)
        assert f"{module}.py" in PAYLOAD_FILES
        assert hasattr(importlib.import_module(f"modeling_vaswani.{module}"), name), reference


def test_save_pretrained_writes_the_whole_payload(tmp_path):
    tiny_model(seed=3).save_pretrained(tmp_path)
    for name in PAYLOAD_FILES:
        assert (tmp_path / name).read_bytes() == (PACKAGE / name).read_bytes(), name


IMPORT_EVERYTHING = """
import importlib, json, pathlib, pkgutil, shutil, sys
import matplotlib
import modeling_vaswani
from modeling_vaswani.remote_code_vaswani import PAYLOAD_FILES

for module in pkgutil.walk_packages(modeling_vaswani.__path__, "modeling_vaswani."):
    importlib.import_module(module.name)
# The configuration loaded from a copy of the payload, as remote code loads it: no package code has run on this class.
copy = pathlib.Path.cwd() / "standalone"
copy.mkdir()
for name in PAYLOAD_FILES:
    shutil.copyfile(pathlib.Path(sys.argv[1]) / name, copy / name)
sys.path.insert(0, str(copy.parent))
standalone = importlib.import_module("standalone.configuration_vaswani")
installed, alone = vars(modeling_vaswani.VaswaniConfig), vars(standalone.VaswaniConfig)
plain = (str, int, float, bool, type(None), tuple, list, dict, set, frozenset)
changed = set(installed) ^ set(alone)
changed |= {k for k in set(installed) & set(alone) if isinstance(alone[k], plain) and installed[k] != alone[k]}
changed = {k for k in changed if not (k.startswith("__") and k.endswith("__"))}  # the module's own name, ...
print(json.dumps({"backend": matplotlib.get_backend(), "changed": sorted(changed)}))
"""


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_importing_every_module_has_no_side_effects_beyond_registration(tmp_path):
    """Importing the whole package, toolkit included, leaves matplotlib's backend alone and changes nothing on the
    configuration class but what registering it for the Auto classes sets (`_auto_class`)."""
    env = {**os.environ, "MPLBACKEND": "svg"}
    command = [sys.executable, "-c", IMPORT_EVERYTHING, str(PACKAGE)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["backend"] == "svg"
    assert report["changed"] == ["_auto_class"]


def test_only_the_packages_own_configuration_drops_its_pipeline_declaration(tmp_path):
    """Where the package is imported, its configuration class serves checkpoints and drops the declaration of its own
    pipeline task (which its registered pipeline serves without trust_remote_code); a checkpoint's copy of the class,
    loaded as remote code, keeps it, so that pipeline(..., trust_remote_code=True) finds the checkpoint's pipeline."""
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    from modeling_vaswani import VaswaniConfig

    tiny_model(seed=3).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["custom_pipelines"] == CUSTOM_PIPELINES
    other = {"impl": "other_pipeline.OtherPipeline", "pt": ["AutoModelForSeq2SeqLM"]}
    config["custom_pipelines"] = {**CUSTOM_PIPELINES, "other-task": other}
    (tmp_path / "config.json").write_text(json.dumps(config))

    remote = get_class_from_dynamic_module("configuration_vaswani.VaswaniConfig", str(tmp_path))
    assert remote.__module__.startswith("transformers_modules.") and remote is not VaswaniConfig
    assert remote.from_pretrained(tmp_path).custom_pipelines == config["custom_pipelines"]
    assert VaswaniConfig.from_pretrained(tmp_path).custom_pipelines == {"other-task": other}


def test_an_fsdp2_wrapped_model_saves_the_payload_and_no_torch_file(tmp_path):
    """FSDP2's fully_shard swaps the model's class for FSDP<Class>(FSDPModule, Class), defined in torch: saving writes
    our payload and auto_map, never torch's file or class (tests/distributed/test_fsdp.py checks it under a real FSDP2
    run)."""
    torch_fsdp = pytest.importorskip("torch.distributed.fsdp")
    model = tiny_model(seed=3)
    ours = type(model)
    wrapper = type(
        f"FSDP{ours.__name__}", (torch_fsdp.FSDPModule, ours), {"__module__": torch_fsdp.FSDPModule.__module__}
    )
    model.__class__ = wrapper  # what fully_shard does, without sharding anything
    model.save_pretrained(tmp_path)
    assert sorted(path.name for path in tmp_path.glob("*.py")) == sorted(PAYLOAD_FILES)
    assert json.loads((tmp_path / "config.json").read_text())["auto_map"] == AUTO_MAP
    assert ours.is_remote_code() and not wrapper.is_remote_code()
