"""docs/architecture.md's tree is the map of the package: every module of `modeling_vaswani/` is on it, under its own
folder, and everything it names exists (issue 52: the page had left out modules for rounds and nothing noticed).

The tree is read as written: an entry is a name at its indentation (two spaces a level) followed by a description;
a folder entry's description, and the lines that continue it, list the folder's files and subfolders by name."""

import ast
import re

from helpers.training_setup import REPO

PAGE = REPO / "docs" / "architecture.md"
PACKAGE = "modeling_vaswani"
SEGMENT = r"[A-Za-z_][\w-]*"
NAME = re.compile(rf"(?<![\w./])((?:{SEGMENT}/)*(?:{SEGMENT}\.(?:py|html|md|json|yaml)|{SEGMENT}/))(?![\w(])")
DESCRIPTION_COLUMN = 34  # continuation lines start here: they hold descriptions only


def tree_lines() -> list[str]:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index("## The tree")
    block = re.search(r"^```\n(.*?)^```", text[start:], re.S | re.M)
    assert block, "docs/architecture.md: no fenced tree under '## The tree'"
    return block.group(1).splitlines()


def listed_paths(lines: list[str]) -> tuple[set[str], set[str]]:
    """(every path the tree names as an entry or as a folder's child, the entries alone), relative to the repo."""
    stack: list[tuple[int, str]] = []  # (indentation, folder path)
    named, entries = set(), set()
    folder_of_description = None
    for line in lines:
        indent = len(line) - len(line.lstrip(" "))
        if indent >= DESCRIPTION_COLUMN:  # a continuation of the entry above
            words = line.strip()
        else:
            entry, _, words = line.strip().partition(" ")
            while stack and stack[-1][0] >= indent:
                stack.pop()
            parent = stack[-1][1] if stack else ""
            path = parent + entry
            named.add(path.rstrip("/"))
            entries.add(path.rstrip("/"))
            folder_of_description = path if entry.endswith("/") else None
            if entry.endswith("/"):
                stack.append((indent, path))
        if folder_of_description is not None:
            named |= {(folder_of_description + child).rstrip("/") for child in NAME.findall(words)}
    return named, entries


def package_modules() -> set[str]:
    """Every module file and subpackage of the package (package data and caches aside)."""
    root = REPO / PACKAGE
    modules = {
        str(path.relative_to(REPO))
        for path in root.rglob("*.py")
        if path.name != "__init__.py" and "__pycache__" not in path.parts
    }
    modules |= {str(path.parent.relative_to(REPO)) for path in root.rglob("__init__.py") if path.parent != root}
    return modules


def test_every_module_of_the_package_is_on_the_tree():
    named, _ = listed_paths(tree_lines())
    missing = sorted(package_modules() - named)
    assert not missing, f"docs/architecture.md's tree leaves out {missing}"


def test_everything_the_tree_names_in_the_package_exists():
    named, entries = listed_paths(tree_lines())
    inside = {path for path in named if path == PACKAGE or path.startswith(PACKAGE + "/")}
    gone = sorted(path for path in inside | entries if not (REPO / path).exists())
    assert not gone, f"docs/architecture.md's tree names {gone}, which do not exist"


def test_the_reader_of_the_tree_sees_its_folders():
    """The parser itself, on a tree written here: a child named in a folder's continuation line is that folder's."""
    lines = [
        "pkg/                              the package",
        "  a.py                            one (not b.py: a file's description names no children)",
        "  room/                           x.py (what), y.py, deep/w.py,",
        "                                  z/ (data)",
        "  c.py                            three",
    ]
    named, entries = listed_paths(lines)
    assert named == {
        "pkg", "pkg/a.py", "pkg/room", "pkg/room/x.py", "pkg/room/y.py", "pkg/room/deep/w.py", "pkg/room/z", "pkg/c.py"
    }  # fmt: skip
    assert entries == {"pkg", "pkg/a.py", "pkg/room", "pkg/c.py"}


def test_each_package_docstring_names_its_modules():
    """The toolkit's docstring names every room, and each room's every module (the commands' room says "one module a
    command"), in backticks: a room's newest module cannot be left out of the text that introduces it."""
    toolkit = REPO / PACKAGE / "toolkit"
    rooms = [path for path in toolkit.iterdir() if path.suffix == ".py" or (path / "__init__.py").is_file()]
    for folder, members in [(toolkit, rooms), *((room, list(room.iterdir())) for room in rooms if room.is_dir())]:
        if folder.name == "cli":
            continue
        docstring = ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8"))) or ""
        modules = [path for path in members if path.suffix == ".py" or (path / "__init__.py").is_file()]
        names = {path.stem for path in modules if path.name != "__init__.py"}
        missing = sorted(name for name in names if f"`{name}`" not in docstring)
        assert not missing, f"{folder.relative_to(REPO)}/__init__.py's docstring leaves out {missing}"
