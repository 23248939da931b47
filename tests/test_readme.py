"""README.md and docs/*.md stay true: every ```python block runs as written, each in a fresh process in a temporary
folder, offline. A block that cannot run here (a Hub download, a GPU) says so on its first line,
`# not run in tests: <why>`, and is reported as skipped with that reason; no block is left out silently."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.training_setup import REPO as ROOT

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)
PYTHON = {"python", "py", "python3"}
NOT_RUN = "# not run in tests:"
TIMEOUT = 600  # seconds for one block


def fenced_blocks(path: Path) -> list[tuple[int, str, str]]:
    """(line of the opening fence, language, code) for every fenced block of a Markdown file."""
    text = path.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, match.start()) + 1, match.group(1).strip().lower(), match.group(2))
        for match in FENCE.finditer(text)
    ]


def python_blocks() -> list:
    blocks = []
    for path in DOCUMENTS:
        for line, language, code in fenced_blocks(path):
            if language in PYTHON:
                where = f"{path.relative_to(ROOT)}:{line}"
                blocks.append(pytest.param(where, code, id=where))
    return blocks


BLOCKS = python_blocks()


def assert_quick_start(folder: Path, stdout: str) -> None:
    """README's quick start saves a model and prints two generated tensors."""
    assert (folder / "vaswani-base" / "model.safetensors").exists()
    assert stdout.count("tensor(") == 2, stdout


# Checks beyond a clean exit, for blocks whose output says more than their own asserts do.
EXTRA_CHECKS = {"README.md": assert_quick_start}  # the first runnable block of the file


def run_block(code: str, folder: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=folder, env=env, capture_output=True, text=True, timeout=TIMEOUT
    )


def not_run_reason(code: str) -> str | None:
    first = code.lstrip("\n").split("\n", 1)[0].strip()
    if not first.startswith(NOT_RUN):
        return None
    reason = first[len(NOT_RUN) :].strip()
    assert reason, f"'{NOT_RUN}' needs a reason after it"
    return reason


def first_runnable_blocks() -> dict[str, str]:
    """For each document, where its first block that the tests run is."""
    first = {}
    for param in BLOCKS:
        where, code = param.values
        if not_run_reason(code) is None:
            first.setdefault(where.rsplit(":", 1)[0], where)
    return first


@pytest.mark.parametrize(("where", "code"), BLOCKS)
@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_python_block_runs(where, code, tmp_path):
    reason = not_run_reason(code)
    if reason is not None:
        pytest.skip(f"{where} not run: {reason}")
    result = run_block(code, tmp_path)
    assert result.returncode == 0, f"{where} failed:\n{result.stderr[-4000:]}"
    document = where.rsplit(":", 1)[0]
    if document in EXTRA_CHECKS and first_runnable_blocks()[document] == where:
        EXTRA_CHECKS[document](tmp_path, result.stdout)


def test_readme_has_a_runnable_quick_start():
    assert "README.md" in first_runnable_blocks(), "README.md has no Python example that the tests run"


def test_no_python_hides_in_other_fences():
    """Python in a fence not labelled python would never run: label it, or mark it not run."""
    for path in DOCUMENTS:
        for line, language, code in fenced_blocks(path):
            if language in PYTHON:
                continue
            starts = code.lstrip().split("\n", 1)[0]
            looks_python = re.match(r"(import \w|from [\w.]+ import )", starts)
            assert not looks_python, f"{path.relative_to(ROOT)}:{line}: Python in a ```{language} fence"


def collected(*options: str) -> tuple[int, int]:
    """How many tests pytest selects with `options`, of how many it collects: (selected, collected), counted by
    pytest itself in a fresh process (its "N/M tests collected" line; "N tests collected" where all are selected)."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-p", "no:cacheprovider", *options],
        cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip
    counts = re.findall(r"^(\d+)(?:/(\d+))? tests? collected", result.stdout, re.M)
    assert counts, f"pytest --collect-only {options} printed no count:\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
    selected, every = counts[-1]
    return int(selected), int(every or selected)


UPSTREAM_TESTS = "tests/model/test_transformers_common.py"  # transformers' own tests: as many as its release has


@pytest.mark.slow  # a collection of the whole suite in a fresh process
def test_the_readmes_test_counts_are_the_suites():
    """README's test command says how many of the project's own tests the edit-test loop runs, of how many: the counts
    pytest gives (transformers' common model tests apart: their number is the installed release's)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    stated = re.search(r'-m "not slow".*?([\d,]+) of the ([\d,]+) tests', readme)
    assert stated, "README.md's test command no longer states the not-slow loop's count"
    not_slow, every = (int(number.replace(",", "")) for number in stated.groups())
    ours = f"--ignore={UPSTREAM_TESTS}"
    assert (not_slow, every) == collected(ours, "-m", "not slow"), "README.md's counts are stale"
