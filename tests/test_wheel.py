"""The package as a user installs it: the wheel built from the checkout, installed outside it, its commands run.

How it is built and installed, and the main job its vaswani-train runs (shared with tests/cli/test_commands.py):
tests/helpers/wheel.py, run once a session by tests/conftest.py's `installed` and `main_job`.
`test_the_installed_package_is_the_wheel_not_the_checkout` checks that the installed package, not the checkout's
editable install, is what runs.
"""

import json
import os
import sysconfig
import zipfile
from pathlib import Path

import pytest
import tomllib
from helpers.hub_server import Repo
from helpers.training_setup import REPO
from helpers.wheel import MAIN_JOB, OFFLINE, clean_env, run
from huggingface_hub import ModelCard

pytestmark = pytest.mark.slow  # builds the wheel and installs it into a new environment

# The commands, from their one home: pyproject.toml's [project.scripts].
COMMANDS = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
TOOLKIT = "modeling_vaswani/toolkit"
MULTI30K = f"{TOOLKIT}/data/multi30k"
PACKAGE_DATA = [
    *(f"{MULTI30K}/{split}.{lang}.gz" for split in ("train", "val", "test_2016_flickr") for lang in ("en", "de")),
    f"{MULTI30K}/README.md",
    f"{TOOLKIT}/hub/model_card.md",
    f"{TOOLKIT}/evaluation/bleu/bleu.py",
    f"{TOOLKIT}/serving/page.html",
    f"{TOOLKIT}/training/measurements.json",
]
REPO_ID = "user/vaswani-wheel"

# Run by the new environment's python: where the package and its data come from, and what sys.path holds.
PROBE = """
import importlib, json, pkgutil, sys
import modeling_vaswani, modeling_vaswani.toolkit.cli as commands
for module in pkgutil.iter_modules(commands.__path__):
    importlib.import_module(f"{commands.__name__}.{module.name}")
from modeling_vaswani.toolkit.data import corpora as data
from modeling_vaswani.toolkit.hub import push as hub
from modeling_vaswani.toolkit.evaluation import metrics
print(json.dumps({
    "package": modeling_vaswani.__file__,
    "modules": {name: getattr(module, "__file__", None) for name, module in sys.modules.items()
                if name.split(".")[0] == "modeling_vaswani"},
    "data": [str(data.MULTI30K_DIR), str(hub.TEMPLATE), str(metrics.BLEU_PATH)],
    "sys_path": sys.path,
    "meta_path": [repr(finder) for finder in sys.meta_path],
    "path_hooks": [repr(hook) for hook in sys.path_hooks],
}))
"""


def test_the_wheel_holds_the_modules_the_package_data_and_the_commands(installed):
    with zipfile.ZipFile(installed["wheel"]) as wheel:
        names = set(wheel.namelist())
        (dist_info,) = {name.split("/")[0] for name in names if name.split("/")[0].endswith(".dist-info")}
        entry_points = wheel.read(f"{dist_info}/entry_points.txt").decode()
    modules = {path.relative_to(REPO).as_posix() for path in (REPO / "modeling_vaswani").rglob("*.py")}
    missing = sorted((modules | set(PACKAGE_DATA)) - names)
    assert not missing, f"the wheel lacks {missing}; it has {sorted(names)}"
    top_level = {name.split("/")[0] for name in names}
    assert top_level == {"modeling_vaswani", dist_info}, f"the wheel installs more than the package: {top_level}"

    scripts = {}
    section = None
    for line in entry_points.splitlines():
        if line.startswith("["):
            section = line.strip("[]")
        elif "=" in line and section == "console_scripts":
            name, target = (part.strip() for part in line.split("=", 1))
            scripts[name] = target
    assert scripts == COMMANDS, f"entry_points.txt:\n{entry_points}"
    # Every command module is installed as a command, and only those.
    commands = {path.stem for path in (REPO / TOOLKIT / "cli").glob("*.py")} - {"__init__", "arguments", "shell"}
    assert {target.removeprefix("modeling_vaswani.toolkit.cli.") for target in scripts.values()} == {
        f"{module}:main" for module in commands
    }
    for target in scripts.values():
        module = target.split(":")[0].replace(".", "/") + ".py"
        assert module in names, f"entry point {target}: {module} is not in the wheel"
    for name in COMMANDS:
        script = installed["bin"] / name
        assert script.is_file(), f"{name} was not installed into {installed['bin']}"
        assert script.read_text().splitlines()[0] == f"#!{installed['python']}", f"{script} runs another python"


def test_the_installed_package_is_the_wheel_not_the_checkout(installed):
    probe = json.loads(run([installed["python"], "-c", PROBE], cwd=installed["empty"], env=installed["env"]).stdout)
    site_packages = installed["site_packages"].resolve()

    def inside(path, folder) -> bool:
        return Path(path).resolve().is_relative_to(folder)

    assert inside(probe["package"], site_packages), f"modeling_vaswani imported from {probe['package']}"
    elsewhere = {name: file for name, file in probe["modules"].items() if not file or not inside(file, site_packages)}
    assert not elsewhere, f"modules not from the installed wheel: {elsewhere}"
    assert len(probe["modules"]) > len(COMMANDS), probe["modules"]
    for path in probe["data"]:
        assert inside(path, site_packages) and Path(path).exists(), f"package data at {path}"
    # This environment's site-packages lies inside the checkout (.venv): the one entry allowed to.
    dependencies = Path(sysconfig.get_path("purelib")).resolve()
    leaked = [
        entry
        for entry in probe["sys_path"]
        if entry and inside(entry, REPO.resolve()) and Path(entry).resolve() != dependencies
    ]
    assert not leaked, f"sys.path holds the checkout: {leaked} (all: {probe['sys_path']})"
    finders = [f for f in probe["meta_path"] + probe["path_hooks"] if "editable" in f.lower() or str(REPO) in f]
    assert not finders, f"an editable install's import hook is active: {finders}"


def test_vaswani_train_runs_on_the_shipped_data_from_an_empty_folder(main_job):
    work, result = main_job
    steps, test_sentences = int(flag("--max_steps")), int(flag("--max_eval_samples"))
    run_dir = work / "runs" / "small"  # the small preset's default output_dir, relative to the working folder
    model_dir = run_dir / "averaged"
    assert "sacreBLEU" in result.stdout and "tokenized BLEU" in result.stdout, result.stdout
    assert "\nchrF2 " in result.stdout and "\nTER " in result.stdout, result.stdout
    assert result.stdout.strip().splitlines()[-1] == "model: runs/small/averaged", result.stdout
    checkpoints = sorted(p.name for p in run_dir.glob("checkpoint-*"))
    assert checkpoints == ["checkpoint-10", "checkpoint-20", "checkpoint-30"], checkpoints
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "results.json"):
        assert (model_dir / name).is_file(), f"{model_dir} lacks {name}: {sorted(os.listdir(model_dir))}"
    assert (run_dir / "training_curves.png").stat().st_size > 0
    results = json.loads((model_dir / "results.json").read_text())
    assert results["train"]["step"] == steps, results["train"]
    assert results["test"]["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a"), results["test"]
    assert results["test"]["chrf_signature"].startswith("nrefs:1|case:mixed|eff:yes|nc:6|nw:0"), results["test"]
    assert results["test"]["ter_signature"].startswith("nrefs:1|case:lc|tok:tercom"), results["test"]
    assert results["test_set"]["dataset_id"] == "multi30k", results["test_set"]
    assert results["test_set"]["dataset_split"] == "test_2016_flickr", results["test_set"]
    assert len((model_dir / "test.hyp.de").read_text().splitlines()) == test_sentences
    config = json.loads((model_dir / "config.json").read_text())
    assert (config["d_model"], config["encoder_layers"], config["num_heads"]) == (256, 3, 4), config  # small preset
    assert config["vocab_size"] <= int(flag("--vocab_size")), config


def flag(name: str) -> str:
    return MAIN_JOB[MAIN_JOB.index(name) + 1]


def test_vaswani_translate_translates_standard_input(installed, main_job):
    work, _ = main_job
    env = {**installed["env"], **OFFLINE}
    command = [installed["bin"] / "vaswani-translate", work / "runs" / "small" / "averaged"]
    result = run(command, cwd=installed["empty"], env=env, input="A man rides a bike.\n")
    assert len(result.stdout.splitlines()) == 1, f"one sentence in, {result.stdout!r} out"


def test_vaswani_push_uploads_the_model_card_rendered_from_the_installed_templates(installed, main_job, hub_server):
    work, _ = main_job
    model_dir = work / "runs" / "small" / "averaged"
    env = clean_env(hub_server.client_env(work / "hf_home_push"), work / "hf_home_push")
    result = run([installed["bin"] / "vaswani-push", model_dir, REPO_ID], cwd=installed["empty"], env=env)
    assert result.stdout.strip().splitlines()[-1] == f"{hub_server.url}/{REPO_ID}", result.stdout

    repo = Repo(hub_server.root, "model", REPO_ID)
    tree = repo.snapshot("main")[1]["tree"]
    for name in ("README.md", "config.json", "model.safetensors", "tokenizer.json", "results.json"):
        assert name in tree, f"the push did not upload {name}: {sorted(tree)}"
    # The model's code in the repository is the installed package's.
    for name in ("configuration_vaswani.py", "modeling_vaswani.py", "pipeline_vaswani.py"):
        assert name in tree, f"the push did not upload {name}: {sorted(tree)}"
        installed_code = (installed["site_packages"] / "modeling_vaswani" / name).read_bytes()
        assert repo.blob_path(tree[name]).read_bytes() == installed_code, f"{name} differs from the installed one"

    card = repo.blob_path(tree["README.md"]).read_text(encoding="utf-8")
    config = json.loads((model_dir / "config.json").read_text())
    results = json.loads((model_dir / "results.json").read_text())
    assert card.startswith("---\n") and "{{" not in card, card[:3000]
    assert "# vaswani-wheel\n" in card and "Multi30k, test2016 (flickr)" in card, card[:3000]
    rows = {
        "N (encoder, decoder layers)": f"{config['encoder_layers']}, {config['decoder_layers']}",
        "d_model": config["d_model"],
        "d_ff": config["d_ff"],
        "h (heads)": config["num_heads"],
        "shared BPE vocabulary": config["vocab_size"],
    }
    for row, value in rows.items():
        assert f"| {row} | {value} |" in card, f"the card's model table does not give {row} = {value}:\n{card}"
    assert f"trained for {flag('--max_steps')} steps" in card, card
    scores = {result.metric_name: result.metric_value for result in ModelCard(card).data.eval_results}
    expected = {
        "sacreBLEU": round(results["test"]["sacrebleu"], 2),
        "tokenized BLEU (compound split, as in the paper)": round(results["test"]["tokenized_bleu"], 2),
        "chrF2": round(results["test"]["chrf"], 2),
        "TER": round(results["test"]["ter"], 2),
    }
    assert scores == expected, f"the card's model-index: {scores}, results.json: {results['test']}"
