"""The figures and examples the training pages and --help show, held to their sources: the main job's measured runs
(modeling_vaswani/toolkit/training/measurements.json, which the plan reads) to docs/results.md, so that neither
drifts from the other without a failing test."""

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
MEASURED = json.loads((REPO / "modeling_vaswani/toolkit/training/measurements.json").read_text(encoding="utf-8"))
RESULTS = (REPO / "docs/results.md").read_text(encoding="utf-8")


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
