"""benchmarks/benchmark.py and its library benchmarks/speed/ on tiny shapes: the Marian and CTranslate2 copies hold
our weights (the Marian map itself: test_convert_marian.py; our own export's exactness: test_export_ctranslate2.py),
each phase returns well-formed numbers, generation makes exactly N tokens, processes start as the commands do or,
with --plain, as a user's program that sets nothing, the CLI refuses bad input.

No timing is asserted: speed is what the benchmark shows, not what a unit test can check on a shared machine.
"""

import dataclasses
import json
import runpy
import subprocess
import sys

import pytest
import torch
from helpers.tiny_models import EOS, padded_batch, tiny_model
from helpers.training_setup import REPO
from speed import measure, models, phases, report, runner
from torch.utils.flop_counter import FlopCounterMode
from transformers import MarianMTModel

from modeling_vaswani import VaswaniForConditionalGeneration
from modeling_vaswani.toolkit.interop.marian_export import to_marian

# runs the benchmark's worker processes; tiny models on one thread (tests/conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

SCRIPT = REPO / "benchmarks" / "benchmark.py"
TINY = models.Shapes(
    vocab_size=61, d_model=32, layers=2, heads=4, d_ff=64, batch=3, source_length=5, target_length=4, new_tokens=6
)
ONCE = measure.Repetitions(
    warmup=dict.fromkeys(measure.FULL.warmup, 0), timed=dict.fromkeys(measure.FULL.timed, 1), rounds=1
)
needs_ctranslate2 = pytest.mark.skipif(
    models.ctranslate2_unavailable("cpu") is not None, reason="ctranslate2 is not installed"
)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    with_ctranslate2 = models.ctranslate2_unavailable("cpu") is None
    return models.prepare_models(TINY, tmp_path_factory.mktemp("models"), seed=0, with_ctranslate2=with_ctranslate2)


@pytest.fixture(scope="module")
def script_main():
    return runpy.run_path(str(SCRIPT))["main"]


def with_our_epsilon(marian, model):
    """The Marian copy with the one difference that is not a weight removed: our LayerNorm epsilon (Marian's is fixed
    at 1e-5). What is left to differ is the weights, which is what the tests check."""
    for module in marian.modules():
        if isinstance(module, torch.nn.LayerNorm):
            module.eps = model.config.layer_norm_eps
    return marian


def test_the_marian_folder_holds_our_model(folders):
    model = VaswaniForConditionalGeneration.from_pretrained(folders["vaswani"]).eval()
    marian = with_our_epsilon(MarianMTModel.from_pretrained(folders["marian"]).eval(), model)
    input_ids, attention_mask = padded_batch([7, 4, 6], seed=1)
    decoder_input_ids, decoder_attention_mask = padded_batch([5, 3, 5], seed=2)
    inputs = dict(
        input_ids=input_ids,
        attention_mask=attention_mask,
        decoder_input_ids=decoder_input_ids,
        decoder_attention_mask=decoder_attention_mask,
    )
    with torch.no_grad():
        ours, theirs = model(**inputs).logits, marian(**inputs).logits
    assert ours.abs().max() > 0.1  # logits of random weights, not near zero: other weights would show
    torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("beams", [1, 4])
def test_marian_copy_runs_the_same_search(beams):
    model = tiny_model(seed=3, dropout=0.0)
    marian = with_our_epsilon(to_marian(model), model)
    ours, theirs = (phases.generation_call(m, TINY, "cpu", "float32", batch=3, beams=beams)() for m in (model, marian))
    assert torch.equal(ours, theirs)


@needs_ctranslate2
def test_ctranslate2_conversion_holds_the_marian_weights(folders):
    """CTranslate2's scores of a target equal the Marian copy's, started like CTranslate2 from a zero embedding."""
    import ctranslate2
    from transformers import MarianMTModel

    marian = MarianMTModel.from_pretrained(folders["marian"]).eval()
    translator = ctranslate2.Translator(str(folders["ctranslate2"]), compute_type="float32", intra_threads=1)
    names = json.loads((folders["ctranslate2"] / "shared_vocabulary.json").read_text())
    assert len(names) == TINY.vocab_size and names[EOS] == "</s>"
    source = models.token_batch(2, 6, TINY.vocab_size, EOS, seed=5)
    target = models.token_batch(2, 4, TINY.vocab_size, EOS, seed=6)
    scored = translator.score_batch(
        [[names[i] for i in row] for row in source.tolist()], [[names[i] for i in row[:-1]] for row in target.tolist()]
    )
    embeddings = marian.get_input_embeddings()(target)
    decoder_inputs_embeds = torch.cat([torch.zeros_like(embeddings[:, :1]), embeddings[:, :-1]], dim=1)
    with torch.no_grad():
        logits = marian(input_ids=source, decoder_inputs_embeds=decoder_inputs_embeds).logits
    expected = logits.log_softmax(-1).gather(-1, target[..., None])[..., 0]
    actual = torch.tensor([result.log_probs for result in scored])  # the target's tokens, then </s>
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def eos_first(module, inputs, logits):
    """A forward hook making </s> the likeliest next token everywhere."""
    logits = logits.clone()
    logits[..., EOS] += 100.0
    return logits


def test_generation_makes_exactly_n_tokens_even_when_eos_is_likeliest():
    model = tiny_model(seed=7)
    model.lm_head.register_forward_hook(eos_first)
    input_ids, attention_mask = padded_batch([5, 5, 5], seed=8)
    plain = model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=1, max_new_tokens=6)
    assert plain.shape[1] == 2  # the start token, then </s>
    for beams in (1, 4):
        generate = phases.generation_call(model, TINY, "cpu", "float32", batch=3, beams=beams)
        new = generate()
        assert new.shape == (3, TINY.new_tokens) and not (new == EOS).any()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])  # bfloat16: the code path of the GPU measurements
@pytest.mark.parametrize("phase", phases.PHASES)
@pytest.mark.parametrize("implementation", models.IMPLEMENTATIONS)
def test_each_phase_returns_well_formed_numbers(folders, implementation, phase, dtype):
    if reason := runner.skipped_reason(implementation, phase, "cpu", dtype):
        pytest.skip(reason)
    spec = dict(
        implementation=implementation,
        phase=phase,
        device="cpu",
        dtype=dtype,
        threads=1,
        shapes=dataclasses.asdict(TINY),
        folder=str(folders[implementation]),
        warmup=1,
        repetitions=2,
    )
    result = phases.run_phase(spec)
    assert len(result["times_s"]) == 2 and all(t > 0 for t in result["times_s"])
    assert result["median_s"] > 0
    key = "ms_per_sentence" if phase == "latency" else "tokens_per_s"
    assert result[key] > 0
    assert result["peak_memory_mib"] is None or isinstance(result["peak_memory_mib"], float)
    json.dumps(result)


def test_training_flops_are_what_the_flop_counter_counts():
    model = VaswaniForConditionalGeneration(models.vaswani_config(TINY)).train()
    model.set_attn_implementation("eager")  # the counter does not see the CPU kernel of sdpa
    source = models.token_batch(TINY.batch, TINY.source_length, TINY.vocab_size, EOS, seed=1)
    labels = models.token_batch(TINY.batch, TINY.target_length, TINY.vocab_size, EOS, seed=2)
    # Nor does it see oneDNN's linear, so torch's own products are counted.
    with FlopCounterMode(display=False) as counter, torch.backends.mkldnn.flags(enabled=False):
        model(input_ids=source, labels=labels).loss.backward()
    assert counter.get_total_flops() == measure.training_flops(TINY)


PEAK_PROGRAM = """
import sys, torch
sys.path.insert(0, sys.argv[1])
from speed.measure import PeakMemory
memory = PeakMemory("cpu").start()
block = torch.ones(16 * 2**20)  # 64 MiB of float32, written
print(memory.peak_mib(), memory.peak_mib(whole=True))
"""


def test_peak_memory_sees_an_allocation():
    # In a fresh process: this one's heap may hold freed memory (the commands' keep_freed_memory(), run in-process by
    # other tests, keeps it), from which the block would come without growing the resident set.
    output = subprocess.run(
        [sys.executable, "-c", PEAK_PROGRAM, str(SCRIPT.parent)], capture_output=True, text=True, check=True
    ).stdout.split()
    if output != ["None", "None"]:  # Linux only
        added, whole = map(float, output)
        assert added >= 60
        assert whole >= added + 100  # the whole resident set: the interpreter and torch were there before the block


def test_the_run_end_to_end_in_worker_processes(default_run):
    """The orchestration through real `--worker` processes: the ceiling, one phase, the table and the JSON
    (CTranslate2's phases are run in this process above)."""
    lines, measured = default_run
    assert len(lines) == 1 + 3 and lines[-1].startswith("[3/3] marian latency: ")
    json.dumps(measured)
    assert measured["ceiling"]["float32"]["gflops"] > 0
    table = report.format_table(measured)
    assert "latency (batch 1)" in table and "ms/sentence" in table
    assert "generation (per-step cost at fixed length)" in table
    ours, theirs = (measured["results"][name]["latency"]["ms_per_sentence"] for name in ("vaswani", "marian"))
    assert ours > 0 and theirs > 0
    assert measured["ratios"] == {"vaswani/marian": {"latency": pytest.approx(ours / theirs)}}
    header = next(line for line in table.splitlines() if line.startswith("phase"))
    assert header.split() == ["phase", "unit", "vaswani", "marian", "vaswani/marian"]


@needs_ctranslate2
def test_our_exports_hold_our_model(folders):
    """Both exports are of the model the other implementations hold: the float32 one scores a target as our model
    does; the int8 one stores 8-bit matrices, so a smaller model.bin."""
    import ctranslate2

    model = VaswaniForConditionalGeneration.from_pretrained(folders["vaswani"]).eval()
    translator = ctranslate2.Translator(str(folders["vaswani-ct2"]), compute_type="float32", intra_threads=1)
    names = json.loads((folders["vaswani-ct2"] / "shared_vocabulary.json").read_text())
    source = models.token_batch(2, 6, TINY.vocab_size, EOS, seed=5)
    target = models.token_batch(2, 4, TINY.vocab_size, EOS, seed=6)
    scored = translator.score_batch(
        [[names[i] for i in row] for row in source.tolist()], [[names[i] for i in row[:-1]] for row in target.tolist()]
    )
    with torch.no_grad():
        logits = model(input_ids=source, labels=target).logits
    expected = logits.log_softmax(-1).gather(-1, target[..., None])[..., 0]
    torch.testing.assert_close(torch.tensor([result.log_probs for result in scored]), expected, atol=1e-4, rtol=0)
    sizes = {name: (folders[name] / "model.bin").stat().st_size for name in ("vaswani-ct2", "vaswani-ct2-int8")}
    # The products' matrices in 8 bits; norms, biases and the position table stay float32, and at these tiny
    # shapes they are a third of the file.
    assert sizes["vaswani-ct2-int8"] < 0.7 * sizes["vaswani-ct2"]


def latency_run(plain: bool = False) -> tuple[list[str], dict]:
    """Both implementations' latency and the ceiling, each in its own `--worker` process, as `benchmark.py` starts
    them (--plain or not): the progress lines and the measurements."""
    lines = []
    measured = runner.run_benchmark(
        SCRIPT, repetitions=ONCE, implementations=["vaswani", "marian"], phases=["latency"], shapes=TINY,
        threads=1, plain=plain, progress=lines.append,
    )  # fmt: skip
    return lines, measured


@pytest.fixture(scope="module")
def default_run(one_thread):
    """`latency_run()` as a user starts it (not --plain, VASWANI_KEEP_FREED_MEMORY unset), once for the module: the
    end-to-end test and the memory-settings test read the same run."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("VASWANI_KEEP_FREED_MEMORY", raising=False)
        return latency_run()


def memory_settings(measured: dict) -> tuple[dict, str]:
    """Whether each implementation's process kept the memory it frees, and the table's line that says what the
    processes ran with."""
    kept = {name: measured["results"][name]["latency"]["keeps_freed_memory"] for name in ("vaswani", "marian")}
    return kept, report.format_table(measured).splitlines()[4]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc settings; Linux only")
def test_processes_start_as_the_commands_do_and_plain_ones_set_nothing(default_run, monkeypatch):
    """Without --plain every process, MarianMT's too, applies what the vaswani-* commands apply (runtime.py's
    apply_process_settings()); --plain: nothing, what a user's own program gets without keep_freed_memory(), ours as
    MarianMT, since the model sets nothing in the process."""
    kept, line = memory_settings(default_run[1])
    assert kept == {"vaswani": True, "marian": True}
    assert line.startswith("every process keeps the memory it frees, as the vaswani-* commands'")
    monkeypatch.delenv("VASWANI_KEEP_FREED_MEMORY", raising=False)
    kept, line = memory_settings(latency_run(plain=True)[1])
    assert kept == {"vaswani": False, "marian": False}
    assert line.startswith("plain processes: what a user's own program gets without calling keep_freed_memory()")


def test_the_environment_opts_the_processes_out_as_it_does_the_commands(monkeypatch):
    monkeypatch.setenv("VASWANI_KEEP_FREED_MEMORY", "0")
    kept, line = memory_settings(latency_run()[1])
    assert kept == {"vaswani": False, "marian": False}
    assert line.endswith("did not apply in 2 of 2 measurements: opted out, or no glibc")


def latency_result(ms: float, peak_mib: float) -> dict:
    return {"times_s": [ms / 1000], "median_s": ms / 1000, "ms_per_sentence": ms, "peak_memory_mib": peak_mib}


def test_rounds_give_median_figures_and_the_median_of_each_rounds_own_ratio():
    """Three rounds on a machine whose speed drifts: each figure is the median over the rounds, and each ratio the
    median of the ratios within the rounds (ours and the peer measured under the same load), which here differs
    from the ratio of the medians (210 / 150 = 1.4)."""
    ours, theirs, ceiling_rates = [100.0, 210.0, 400.0], [90.0, 150.0, 300.0], [3.0, 1.0, 2.0]
    rounds = [
        {
            "ceiling": {"float32": {"dtype": "float32", "size": 8, "rates": {"torch.matmul": rate}, "gflops": rate}},
            "vaswani": {"latency": latency_result(ms, peak_mib=10 + number)},
            "marian": {"latency": latency_result(peer_ms, peak_mib=5)},
        }
        for number, (ms, peer_ms, rate) in enumerate(zip(ours, theirs, ceiling_rates, strict=True))
    ]
    measured = report.build_report(rounds, TINY, "cpu", "float32", 1, dataclasses.replace(ONCE, rounds=3))
    latency = measured["results"]["vaswani"]["latency"]
    assert latency["ms_per_sentence"] == 210.0 and latency["median_s"] == 0.21
    assert latency["peak_memory_mib"] == 12  # the largest peak of the rounds
    assert [result["ms_per_sentence"] for result in latency["rounds"]] == ours
    assert measured["results"]["marian"]["latency"]["ms_per_sentence"] == 150.0
    assert measured["ceiling"]["float32"]["gflops"] == 2.0
    assert measured["ratios"] == {"vaswani/marian": {"latency": pytest.approx(400 / 300)}}  # of 1.11, 1.4, 1.33
    assert "the median over 3 rounds" in report.format_table(measured)


def test_a_round_that_failed_is_reported_as_failed():
    failed = {"error": "worker ran out of memory"}
    assert report.combine([latency_result(100.0, 1), failed, latency_result(90.0, 1)]) == failed
    assert report.combine([{"skipped": "CTranslate2 is an inference engine"}] * 2) == {
        "skipped": "CTranslate2 is an inference engine"
    }


def test_help_lists_the_options(script_main, capsys):
    with pytest.raises(SystemExit) as exit_info:
        script_main(["--help"])
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    options = ("--quick", "--json", "--device", "--dtype", "--implementations", "--phases", "--threads", "--rounds")
    options += ("--model", "--batch")
    for option in options:
        assert option in help_text
    assert "--worker" not in help_text


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--device", "tpu"], "unknown device 'tpu': expected cpu, cuda or cuda:N"),
        (["--device", "meta"], "unsupported device 'meta'"),
        (["--dtype", "float64"], "unknown dtype 'float64': expected one of float32, bfloat16, float16"),
        (["--phases", "inference"], "invalid choice: 'inference'"),
        (["--threads", "0"], "--threads must be >= 1"),
        (["--rounds", "0"], "--rounds must be >= 1, got 0"),
        (["--model", "huge"], "invalid choice: 'huge'"),
        (["--batch", "0"], "--batch must be >= 1, got 0"),
    ],
)
def test_bad_arguments_are_refused_with_the_reason(script_main, capsys, arguments, message):
    with pytest.raises(SystemExit) as exit_info:
        script_main(arguments)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_is_refused(script_main, capsys):
    with pytest.raises(SystemExit):
        script_main(["--device", "cuda", "--dtype", "bfloat16"])
    assert "CUDA is not available" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("model", "d_model", "heads", "d_ff"),
    [("base", 512, 8, 2048), ("big", 1024, 16, 4096)],  # Table 3 of the paper
)
def test_model_shapes_are_table_3s(model, d_model, heads, d_ff):
    shapes = models.model_shapes(model, batch=384)
    assert (shapes.d_model, shapes.heads, shapes.d_ff, shapes.layers) == (d_model, heads, d_ff, 6)
    assert (shapes.batch, shapes.vocab_size) == (384, 32000)


def test_model_shapes_refuse_an_unknown_model_or_an_empty_batch():
    with pytest.raises(ValueError, match="unknown model 'huge': expected one of base, big"):
        models.model_shapes("huge")
    with pytest.raises(ValueError, match="batch must be at least 1, got 0"):
        models.model_shapes("base", batch=0)


def test_the_script_measures_the_model_and_batch_asked_for(script_main, monkeypatch):
    asked = {}

    def record(*args, **kwargs):
        asked.update(kwargs)
        raise SystemExit(0)

    monkeypatch.setattr(runner, "run_benchmark", record)
    with pytest.raises(SystemExit):
        script_main(["--model", "big", "--batch", "7", "--phases", "training"])
    assert asked["shapes"] == models.model_shapes("big", 7) and asked["phases"] == ["training"]
    with pytest.raises(SystemExit):
        script_main([])
    assert asked["shapes"] == models.Shapes()  # the comparison's shapes: base, batch 32


@needs_ctranslate2
def test_ctranslate2_is_skipped_in_a_dtype_it_cannot_compute_in():
    import ctranslate2

    supported = ctranslate2.get_supported_compute_types("cpu")
    assert runner.skipped_reason("ctranslate2", "greedy", "cpu", "float32") is None
    unsupported = [dtype for dtype in measure.DTYPES if dtype not in supported]
    if not unsupported:
        pytest.skip(f"this CPU's CTranslate2 computes in every dtype ({', '.join(sorted(supported))})")
    reason = runner.skipped_reason("ctranslate2", "greedy", "cpu", unsupported[0])
    assert reason == f"CTranslate2 does not compute in {unsupported[0]} on this cpu"
