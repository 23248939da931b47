"""How the training job's data preparation grows with the corpus: time and peak memory per stage, for N pairs.

    python benchmarks/data_scale.py --pairs 100000 1000000 4500000 --json data_scale.json
    python benchmarks/data_scale.py --pairs 100000 --format parquet     # a Hub-style folder, through --dataset_name

No download: each corpus is made from the shipped Multi30k by joining randomly drawn pairs two by two (about 25 words a
side, as WMT news sentences are), written as users hold their data: plain text pairs, or a folder of parquet shards
with a `translation` column, as `wmt14` is published. Each N then runs in a fresh process, stage by stage as
`vaswani-train` runs them, calling the same library functions: loading and validation, the shared BPE vocabulary
(37000 tokens by default), tokenization with the length filter, the token-budget sampler, and the first optimizer
steps of Table 3's base model. Each stage reports its wall time and the peak resident memory of the process while it
ran (the kernel's high-water mark, reset at the stage's start: speed.measure.PeakMemory); the growth exponent of a
stage is the slope of log(time) against log(N).
"""

import argparse
import gzip
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from speed.measure import PeakMemory
from speed.report import cell, machine

LANGUAGES = ("en", "de")
STAGES = ("load", "tokenizer", "tokenize", "filter", "sampler", "steps")
MAX_LENGTH = 256  # tokens a side, kept by the length filter (the synthetic pairs are far shorter)


def multi30k_pairs() -> list[tuple[str, str]]:
    from modeling_vaswani.toolkit.data.corpora import MULTI30K_DIR

    sides = []
    for language in LANGUAGES:
        with gzip.open(MULTI30K_DIR / f"train.{language}.gz", "rt", encoding="utf-8") as stream:
            sides.append(stream.read().splitlines())
    return list(zip(*sides, strict=True))


def synthetic_pairs(count: int, seed: int = 0):
    """`count` pairs, each two Multi30k pairs joined side by side, drawn at random."""
    pairs, rng = multi30k_pairs(), random.Random(seed)
    for _ in range(count):
        (en1, de1), (en2, de2) = rng.choice(pairs), rng.choice(pairs)
        yield f"{en1} {en2}", f"{de1} {de2}"


def write_corpus(count: int, folder: Path, form: str, shard_pairs: int = 500_000) -> Path:
    """The corpus as text pairs (folder/train.en, folder/train.de) or parquet shards (folder/data/train-*.parquet)."""
    folder.mkdir(parents=True, exist_ok=True)
    if form == "text":
        with (
            open(folder / "train.en", "w", encoding="utf-8") as en,
            open(folder / "train.de", "w", encoding="utf-8") as de,
        ):
            for source, target in synthetic_pairs(count):
                en.write(source + "\n")
                de.write(target + "\n")
        return folder
    import pyarrow as pa
    import pyarrow.parquet as pq

    shards = math.ceil(count / shard_pairs)
    (folder / "data").mkdir(exist_ok=True)
    pairs = synthetic_pairs(count)
    for shard in range(shards):
        rows = [
            {"en": s, "de": t} for s, t in (next(pairs) for _ in range(min(shard_pairs, count - shard * shard_pairs)))
        ]
        table = pa.table({"translation": rows})
        pq.write_table(table, folder / "data" / f"train-{shard:05d}-of-{shards:05d}.parquet")
    return folder


def run_stages(
    corpus: Path, form: str, vocab_size: int, steps: int, max_tokens: int, model: str, num_proc: int | None
) -> dict:
    """The job's preparation and first steps, stage by stage, in this process. Returns seconds and peak MiB each."""
    from modeling_vaswani.toolkit.data.batching import TokenBudgetBatchSampler
    from modeling_vaswani.toolkit.data.tokenization import filter_by_length, tokenize_pairs
    from modeling_vaswani.toolkit.training.presets import preset_config
    from modeling_vaswani.toolkit.training.recipe import DataArguments, ModelArguments, load_data, prepare_tokenizer
    from modeling_vaswani.toolkit.training.trainer import VaswaniTrainer, VaswaniTrainingArguments

    results, state = {}, {}

    def stage(name, work):
        start = time.perf_counter()
        memory = PeakMemory("cpu").start()
        state[name] = work()
        results[name] = {"seconds": time.perf_counter() - start, "peak_mib": memory.peak_mib(whole=True)}

    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        if form == "text":
            data_args = DataArguments(
                train_source_file=str(corpus / "train.en"), train_target_file=str(corpus / "train.de")
            )
        else:
            data_args = DataArguments(dataset_name=str(corpus))
        stage("load", lambda: load_data(data_args)["train"])
        model_args = ModelArguments(preset=model, vocab_size=vocab_size)
        stage("tokenizer", lambda: prepare_tokenizer(model_args, state["load"], "en", "de", scratch))
        stage("tokenize", lambda: tokenize_pairs(state["load"], state["tokenizer"], "en", "de", num_proc=num_proc))
        # The job's tokenize_pairs(max_length=...) runs this same filter after tokenizing; timed on its own here.
        stage("filter", lambda: filter_by_length(state["tokenize"], MAX_LENGTH, num_proc, "train"))
        stage("sampler", lambda: len(TokenBudgetBatchSampler.from_dataset(state["filter"], max_tokens)))

        def first_steps():
            from modeling_vaswani import VaswaniForConditionalGeneration

            args = VaswaniTrainingArguments(
                output_dir=str(scratch / "run"), max_steps=steps, max_tokens=max_tokens, save_strategy="no",
                average_last_checkpoints=0, report_to=[], use_cpu=True, disable_tqdm=True, eval_strategy="no",
            )  # fmt: skip
            config = preset_config(model, state["tokenizer"])
            trainer = VaswaniTrainer(
                model=VaswaniForConditionalGeneration(config), args=args, train_dataset=state["filter"],
                processing_class=state["tokenizer"],
            )  # fmt: skip
            return trainer.train().global_step

        stage("steps", first_steps)
    results["pairs_kept"] = len(state["filter"])
    results["batches"] = state["sampler"]
    return results


def run_worker(spec: dict, cache: Path) -> dict:
    """`run_stages` in a process of its own, with `datasets`' cache in `cache` (deleted with the corpora)."""
    command = [sys.executable, __file__, "--worker", json.dumps(spec)]
    environment = {**os.environ, "HF_DATASETS_CACHE": str(cache)}
    process = subprocess.run(command, capture_output=True, text=True, env=environment)
    if process.returncode != 0:
        raise SystemExit(f"N={spec['count']}: the worker failed:\n{process.stderr[-4000:]}")
    return json.loads(process.stdout.strip().splitlines()[-1])


def rerun_job(spec: dict, cache: Path, output_dir: Path) -> float:
    """Seconds that `vaswani-train` itself takes, as a user runs it, to prepare the same corpus again, make its first
    optimizer step and save the model (`--max_steps 1`): the second run of a job whose data is prepared."""
    corpus = Path(spec["corpus"])
    if spec["form"] == "text":
        data = ["--train_source_file", str(corpus / "train.en"), "--train_target_file", str(corpus / "train.de")]
    else:
        data = ["--dataset_name", str(corpus)]
    workers = ["--preprocessing_num_workers", str(spec["num_proc"])] if spec["num_proc"] else []
    command = [
        shutil.which("vaswani-train") or "vaswani-train", *data, *workers, "--preset", spec["model"],
        "--vocab_size", str(spec["vocab_size"]), "--max_length", str(MAX_LENGTH), "--max_tokens",
        str(spec["max_tokens"]), "--max_steps", "1", "--eval_strategy", "no", "--save_strategy", "no",
        "--average_last_checkpoints", "0", "--report_to", "none", "--output_dir", str(output_dir),
    ]  # fmt: skip
    start = time.perf_counter()
    process = subprocess.run(
        command, capture_output=True, text=True, env={**os.environ, "HF_DATASETS_CACHE": str(cache)}
    )
    if process.returncode != 0:
        raise SystemExit(f"N={spec['count']}: vaswani-train failed:\n{process.stderr[-4000:]}")
    if "tokenizer: reusing" not in process.stderr:
        raise SystemExit(
            f"N={spec['count']}: vaswani-train trained a new tokenizer instead of reusing the prepared one"
        )
    return time.perf_counter() - start


def growth_exponents(runs: dict[int, dict]) -> dict[str, float | None]:
    """Least-squares slope of log(seconds) against log(N) for each stage (None with fewer than two sizes)."""
    sizes = sorted(runs)
    exponents = {}
    for name in STAGES:
        if len(sizes) < 2:
            exponents[name] = None
            continue
        xs = [math.log(n) for n in sizes]
        ys = [math.log(max(runs[n][name]["seconds"], 1e-6)) for n in sizes]
        mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
        covariance = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
        exponents[name] = covariance / sum((x - mean_x) ** 2 for x in xs)
    return exponents


def format_table(runs: dict[int, dict], exponents: dict, reruns: dict[int, dict]) -> str:
    sizes = sorted(runs)
    lines = [f"{'stage':<10}" + "".join(f"{f'N={n:,}':>26}" for n in sizes) + f"{'exponent':>10}"]
    for name in STAGES:
        # The peak is None where Linux's high-water mark is not to be had (macOS, Windows).
        cells = "".join(
            f"{runs[n][name]['seconds']:>13.1f} s {cell(runs[n][name]['peak_mib'], 0):>7} MiB" for n in sizes
        )
        exponent = exponents[name]
        lines.append(f"{name:<10}{cells}{'-' if exponent is None else f'{exponent:.2f}':>10}")
    prepared = "".join(f"{sum(runs[n][name]['seconds'] for name in STAGES[:-1]):>15.1f} s{'':>10}" for n in sizes)
    lines.append(f"{'prepared':<10}{prepared}")
    lines.append(f"{'again':<10}" + "".join(f"{reruns[n]:>15.1f} s{'':>10}" for n in sizes))
    lines.append("(prepared: loading through the sampler; again: `vaswani-train --max_steps 1` on the same data)")
    return "\n".join(lines)


def parse_arguments(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, nargs="+", default=[100_000, 1_000_000, 4_500_000], help="corpus sizes")
    parser.add_argument("--format", choices=("text", "parquet"), default="text", help="how the corpus is held")
    parser.add_argument("--vocab_size", type=int, default=37000, help="the shared BPE vocabulary (Section 5.1)")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps timed at the end")
    parser.add_argument("--max_tokens", type=int, default=1000, help="token budget of a batch (small on a CPU)")
    parser.add_argument("--model", default="base", help="the preset trained: base (Table 3), or small")
    parser.add_argument("--num_proc", type=int, help="tokenizing processes (the job's --preprocessing_num_workers)")
    parser.add_argument("--workdir", type=Path, help="where the corpora are written (default: a temporary folder)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # one size, in a process of its own
    arguments = parser.parse_args(argv)
    if min(arguments.pairs) < 1:
        parser.error(f"--pairs must be positive, got {arguments.pairs}")
    return arguments


def main(argv=None) -> None:
    arguments = parse_arguments(argv)
    if arguments.worker:
        spec = json.loads(arguments.worker)
        print(
            json.dumps(
                run_stages(Path(spec["corpus"]), **{k: v for k, v in spec.items() if k not in ("corpus", "count")})
            )
        )
        return
    with tempfile.TemporaryDirectory(dir=arguments.workdir) as workdir:
        runs, reruns = {}, {}
        for count in arguments.pairs:
            corpus = write_corpus(count, Path(workdir) / f"{arguments.format}-{count}", arguments.format)
            spec = {
                "corpus": str(corpus), "count": count, "form": arguments.format, "vocab_size": arguments.vocab_size,
                "steps": arguments.steps, "max_tokens": arguments.max_tokens, "model": arguments.model,
                "num_proc": arguments.num_proc,
            }  # fmt: skip
            cache = Path(workdir) / f"cache-{count}"
            runs[count] = run_worker(spec, cache)
            print(f"N={count:,}: " + ", ".join(f"{s} {runs[count][s]['seconds']:.1f} s" for s in STAGES), flush=True)
            # The job again on the same data: it should find what the first run prepared in the cache.
            reruns[count] = rerun_job(spec, cache, Path(workdir) / f"run-{count}")
            print(f"N={count:,}, again: vaswani-train --max_steps 1 took {reruns[count]:.1f} s")
            shutil.rmtree(cache)
            shutil.rmtree(corpus)
    exponents = growth_exponents(runs)
    facts = machine()
    print(f"{facts['cpu']} ({facts['cpu_count']} cores; {' '.join(facts['cpu_flags'])}), {arguments.format}")
    print(format_table(runs, exponents, reruns))
    if arguments.json:
        report = {"runs": runs, "reruns": reruns, "exponents": exponents, "machine": machine()}
        arguments.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
