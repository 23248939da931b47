"""transformers' own common model tests (`ModelTesterMixin`, `ConfigTester`), for our model classes.

They are not installed with transformers and we vendor nothing: the sdist of the installed transformers version, on
PyPI, ships `tests/test_modeling_common.py` and `tests/test_configuration_common.py`. `load()` downloads that sdist
once (`pip download --no-binary`), keeps its `tests/` folder under `.cache/transformers-tests/<version>/` at the
repository root (git-ignored), and imports it as the package `UPSTREAM` (not `tests`, which is our own folder).

The sdist lacks three modules those two import; `load()` puts stand-ins in their place:
- `generation/test_utils.py` (`GenerationTesterMixin`) and `exporters/test_export.py` (`ExportTesterMixin`): empty
  classes. We do not run transformers' generation and export mixins: our own decoding tests cover generate()
  (tests/model/test_generation.py), and export is not something this model promises.
- `utils/test_configuration_utils.py` (`config_common_kwargs`, for `ConfigTester.check_config_arguments_init`): our
  own table of non-default values for the fields `PreTrainedConfig` declares (`CONFIG_COMMON_KWARGS`).

Offline, `load()` raises `Unavailable`; `load_or_skip()` turns that into a skip of the calling test module, or into
a failure where the environment sets `VASWANI_REQUIRE_TRANSFORMERS_TESTS=1` (CI does: there, the tests must run).
"""

import importlib
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import tarfile
import tempfile
import types
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_ROOT = REPO_ROOT / ".cache" / "transformers-tests"
UPSTREAM = "transformers_upstream_tests"  # the package name transformers' tests/ folder is imported under
REQUIRE_ENV = "VASWANI_REQUIRE_TRANSFORMERS_TESTS"
# The files we import, all shipped by the sdist; `download()` checks they arrived.
NEEDED = ("test_modeling_common.py", "test_configuration_common.py")
COMPLETE = (*NEEDED, "__init__.py")  # what a finished download leaves (`download()` adds the __init__.py)

# Non-default values for the fields `PreTrainedConfig` (transformers 5) declares: `check_config_arguments_init`
# builds the model's config from these and checks that each one arrived. Fields a model config may redefine
# (is_encoder_decoder, the special token ids, tie_word_embeddings) are left out, as transformers' table leaves out
# is_encoder_decoder. `dtype` is the one the check compares specially (against torch.float16).
CONFIG_COMMON_KWARGS = {
    "return_dict": False,
    "output_hidden_states": True,
    "output_attentions": True,
    "dtype": "float16",
    "chunk_size_feed_forward": 5,
    "architectures": ["VaswaniForConditionalGeneration"],
    "id2label": {0: "label"},
    "label2id": {"label": 0},
    "problem_type": "regression",
}


# The pytest marks transformers' test files use, which transformers' own conftest.py (not in the sdist) registers:
# `register_markers` registers them too, else pytest warns of unknown marks at every collection.
MARKERS = {
    "accelerate_tests": "transformers' tests of big-model inference through accelerate",
    "flash_attn_test": "transformers' Flash Attention 2 tests",
    "flash_attn_3_test": "transformers' Flash Attention 3 tests",
    "flash_attn_4_test": "transformers' Flash Attention 4 tests",
    "torch_compile_test": "transformers' torch.compile tests",
}


def register_markers(config: pytest.Config) -> None:
    """In a conftest.py's `pytest_configure`: declare `MARKERS`."""
    for name, description in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {description}")


class Unavailable(RuntimeError):
    """transformers' test files could not be had (offline, or a version PyPI does not have)."""


class GenerationTesterMixin:
    """Stand-in for transformers' `tests/generation/test_utils.py` mixin, which the sdist does not ship.

    Empty on purpose: we do not run transformers' generation tests; tests/model/test_generation.py covers our
    generate().
    """


class ExportTesterMixin:
    """Stand-in for transformers' `tests/exporters/test_export.py` mixin (a base of `ModelTesterMixin`), which the
    sdist does not ship. Empty on purpose: we do not run transformers' export tests."""


def transformers_version() -> str:
    return importlib.metadata.version("transformers")


def tests_dir(version: str | None = None) -> Path:
    """Where the `tests/` folder of transformers `version` (default: the installed one) is kept."""
    return CACHE_ROOT / (version or transformers_version()) / "tests"


def download(version: str) -> Path:
    """Download transformers' sdist of `version` and extract its `tests/` folder into the cache, once."""
    target = tests_dir(version)
    if all((target / name).is_file() for name in COMPLETE):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        command += ["--disable-pip-version-check", f"transformers=={version}", "-d", scratch]
        try:
            subprocess.run(command, check=True, capture_output=True, text=True, timeout=600)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
            output = (getattr(error, "stderr", None) or getattr(error, "output", None) or str(error)).strip()
            raise Unavailable(
                f"could not download the sdist of transformers=={version} from the package index "
                f"(its tests/ folder holds transformers' common model tests): {output.splitlines()[-1:]}"
            ) from error
        archives = list(Path(scratch).glob("transformers-*.tar.gz"))
        if len(archives) != 1:
            raise Unavailable(f"pip download of transformers=={version} gave {archives}, not one .tar.gz sdist")
        extracted = Path(scratch) / "extracted"
        with tarfile.open(archives[0]) as archive:
            members = [m for m in archive.getmembers() if m.name.split("/")[1:2] == ["tests"]]
            archive.extractall(extracted, members=members, filter="data")
        found = list(extracted.glob("*/tests"))
        missing = [name for name in NEEDED if not found or not (found[0] / name).is_file()]
        if missing:
            raise Unavailable(f"the sdist of transformers=={version} has no tests/{', tests/'.join(missing)}")
        # transformers' repository has an (empty) tests/__init__.py, the sdist not; test_configuration_common.py
        # runs `direct_transformers_import(<its folder>)`, which executes that file.
        (found[0] / "__init__.py").write_text("")
        try:
            # A rename, so that a concurrent run sees the whole folder or none of it.
            os.replace(found[0], target)
        except OSError:
            if not all((target / name).is_file() for name in COMPLETE):  # not another run that got there first
                raise
    return target


def _stand_in(name: str, **attributes) -> None:
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    if "." not in name.removeprefix(UPSTREAM + "."):  # a subpackage: may hold modules
        module.__path__ = []
    sys.modules[name] = module


def load() -> types.ModuleType:
    """transformers' tests/ folder as the package `UPSTREAM`, with the stand-ins in place. Raises `Unavailable`."""
    if UPSTREAM in sys.modules:
        return sys.modules[UPSTREAM]
    version = transformers_version()
    folder = download(version)
    spec = importlib.util.spec_from_file_location(
        UPSTREAM, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    package = importlib.util.module_from_spec(spec)
    sys.modules[UPSTREAM] = package
    spec.loader.exec_module(package)
    _stand_in(f"{UPSTREAM}.generation")
    _stand_in(f"{UPSTREAM}.generation.test_utils", GenerationTesterMixin=GenerationTesterMixin)
    _stand_in(f"{UPSTREAM}.exporters")
    _stand_in(f"{UPSTREAM}.exporters.test_export", ExportTesterMixin=ExportTesterMixin)
    _stand_in(f"{UPSTREAM}.utils")
    _stand_in(f"{UPSTREAM}.utils.test_configuration_utils", config_common_kwargs=CONFIG_COMMON_KWARGS)
    try:
        for name in NEEDED:
            importlib.import_module(f"{UPSTREAM}.{name.removesuffix('.py')}")
    except BaseException as error:
        for name in [name for name in sys.modules if name == UPSTREAM or name.startswith(UPSTREAM + ".")]:
            del sys.modules[name]
        if isinstance(error, ModuleNotFoundError) and error.name and not error.name.startswith(UPSTREAM):
            # A test dependency of transformers' that the dev extra lacks (`parameterized`, say).
            raise Unavailable(f"transformers' tests need {error.name!r}: pip install {error.name}") from error
        raise
    return package


def load_or_skip() -> types.ModuleType:
    """`load()`, in a test module: skips the module if the tests cannot be had, unless `REQUIRE_ENV` is 1."""
    try:
        return load()
    except Unavailable as error:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 and transformers' common tests are unavailable: {error}", pytrace=False)
        pytest.skip(
            f"transformers' common tests are unavailable ({error}); set {REQUIRE_ENV}=1 to fail instead",
            allow_module_level=True,
        )
