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
from tiny_models import tiny_model

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
import importlib, importlib.util, json, pkgutil, sys
import matplotlib
import modeling_vaswani

for module in pkgutil.walk_packages(modeling_vaswani.__path__, "modeling_vaswani."):
    importlib.import_module(module.name)
# The configuration file loaded on its own, as remote code loads it: no package code has run on this class.
spec = importlib.util.spec_from_file_location("standalone", sys.argv[1])
standalone = importlib.util.module_from_spec(spec)
spec.loader.exec_module(standalone)
installed, alone = vars(modeling_vaswani.VaswaniConfig), vars(standalone.VaswaniConfig)
plain = (str, int, float, bool, type(None), tuple, list, dict, set, frozenset)
changed = set(installed) ^ set(alone)
changed |= {k for k in set(installed) & set(alone) if isinstance(alone[k], plain) and installed[k] != alone[k]}
changed = {k for k in changed if not (k.startswith("__") and k.endswith("__"))}  # the module's own name, ...
print(json.dumps({"backend": matplotlib.get_backend(), "changed": sorted(changed)}))
"""


def test_importing_every_module_has_no_side_effects_beyond_registration(tmp_path):
    """Importing the whole package, toolkit included, leaves matplotlib's backend alone and changes nothing on the
    configuration class but what registering it for the Auto classes sets (`_auto_class`)."""
    env = {**os.environ, "MPLBACKEND": "svg"}
    command = [sys.executable, "-c", IMPORT_EVERYTHING, str(PACKAGE / "configuration_vaswani.py")]
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["backend"] == "svg"
    assert report["changed"] == ["_auto_class"]
