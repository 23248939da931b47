"""The figures and examples the training pages and --help show, held to their sources: the main job's measured runs
(modeling_vaswani/toolkit/training/measurements.json, which the plan reads) to docs/results.md; docs/training.md's
plan line to what the plan prints, its step budget and the preset's figures to the code; --help's flags, texts and
example to the commands, the example run. A figure or example that goes stale fails here."""

import json
import re
import shlex
from pathlib import Path

import pytest
from helpers.training_setup import run_command

from modeling_vaswani.toolkit.cli import train, train_tokenizer
from modeling_vaswani.toolkit.training.budget import Plan, fit_schedule
from modeling_vaswani.toolkit.training.presets import PRESETS

REPO = Path(__file__).resolve().parents[3]
MEASURED = json.loads((REPO / "modeling_vaswani/toolkit/training/measurements.json").read_text(encoding="utf-8"))
RESULTS = (REPO / "docs/results.md").read_text(encoding="utf-8")
TRAINING = (REPO / "docs/training.md").read_text(encoding="utf-8")
SMALL = PRESETS["small"]["training"]


def table_rows(page: str, heading: str) -> list[list[str]]:
    """The cells of each row of the first table under `## heading` (its header and rule left out)."""
    section = page.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    first = section.splitlines().index(lines[0])
    table = []
    for line in section.splitlines()[first:]:
        if not line.startswith("|"):
            break
        table.append([cell.strip() for cell in line.strip("|").split("|")])
    return table[2:]


def flat(text: str) -> str:
    return " ".join(text.split())


def bold(score: float) -> str:
    return f"**{score:.2f}**"


def test_the_busy_machine_table_shows_exactly_the_planned_runs_the_plan_expects():
    shown = {(row[0].split(" (")[0].split(",")[0], row[2], row[5]) for row in table_rows(RESULTS, "On a busy machine")}
    measured = {(run["run"], f"{run['steps']:,}", bold(run["sacrebleu"])) for run in MEASURED["planned"]}
    assert shown == measured


def test_the_main_job_table_shows_the_planned_runs_and_the_step_budget_as_measured():
    rows = table_rows(RESULTS, "The main job, English-German")
    for run in [*MEASURED["planned"], MEASURED["step_budget"]]:
        found = [row for row in rows if row[0].startswith(run["date"]) and row[3] == f"{run['steps']:,}"]
        assert [row[5] for row in found] == [bold(run["sacrebleu"])], (run, found)
    budget = MEASURED["step_budget"]
    (row,) = [row for row in rows if f"--max_steps {budget['steps']} --max_train_minutes 0" in row[0]]
    assert row[5] == bold(budget["sacrebleu"])


def test_the_run_cut_by_the_clock_is_told_as_measured():
    cut = MEASURED["cut_by_the_clock"]
    told = f"stopped at {cut['steps']} steps of {cut['planned_steps']:,} while still warming up and scored "
    assert f"{told}{cut['sacrebleu']} (issue {cut['issue']})" in flat(RESULTS)


def test_the_plan_line_in_training_md_is_what_the_plan_prints_for_its_inputs():
    """The page's inputs: 0.6 s a step on 2 threads (0.9 s on one), 10 s an evaluation, 80 s of measuring, the main
    job's 27 minutes and the small preset's schedule as the reference."""
    assert "a step in 0.6 s on 2 threads (0.9 s on one) and an evaluation in 10 s, with\n80 s of measuring" in TRAINING
    reference = {name: SMALL[name] for name in ("max_steps", "warmup_steps", "save_steps", "eval_steps")}
    average = SMALL["average_last_checkpoints"]
    schedule = fit_schedule(60 * SMALL["max_train_minutes"] - 80, 0.6, 10.0, reference, average)
    plan = Plan(0.6, 10.0, 80.0, *schedule, 2, True, (1, 0.9), main_job=True)
    (shown,) = re.findall(r"```text\n(plan: .*?)```", TRAINING, re.DOTALL)
    assert flat(shown) == "plan: " + plan.describe(SMALL["max_train_minutes"], average)


def test_the_step_budget_in_training_md_is_the_one_measured_and_the_one_the_warning_advises():
    budget = MEASURED["step_budget"]
    suggested = set(re.findall(r"--max_steps (\d+) --max_train_minutes 0", TRAINING))
    assert suggested == {str(budget["steps"])}
    assert f"0\nsets no time limit: {budget['sacrebleu']} on test2016" in TRAINING
    warning = Plan(3.9, 30.0, 50.0, 340, 57, 20, 68, 1).shortfall()
    assert f"--max_steps {budget['steps']} --max_train_minutes 0" in warning


def test_the_presets_figures_in_training_md_are_the_presets():
    text = flat(TRAINING)
    assert f"`--max_train_minutes {SMALL['max_train_minutes']}`, with `--max_steps {SMALL['max_steps']}`" in text
    assert f"as many steps as fit, at most {SMALL['max_steps']:,}" in text
    assert f"evaluates on {SMALL['max_validation_samples']} validation sentences" in text
    assert f"the last {SMALL['average_last_checkpoints']} checkpoints averaged" in text
    assert f"at most the preset's {SMALL['save_steps']} steps apart" in text
    assert "every 500 steps" not in text, "the plan spaces the evaluations, not the preset"


def help_text(module, flag: str, monkeypatch, capsys) -> str:
    monkeypatch.setenv("COLUMNS", "1000")  # one line a flag
    code, out, _ = run_command(module, [flag], capsys)
    assert code == 0
    return out


def flags_of(text: str) -> list[str]:
    return re.findall(r"^  (--[a-z_]+)", text, re.MULTILINE)


def flag_help(text: str, flag: str) -> str:
    """What `text`, a --help, says of `flag`: its entry, on one line."""
    (entry,) = [entry for entry in re.split(r"\n(?=  -)", text) if entry.split()[0].rstrip(",") == flag]
    return flat(entry.split("\n\n")[0])


def test_train_help_lists_the_projects_flags_first_and_help_all_every_flag(monkeypatch, capsys):
    short, full = (help_text(train, flag, monkeypatch, capsys) for flag in ("--help", "--help_all"))
    listed = flags_of(short)
    assert listed[:2] == ["--help_all", "--preset"], "the model's flags first"
    assert {"--max_tokens", "--max_train_minutes", "--plan_time_budget", "--max_steps", "--output_dir"} <= set(listed)
    assert "--per_device_train_batch_size" not in listed and "--per_device_train_batch_size" in flags_of(full)
    assert set(listed) - {"--help_all"} < set(flags_of(full)), "every flag --help shows, --help_all shows"
    assert len(short.splitlines()) < len(full.splitlines()) / 2
    for text in (short, full):
        told = flag_help(text, "--no_plan_time_budget")
        assert told.endswith("the same as --plan_time_budget false"), told
        minutes = flag_help(text, "--max_train_minutes")
        assert "fitted into this many minutes" in minutes and "the schedule is the same" not in minutes


def tokenizer_example(monkeypatch, capsys) -> list[str]:
    """The arguments of the example vaswani-train-tokenizer --help shows."""
    text = help_text(train_tokenizer, "--help", monkeypatch, capsys)
    (example,) = re.findall(r"^ +(vaswani-train-tokenizer .*?)(?:\n\n)", text.replace("\\\n", ""), re.M | re.S)
    return shlex.split(example)[1:]


def test_every_file_of_the_train_tokenizer_help_example_is_in_the_checkout(monkeypatch, capsys):
    argv = tokenizer_example(monkeypatch, capsys)
    files = argv[argv.index("--files") + 1 : argv.index("--vocab_size")]
    assert files and all((REPO / file).is_file() for file in files), files


@pytest.mark.slow  # 5 s on 2 busy cores (2026-11-27): a vocabulary of 8,000 trained on 58,000 sentences
def test_the_train_tokenizer_help_example_runs_in_a_checkout(monkeypatch, capsys, tmp_path):
    """The example as it is written, its output folder a scratch one, run from the checkout's root."""
    argv = tokenizer_example(monkeypatch, capsys)
    argv[argv.index("--output_dir") + 1] = str(tmp_path / "tokenizer")
    monkeypatch.chdir(REPO)
    code, out, err = run_command(train_tokenizer, argv, capsys)
    assert code == 0, err
    assert f"saved tokenizer to {tmp_path / 'tokenizer'} (vocabulary size 8000)" in out
