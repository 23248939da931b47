"""Nothing a user or a maintainer reads names a file or a module that is not there: every repository path and every
`modeling_vaswani.*` module named in the commands' --help texts, in the package's source (docstrings, comments,
messages, defaults such as the Hub commit message), in README.md and in docs/*.md exists. Every stale name is
reported at once, as FILE:LINE: NAME.

What counts as a name:
- a path with a file extension of the repository's sources (.py, .md, .sh, .toml, .yaml, .yml, .cfg), with or without
  folders: `modeling_vaswani/toolkit/cli/ablate.py`, `training/budget.py`, `push.py`. It must be the end of
  the path of a file in the repository (so `training/budget.py` is modeling_vaswani/toolkit/training/budget.py, and a
  bare `push.py` any file of that name);
- a path under a top-level folder of the repository (`benchmarks/gpu/`, `configs/accelerate`), which must exist as
  written, from the repository's root;
- a dotted module `modeling_vaswani.a.b`, which must be a module of the package; a further `.name` must be defined
  at the top of that module.
Not names: URLs, globs and placeholders (`test_*.py`, `<file>.py`, `OUTPUT_DIR/ablation.md`: a first folder in
capitals), and the files of other projects or that a run writes, listed in NOT_REPOSITORY_FILES with why.
"""

import ast
import contextlib
import importlib
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from helpers.training_setup import REPO as ROOT

PACKAGE = ROOT / "modeling_vaswani"
EXTENSIONS = ("py", "md", "sh", "toml", "yaml", "yml", "cfg")  # not html: example pages, lxml.html
TOP_FOLDERS = ("modeling_vaswani", "tests", "docs", "benchmarks", "configs")

# Names that look like repository paths and are deliberately not, each with its reason: other projects' files (named
# to compare with, or where a behaviour comes from) and files a run writes. "FILE: NAME" allows NAME in FILE only.
NOT_REPOSITORY_FILES = {
    "ablation.md": "the table vaswani-ablate writes into its output folder",
    "model_spec.py": "CTranslate2's (ctranslate2/specs/model_spec.py), whose checks the export mirrors",
    "ctranslate2/specs/model_spec.py": "CTranslate2's, whose checks the export mirrors",
    "fairseq/modules/sinusoidal_positional_embedding.py": "fairseq's, whose encodings the fairseq converter maps",
    "fairseq/sequence_generator.py": "fairseq's, whose loop around its search the decoding loop's module mirrors",
    "fairseq/search.py": "fairseq's, whose search step apart from the loop search_vaswani.py mirrors",
    "get_ende_bleu.sh": "tensor2tensor's script, whose tokenized BLEU evaluation/bleu reproduces",
    "docs/performance.md: modeling_vaswani/allocator_vaswani.py": "benchmark outputs quoted as printed on their date, "
    "when the file existed; the page says where its setting lives now",
    "benchmarks/gpu/wheels": "the folder benchmarks/gpu/fetch_wheels.sh makes for the GPU machines; git ignores it",
    "docs/results.md: work/base52/modeling_vaswani/__init__.py": "a printout of benchmarks/same_translations.py as it "
    "ran: the package each side imported, in the git worktrees of that evening",
    "docs/results.md: work/head52/modeling_vaswani/__init__.py": "the same printout's other side",
}

URL = re.compile(r"[a-z][a-z0-9+.-]*://\S+")
PATH = re.compile(
    r"(?<![\w./*<{-])(?:\.{0,2}/)?((?:[\w.-]+/)*[\w-][\w.-]*\.(?:" + "|".join(EXTENSIONS) + r"))(?![\w/*>}-])"
)
TOP_PATH = re.compile(r"(?<![\w./*<{-])((?:" + "|".join(TOP_FOLDERS) + r")/[\w./-]*[\w/])(?![\w*<>{}-])")
MODULE = re.compile(r"(?<![\w./-])(modeling_vaswani(?:\.\w+)+)")
ROOMS = sorted(path.stem for path in (PACKAGE / "toolkit").glob("*.py")) + sorted(
    path.parent.name for path in (PACKAGE / "toolkit").glob("*/__init__.py")
)
ROOMS.remove("__init__")
# `serving.engines.load_translator`: a module named from its toolkit room, as the package's texts do; in backticks
# and without a call only: bare outputs.logits is a variable's attribute, `translation.split()` a string's method
ROOM_MODULE = re.compile(r"(?<=`)((?:" + "|".join(ROOMS) + r")(?:\.[a-z_]\w*)+)(?=`)")


def repository_files() -> set[str]:
    """Every file git tracks in the checkout, as a path from the root with "/": what a clone has, not what a run or
    a script left beside it (git-ignored folders such as benchmarks/gpu/wheels/ exist here and not in CI)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return {name for name in listed.decode("utf-8").split("\0") if name and (ROOT / name).is_file()}


def path_exists(name: str, files: set[str]) -> bool:
    name = name.removeprefix("./").rstrip("/")
    if "/" in name and name.split("/")[0].isupper():
        return True  # a placeholder's file: OUTPUT_DIR/ablation.md, OUT/gpu-report.md
    if name.split("/")[0] in TOP_FOLDERS:  # exactly as written: a tracked file, or a folder holding one
        return name in files or any(file.startswith(name + "/") for file in files)
    return any(file == name or file.endswith("/" + name) for file in files)


def module_exists(dotted: str) -> bool:
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):  # the longest prefix that is a module, then a name defined in it
        folder = ROOT.joinpath(*parts[:end])
        source = folder / "__init__.py" if folder.is_dir() else folder.with_suffix(".py")
        if source.is_file():
            rest = parts[end:]
            return not rest or rest[0] in top_level_names(source) or (folder / f"{rest[0]}.py").is_file()
    return False


def top_level_names(source: Path) -> set[str]:
    names = set()
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {name.id for target in targets for name in ast.walk(target) if isinstance(name, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return names


def stale_names(where: str, text: str, files: set[str]) -> list[str]:
    """`where:LINE: NAME` for each name in `text` that is not in the repository."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        line = URL.sub(" ", line)
        names = [(match.group(1), path_exists) for match in PATH.finditer(line)]
        rest = PATH.sub(" ", line)
        names += [(match.group(1), path_exists) for match in TOP_PATH.finditer(rest)]
        names += [(match.group(1), lambda name, _: module_exists(name)) for match in MODULE.finditer(rest)]
        rest = MODULE.sub(" ", rest)
        names += [
            (match.group(1), lambda name, _: module_exists("modeling_vaswani.toolkit." + name))
            for match in ROOM_MODULE.finditer(rest)
        ]
        for name, exists in names:
            name = name.removeprefix("./").rstrip("/")
            allowed = name in NOT_REPOSITORY_FILES or f"{where}: {name}" in NOT_REPOSITORY_FILES
            if not allowed and not exists(name, files):
                found.append(f"{where}:{number}: {name}")
    return found


def help_texts(monkeypatch) -> dict[str, str]:
    """Every command's --help output, from its own parser in this process."""
    monkeypatch.setenv("COLUMNS", "1000")  # one line a flag: argparse would wrap at hyphens inside a name
    monkeypatch.setenv("VASWANI_KEEP_FREED_MEMORY", "0")  # the commands' process settings, left off in the tests' one
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    texts = {}
    for name, target in scripts.items():
        module, function = target.split(":")
        out = io.StringIO()
        monkeypatch.setattr(sys, "argv", [name])  # argparse's prog
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exited:
            getattr(importlib.import_module(module), function)(["--help"])
        assert exited.value.code == 0, f"{name} --help exited with {exited.value.code}"
        assert "usage:" in out.getvalue(), f"{name} --help printed no usage"
        texts[f"{name} --help"] = out.getvalue()
    return texts


def test_the_scan_sees_what_it_should():
    files = repository_files()
    assert "modeling_vaswani/toolkit/training/budget.py" in files
    text = (
        "see toolkit/training/budget.py, training/budget.py and modeling_vaswani/toolkit/ablation.py\n"
        "with push_to_hub.py; python -m modeling_vaswani.toolkit.cli.ablate; modeling_vaswani.toolkit.cli.nothing\n"
        "modeling_vaswani.toolkit.cli.arguments.finite_floats, modeling_vaswani.toolkit.cli.arguments.gone\n"
        "docs/training.md docs/nowhere.md benchmarks/gpu/ configs/nothing https://x.org/a/b.py test_*.py\n"
        "`serving.engines.load_translator` `translation.split()` outputs.gone `texts.iter_text_lines`"
    )
    assert stale_names("t", text, files) == [
        "t:1: modeling_vaswani/toolkit/ablation.py",
        "t:2: push_to_hub.py",
        "t:2: modeling_vaswani.toolkit.cli.nothing",
        "t:3: modeling_vaswani.toolkit.cli.arguments.gone",
        "t:4: docs/nowhere.md",
        "t:4: configs/nothing",
        "t:5: serving.engines.load_translator",
    ]


def test_no_stale_names(monkeypatch):
    files = repository_files()
    sources = help_texts(monkeypatch)
    # The package's own texts, as git lists them: not what npm ci installs beside the browser page (web/node_modules)
    ours = [ROOT / name for name in files if name.startswith(f"{PACKAGE.name}/") and name.endswith((".py", ".md"))]
    for path in sorted([*ours, ROOT / "README.md", *(ROOT / "docs").glob("*.md")]):
        sources[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
    stale = [name for where, text in sources.items() for name in stale_names(where, text, files)]
    assert not stale, f"{len(stale)} names of files or modules that are not there:\n" + "\n".join(stale)
