"""The allocator setting (toolkit/runtime.py): after it, memory freed and allocated again costs no page faults;
without it, it does. Only a program that calls it gets it: importing the package and running the model change
nothing in malloc's behaviour.

Each case runs in a fresh process (the setting is for a whole process, and the test process's own may be changed).
"""

import ast
import sys
from pathlib import Path

import pytest
from helpers.malloc import FRESH_FAULTS, KEPT_FAULTS
from helpers.malloc import page_faults as measure

import modeling_vaswani
from modeling_vaswani.remote_code_vaswani import PAYLOAD_FILES

SETUP = """
import sys
from modeling_vaswani.toolkit.runtime import apply_process_settings, keep_freed_memory
from helpers.tiny_models import padded_batch, tiny_model

applied = None
if sys.argv[1] == "keep":
    applied = keep_freed_memory()
elif sys.argv[1] == "apply":  # as the toolkit's commands and Trainer start
    applied = apply_process_settings()
elif sys.argv[1] == "model":  # the package imported, the model trained a step and generated, on a CPU
    ids, mask = padded_batch([5, 3])
    model = tiny_model()
    model(input_ids=ids, attention_mask=mask, labels=ids).loss.backward()
    model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=3)
    model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=3, num_beams=2)
print(applied)
"""

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc settings; Linux only")


def page_faults(mode: str, **environment: str) -> tuple[str, int]:
    (applied,), faults = measure(SETUP, mode, **environment)
    return applied, faults


@linux_only
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_freed_memory_is_reused_without_page_faults():
    _, default_faults = page_faults("default")
    applied, kept_faults = page_faults("keep")
    assert default_faults > FRESH_FAULTS, "glibc by default maps a large block afresh each time"
    assert applied == "True"
    # The heap may grow a few times more after the warm-up (where a mapping sits just past it, glibc continues it
    # elsewhere: after 2 warm-up rounds, 4 of 8 rounds faulted in one CI run), then the block's pages are reused:
    # without the setting, every round faults.
    assert kept_faults <= KEPT_FAULTS


@linux_only
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_the_process_settings_apply_it():
    applied, faults = page_faults("apply")
    assert applied == "True" and faults <= KEPT_FAULTS


@linux_only
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_the_model_changes_nothing_in_malloc():
    """Importing the package, training a step and generating (greedy and beam) on CPU leave glibc's defaults: every
    64 MiB block is mapped afresh, as in a process that never saw the model."""
    applied, faults = page_faults("model")
    assert applied == "None"
    assert faults > FRESH_FAULTS, f"only {faults} page faults after the model ran: it changed malloc's settings"


@linux_only
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_the_environment_opts_out():
    applied, faults = page_faults("apply", VASWANI_KEEP_FREED_MEMORY="0")
    assert applied == "False" and faults > FRESH_FAULTS


@linux_only
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_glibcs_own_settings_are_left_alone():
    # Only the trim threshold set by the user: the mmap threshold stays glibc's, so every 64 MiB block is mapped
    # afresh. Had the settings applied over the user's, the blocks would come from the heap.
    applied, faults = page_faults("apply", MALLOC_TRIM_THRESHOLD_="1000000")
    assert applied == "False" and faults > FRESH_FAULTS


def test_apply_process_settings_reads_only_the_environment_it_is_given(monkeypatch):
    """The decision, without touching this process's malloc: keep_freed_memory is replaced by a recorder."""
    import modeling_vaswani.toolkit.runtime as runtime

    calls = []
    monkeypatch.setattr(runtime, "keep_freed_memory", lambda: calls.append(1) or True)
    assert runtime.apply_process_settings({}) is True
    assert runtime.apply_process_settings({"VASWANI_KEEP_FREED_MEMORY": "1"}) is True
    assert runtime.apply_process_settings({"VASWANI_KEEP_FREED_MEMORY": "0"}) is False
    assert runtime.apply_process_settings({"MALLOC_MMAP_THRESHOLD_": "65536"}) is False
    assert len(calls) == 2


PACKAGE = Path(modeling_vaswani.__file__).parent


def process_reaches(path: Path) -> list[str]:
    """What a file uses to reach the process beyond torch and transformers: ctypes, and reads of sys.modules."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] == "ctypes"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ctypes":
            found.append(node.module)
        elif (
            isinstance(node, ast.ImportFrom) and node.module == "sys" and any(a.name == "modules" for a in node.names)
        ):
            found.append("sys.modules")
        elif isinstance(node, ast.Attribute) and node.attr == "modules" and getattr(node.value, "id", None) == "sys":
            found.append("sys.modules")
    return found


@pytest.mark.parametrize("name", PAYLOAD_FILES)
def test_no_payload_file_uses_ctypes_or_reads_sys_modules(name):
    assert process_reaches(PACKAGE / name) == [], name


def test_the_static_check_catches_what_it_should(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import ctypes.util\nimport sys\nfrom sys import modules\n\ndef f():\n    return sys.modules.get('x')\n"
    )
    assert process_reaches(bad) == ["ctypes.util", "sys.modules", "sys.modules"]
    assert process_reaches(PACKAGE / "toolkit" / "runtime.py") == ["ctypes"]
