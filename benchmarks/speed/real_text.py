"""The real-text benchmark's library (its command: benchmarks/real_text.py): a trained model translating real test
sets, each engine the way a user runs it, in one run.

Engines, all on the same trained weights:
- `pytorch-paper`: our model through the library's `translate` (what vaswani-translate runs), generate() with
  `paper_decoding=True`, Section 6.1's search (the package's own loop, generation_vaswani.paper_search and
  search_vaswani.beam_search);
- `pytorch-stock`: the same, generate() without it: transformers' own greedy and beam search;
- `marian`: transformers' MarianMTModel holding our weights (vaswani-export-marian's `to_marian`), its stock
  generate();
- `ct2-float32`, `ct2-int8`: our CTranslate2 export (vaswani-export-ctranslate2) run by the ctranslate2 engine,
  under the paper's decoding as far as CTranslate2 expresses it (serving.ctranslate2.CTranslate2Model);
- `ct2-float32-stock`: the float32 export with CTranslate2's own beam search and ranking, as its users call it;
- `ort-float32`, `ort-int8`: our ONNX export (vaswani-export-onnx, with --quantize int8) run by the onnxruntime
  engine, the payload's own Section 6.1 search over onnxruntime's decoder steps (translation.onnxruntime).

Each engine, decoding (beam 4 or greedy), batching (sentences a batch, or a budget of padded source tokens) and test
set runs in a process of its own (the command started again with `--worker`): the model is loaded and one small
batch translated untimed, then the whole set is translated from text to text, timed (tokenizing, decoding, batching
by length, detokenizing). Reported: sentences/s, target tokens/s (the translations re-tokenized by our tokenizer, the
same count for every engine), sacreBLEU and chrF2 (a faster engine must not translate worse unseen), the sentences
whose translation differs from pytorch-paper's, and ratios of pytorch-paper to each engine.

Layouts: `lines`, the test set one sentence a line, each line translated whole (as vaswani-evaluate reads a test
set); `paragraphs`, the same sentences joined PARAGRAPH at a time into one line each, split into sentences again
and translated as vaswani-translate translates a document (issue 42). Sentences/s counts the test set's sentences in
both, and every row also gives sacreBLEU against the references joined the same way (a line layout's translations
joined PARAGRAPH at a time), so that the two layouts compare on one reference. With `full_stops`, a sentence that
ends without ".", "!" or "?" (17 of test2016's first 300 captions) gets a full stop in every layout: joined as it
was written, no splitter can find where it ends.
"""

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from .report import machine
from .runner import run_worker

DATA = Path(__file__).resolve().parent.parent / "data"
TEST_SETS = ("test2016", "newstest2013")
ENGINES = ("pytorch-paper", "pytorch-stock", "marian", "ct2-float32", "ct2-float32-stock", "ct2-int8")
ENGINES += ("ort-float32", "ort-int8")
CTRANSLATE2_ENGINES = {"ct2-float32": "float32", "ct2-float32-stock": "float32", "ct2-int8": "int8"}
ONNX_ENGINES = {"ort-float32": False, "ort-int8": True}  # whether it runs the int8 variant
DECODINGS = {"beam": 4, "greedy": 1}  # Section 6.1's beam size
BATCHES = ("sentences:1", "sentences:8", "sentences:32", "tokens:2000")
LAYOUTS = ("lines", "paragraphs")
PARAGRAPH = 3  # sentences a paragraph, as issue 42 joined test2016's
REFERENCE = "pytorch-paper"  # what the ratios compare with
WARMUP_SENTENCES = 8


def test_set(name: str, limit: int | None = None) -> tuple[list[str], list[str]]:
    """The first `limit` (all when None) English sentences of a test set and their German references."""
    from modeling_vaswani.toolkit.data.corpora import multi30k_files, read_sentences

    if name == "test2016":
        files = multi30k_files("test")
    elif name == "newstest2013":
        files = {language: DATA / f"newstest2013.{language}.gz" for language in ("en", "de")}
    else:
        raise ValueError(f"unknown test set {name!r}; expected one of {', '.join(TEST_SETS)}")
    return read_sentences(files["en"])[:limit], read_sentences(files["de"])[:limit]


def with_full_stops(sentences: list[str]) -> list[str]:
    """Each sentence that ends without sentence-final punctuation, with a full stop."""
    return [text if text.rstrip().endswith((".", "!", "?")) else f"{text.rstrip()}." for text in sentences]


def paragraphs(sentences: list[str]) -> list[str]:
    """The sentences joined PARAGRAPH at a time, with a space, into one line each."""
    return [" ".join(sentences[start : start + PARAGRAPH]) for start in range(0, len(sentences), PARAGRAPH)]


def check_batch(text: str) -> str:
    """`sentences:N` (N sentences a batch) or `tokens:N` (batches of at most N padded source tokens)."""
    kind, _, number = text.partition(":")
    if kind not in ("sentences", "tokens") or not number.isdigit() or int(number) < 1:
        raise ValueError(f"batch {text!r}; expected sentences:N or tokens:N with N at least 1, e.g. sentences:32")
    return text


# ---------------------------------------------------------------------------------------------------------------------
# The models: the trained checkpoint, its Marian copy and its CTranslate2 exports
# ---------------------------------------------------------------------------------------------------------------------


def train_model(folder: Path, minutes: float, extra_args: list[str] = ()) -> Path:
    """The default job (`vaswani-train`, as a user runs it) for `minutes` of training; its averaged model."""
    executable = shutil.which("vaswani-train", path=Path(sys.executable).parent) or "vaswani-train"
    command = [executable, "--output_dir", str(folder), "--max_train_minutes", str(minutes), *extra_args]
    subprocess.run(command, check=True)
    averaged = folder / "averaged"
    return averaged if averaged.is_dir() else folder


def prepare_engines(model_dir: Path, folder: Path, engines) -> dict[str, str]:
    """The folder each engine loads: the checkpoint itself, its Marian copy, its CTranslate2 and ONNX exports."""
    folders = {engine: str(model_dir) for engine in engines if engine.startswith("pytorch")}
    if "marian" in engines:
        from modeling_vaswani.toolkit.checkpoints import load_model_and_tokenizer
        from modeling_vaswani.toolkit.interop.marian_export import to_marian

        model, _ = load_model_and_tokenizer(str(model_dir))
        to_marian(model).save_pretrained(folder / "marian")
        folders["marian"] = str(folder / "marian")
    exports = {}
    for engine in engines:
        if quantization := CTRANSLATE2_ENGINES.get(engine):
            if quantization not in exports:
                from modeling_vaswani.toolkit.interop.ctranslate2 import export_ctranslate2

                exports[quantization] = str(export_ctranslate2(str(model_dir), folder / f"ct2-{quantization}"))
            folders[engine] = exports[quantization]
    if onnx := [engine for engine in engines if engine in ONNX_ENGINES]:
        from modeling_vaswani.toolkit.interop.onnx import export_onnx

        quantize = "int8" if "ort-int8" in onnx else None
        exported = str(export_onnx(str(model_dir), folder / "onnx", quantize=quantize))
        folders.update(dict.fromkeys(onnx, exported))
    return folders


# ---------------------------------------------------------------------------------------------------------------------
# One measurement, in a worker process
# ---------------------------------------------------------------------------------------------------------------------


def stock_generate(model):
    """transformers' generate() of a model that has no paper decoding (MarianMTModel), behind the part of a model's
    interface that `translate` uses: a PyTorch module, which the translation room's PyTorch engine holds (defined here
    because this module imports torch only in the processes that translate)."""
    import torch

    class StockGenerate(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model, self.config, self.device = model, model.config, model.device

        def generate(self, paper_decoding: bool = False, **kwargs):
            return self.model.generate(**kwargs)

    return StockGenerate()


def load_engine(engine: str, folder: str, model_dir: str, threads: int):
    """The model and tokenizer `translate` runs, as the commands load them."""
    from transformers import AutoTokenizer, MarianMTModel

    from modeling_vaswani.toolkit.translation.engines import load_translator

    if engine in CTRANSLATE2_ENGINES:
        from modeling_vaswani.toolkit.translation.ctranslate2 import CTranslate2Model

        return CTranslate2Model(folder, intra_threads=threads), AutoTokenizer.from_pretrained(folder)
    if engine in ONNX_ENGINES:
        from modeling_vaswani.toolkit.translation.onnxruntime import OnnxRuntimeModel

        engine = OnnxRuntimeModel(folder, quantized=ONNX_ENGINES[engine], threads=threads)
        return engine, AutoTokenizer.from_pretrained(folder)
    if engine == "marian":
        return stock_generate(MarianMTModel.from_pretrained(folder)), AutoTokenizer.from_pretrained(model_dir)
    return load_translator(folder, engine="pytorch")


def generate_settings(engine: str, beams: int, sources_tokens: int, length_penalty: float) -> dict:
    """What each engine's generate() is given. Without the paper's decoding there is one length limit a call: the
    longest source of the set + 50 (Section 6.1's margin), so that no engine stops a translation short."""
    paper = engine in ("pytorch-paper", "ct2-float32", "ct2-int8") and not (engine.startswith("ct2") and beams == 1)
    paper = paper or engine in ONNX_ENGINES  # the payload's search, greedy too
    settings = {"paper_decoding": paper, "num_beams": beams}
    if not paper:
        from modeling_vaswani.search_vaswani import max_output_length  # Section 6.1's rule, its one home

        settings["max_new_tokens"] = max_output_length(sources_tokens)
        if beams > 1 and not engine.startswith("ct2"):
            settings["length_penalty"] = length_penalty  # the checkpoint's alpha, as the paper's decoding uses it
    return settings


def run_job(spec: dict) -> dict:
    """Translates the whole test set once after a warm-up batch; the measurement of one engine, decoding, batching."""
    import torch

    from modeling_vaswani.toolkit.evaluation.metrics import bleu, chrf
    from modeling_vaswani.toolkit.runtime import apply_process_settings
    from modeling_vaswani.toolkit.translation.translate import translate

    apply_process_settings()  # as every vaswani-* command starts
    torch.set_num_threads(spec["threads"])
    model, tokenizer = load_engine(spec["engine"], spec["folder"], spec["model_dir"], spec["threads"])
    sources, references = test_set(spec["test_set"], spec["sentences"])
    if spec.get("full_stops"):
        sources = with_full_stops(sources)
    longest = max(len(ids) for ids in tokenizer(sources)["input_ids"])
    from transformers import GenerationConfig

    alpha = GenerationConfig.from_pretrained(spec["model_dir"]).length_penalty
    settings = generate_settings(spec["engine"], DECODINGS[spec["decoding"]], longest, alpha)
    kind, _, number = spec["batch"].partition(":")
    batching = {"batch_size": int(number)} if kind == "sentences" else {"max_tokens": int(number)}
    lines = spec.get("layout", "lines") == "lines"
    inputs, line_references = (sources, references) if lines else (paragraphs(sources), paragraphs(references))
    run = lambda texts: translate(  # noqa: E731
        model, tokenizer, texts, progress=False, split_sentences=not lines, **batching, **settings
    )
    run(inputs[:WARMUP_SENTENCES])
    start = time.perf_counter()
    translations = run(inputs)
    seconds = time.perf_counter() - start
    tokens = sum(len(ids) for ids in tokenizer(translations, add_special_tokens=False)["input_ids"])
    joined = paragraphs(translations) if lines else translations
    return {
        "seconds": seconds,
        "sentences_per_s": len(sources) / seconds,
        "tokens_per_s": tokens / seconds,
        "target_tokens": tokens,
        "sacrebleu": bleu(translations, line_references)["sacrebleu"],
        "paragraph_sacrebleu": bleu(joined, paragraphs(references))["sacrebleu"],
        "chrf": chrf(translations, line_references)["chrf"],  # sacreBLEU's chrF2, as WMT reports it beside BLEU
        "translations": translations,
    }


def worker_main(spec_json: str, output: str) -> None:
    result = run_job(json.loads(spec_json))
    Path(output).write_text(json.dumps(result))


# ---------------------------------------------------------------------------------------------------------------------
# The run and its report
# ---------------------------------------------------------------------------------------------------------------------


def run_benchmark(
    script: Path,
    model_dir: Path,
    test_sets=TEST_SETS,
    engines=ENGINES,
    decodings=tuple(DECODINGS),
    batches=BATCHES,
    layouts=("lines",),
    full_stops: bool = False,
    sentences: int | None = None,
    threads: int | None = None,
    rounds: int = 1,
    progress: Callable[[str], None] = print,
) -> dict:
    """Every (test set, layout, decoding, batching) group with each engine in turn, in its own process, `rounds`
    times over (figures: medians over the rounds). Engines of a group run one right after another, so that a shared
    machine's drifting load falls on all of them alike."""
    import torch

    threads = threads or torch.get_num_threads()
    engines = [engine for engine in ENGINES if engine in engines]  # the reference first, so others compare with it
    groups = [
        (name, layout, decoding, batch)
        for name in test_sets
        for layout in layouts
        for decoding in decodings
        for batch in batches
    ]
    measured: dict[tuple, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="vaswani-real-text-") as workdir:
        workdir = Path(workdir)
        progress(f"preparing the engines from {model_dir}")
        folders = prepare_engines(model_dir, workdir, engines)
        jobs = [(group, engine) for _ in range(rounds) for group in groups for engine in engines]
        for number, ((name, layout, decoding, batch), engine) in enumerate(jobs, start=1):
            spec = {
                "engine": engine,
                "folder": folders[engine],
                "model_dir": str(model_dir),
                "test_set": name,
                "layout": layout,
                "full_stops": full_stops,
                "decoding": decoding,
                "batch": batch,
                "sentences": sentences,
                "threads": threads,
            }
            result = run_worker(script, spec, workdir)
            measured.setdefault((name, layout, decoding, batch, engine), []).append(result)
            shown = (
                result.get("error")
                or f"{result['sentences_per_s']:.1f} sentences/s, BLEU {result['sacrebleu']:.2f}, "
                f"chrF2 {result['chrf']:.2f}"
            )
            progress(f"[{number}/{len(jobs)}] {name} {layout} {decoding} {batch} {engine}: {shown}")
    report = build_report(measured, groups, engines, threads, model_dir, sentences, rounds)
    return {**report, "full_stops": full_stops}


def median_result(results: list[dict]) -> dict:
    good = [result for result in results if "error" not in result]
    if not good:
        return {"error": results[0]["error"]}
    combined = {key: statistics.median(result[key] for result in good) for key in ("sentences_per_s", "tokens_per_s")}
    first = good[0]  # every round translates alike
    kept = ("sacrebleu", "paragraph_sacrebleu", "chrf", "translations", "target_tokens")
    return {**combined, **{key: first[key] for key in kept}}


def build_report(measured: dict, groups, engines, threads, model_dir, sentences, rounds) -> dict:
    rows = []
    for name, layout, decoding, batch in groups:
        results = {engine: median_result(measured[(name, layout, decoding, batch, engine)]) for engine in engines}
        reference = results.get(REFERENCE, {})
        for engine, result in results.items():
            row = {"test_set": name, "layout": layout, "decoding": decoding, "batch": batch, "engine": engine}
            if "error" in result:
                rows.append({**row, "error": result["error"]})
                continue
            kept = (
                "sentences_per_s", "tokens_per_s", "target_tokens", "sacrebleu", "paragraph_sacrebleu", "chrf",
                "translations",
            )  # fmt: skip
            row.update({key: result[key] for key in kept})
            if "translations" in reference:
                row["paper_speed_ratio"] = reference["sentences_per_s"] / result["sentences_per_s"]
                row["differs_from_paper"] = sum(
                    a != b for a, b in zip(result["translations"], reference["translations"], strict=True)
                )
            rows.append(row)
    return {
        "machine": machine(),
        "threads": threads,
        "model": str(model_dir),
        "sentences": sentences,
        "rounds": rounds,
        "date": time.strftime("%Y-%m-%d"),
        "rows": rows,
    }


def format_table(report: dict) -> str:
    """A Markdown table: one line per measurement, the ratio of pytorch-paper's sentences/s to the engine's."""
    facts = report["machine"]
    lines = [
        f"Real-text translation, {report['date']}: {facts['cpu']}, {', '.join(facts['cpu_flags']) or 'no AVX2'}, "
        f"{report['threads']} threads, torch {facts['torch']}, transformers {facts['transformers']}"
        + (f", ctranslate2 {facts['ctranslate2']}" if "ctranslate2" in facts else "")
        + f"; model {report['model']}; {'all' if report['sentences'] is None else report['sentences']} sentences"
        f" a set{', a full stop ending each' if report.get('full_stops') else ''}; median of {report['rounds']}"
        " round(s).",
        "",
        "| test set | text | decoding | batch | engine | sentences/s | target tokens/s | sacreBLEU "
        f"| sacreBLEU, {PARAGRAPH} a paragraph | chrF2 | paper ÷ engine | differs from paper |",
        "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in report["rows"]:
        head = f"| {row['test_set']} | {row['layout']} | {row['decoding']} | {row['batch']} | {row['engine']} |"
        if "error" in row:
            lines.append(f"{head} failed: {row['error']} | | | | | | |")
            continue
        ratio = f"{row['paper_speed_ratio']:.2f}x" if "paper_speed_ratio" in row else ""
        differs = row.get("differs_from_paper", "")
        lines.append(
            f"{head} {row['sentences_per_s']:.1f} | {row['tokens_per_s']:.0f} | {row['sacrebleu']:.2f} "
            f"| {row['paragraph_sacrebleu']:.2f} | {row['chrf']:.2f} | {ratio} | {differs} |"
        )
    return "\n".join(lines)
