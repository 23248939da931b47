"""A real tokenizer and a tiny model on a slice of the shipped Multi30k, for the training and Hub tests."""

import atexit
import functools
import json
import shutil
import socket
import sys
import tempfile
from pathlib import Path

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from modeling_vaswani import VaswaniForConditionalGeneration
from modeling_vaswani.toolkit.data.corpora import load_multi30k, multi30k_files, read_sentences
from modeling_vaswani.toolkit.data.tokenization import tokenize_pairs
from modeling_vaswani.toolkit.data.tokenizer import train_tokenizer
from modeling_vaswani.toolkit.training.presets import preset_config
from modeling_vaswani.toolkit.training.trainer import VaswaniTrainer, VaswaniTrainingArguments

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"


def command(name: str) -> list[str]:
    """A vaswani-* command as a subprocess runs it: `python -m modeling_vaswani.toolkit.cli.<name>`, the module the
    installed console script calls (the wheel test runs the console scripts themselves)."""
    return [sys.executable, "-m", f"modeling_vaswani.toolkit.cli.{name}"]


def run_command(module, argv, capsys) -> tuple[int, str, str]:
    """A command's `main(argv)` run in this process (quicker than a subprocess): its exit status, stdout and stderr."""
    try:
        module.main([str(argument) for argument in argv])
        code = 0
    except SystemExit as exit:
        code = exit.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


TINY = {"d_model": 32, "d_ff": 64, "num_heads": 4, "encoder_layers": 2, "decoder_layers": 2}


# The checkpoints below are built once per process for each set of arguments and copied to each caller, who may
# change its copy: dozens of test modules ask for the same few. Building is deterministic (a fixed seed), so a rebuild
# would give the same files; each copy also leaves torch's random state as building it left, as when every caller
# built its own.
BUILT = Path(tempfile.mkdtemp(prefix="vaswani-tests-built-"))
atexit.register(shutil.rmtree, BUILT, ignore_errors=True)


def copied(built: tuple[Path, torch.Tensor], folder: Path) -> Path:
    source, random_state = built
    shutil.copytree(source, folder, dirs_exist_ok=True)
    torch.set_rng_state(random_state)
    return folder


def tiny_checkpoint(folder: Path, seed: int = 0, lines: int = 2000, languages=("en", "de")) -> Path:
    """A BPE tokenizer trained on the first `lines` Multi30k pairs and an untrained tiny model, saved together."""
    return copied(built_tiny_checkpoint(seed, lines, tuple(languages)), folder)


@functools.cache
def built_tiny_checkpoint(seed: int, lines: int, languages: tuple[str, ...]) -> tuple[Path, torch.Tensor]:
    folder = save_tiny_checkpoint(BUILT / f"tiny-{seed}-{lines}-{'-'.join(languages)}", seed, lines, languages)
    return folder, torch.get_rng_state()


def save_tiny_checkpoint(folder: Path, seed: int, lines: int, languages: tuple[str, ...]) -> Path:
    folder.mkdir()
    texts = []
    for language, path in multi30k_files("train", languages=languages).items():
        text = folder / f"corpus.{language}"
        text.write_text("\n".join(read_sentences(path)[:lines]) + "\n", encoding="utf-8")
        texts.append(text)
    tokenizer = train_tokenizer(texts, vocab_size=400)
    for text in texts:
        text.unlink()
    tokenizer.save_pretrained(folder)
    torch.manual_seed(seed)
    model = VaswaniForConditionalGeneration(preset_config("small", tokenizer, **TINY))
    model.save_pretrained(folder)
    return folder


# What `trained_tiny_checkpoint` learns by heart: a served model whose translations are known in advance.
TINY_PAIRS = [
    ("A man rides a bike.", "Ein Mann fährt Fahrrad."),
    ("Two dogs play in the snow.", "Zwei Hunde spielen im Schnee."),
    ("A girl sings.", "Ein Mädchen singt."),
]


def trained_tiny_checkpoint(folder: Path, steps: int = 150, seed: int = 0) -> Path:
    """`tiny_checkpoint` trained on TINY_PAIRS until it translates them as written (a few seconds: Adam at 3e-3 on
    the one batch they make, not the paper's recipe)."""
    return copied(built_trained_tiny_checkpoint(steps, seed), folder)


@functools.cache
def built_trained_tiny_checkpoint(steps: int, seed: int) -> tuple[Path, torch.Tensor]:
    # Built afresh, not copied: training's dropout draws from the random state that seeding the model left.
    folder = save_tiny_checkpoint(BUILT / f"trained-{steps}-{seed}", seed, 2000, ("en", "de"))
    model = VaswaniForConditionalGeneration.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    sources, targets = zip(*TINY_PAIRS, strict=True)
    batch = tokenizer(list(sources), text_target=list(targets), padding=True, return_tensors="pt")
    batch["labels"][batch["labels"] == tokenizer.pad_token_id] = -100  # padding is no target
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
    model.train()
    for _ in range(steps):
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.save_pretrained(folder)
    return folder, torch.get_rng_state()


# A results.json as vaswani-train writes it, for a base model scored on the paper's test set.
RESULTS = {
    "train": {"step": 100000, "train_loss": 3.9},
    "test": {
        "sacrebleu": 26.6049,
        "signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0",
        "tokenized_bleu": 27.3151,
        "tokenized_bleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a+compound-split|smooth:none|version:2.6.0",
        "chrf": 57.3149,
        "chrf_signature": "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0",
        "ter": 61.2037,
        "ter_signature": "nrefs:1|case:lc|tok:tercom|norm:no|punct:yes|asian:no|version:2.6.0",
    },
    "test_set": {
        "dataset_id": "wmt14",
        "dataset_config": "de-en",
        "dataset_split": "test",
        "dataset_name": "WMT14 English-German, newstest2014",
        "source_lang": "en",
        "target_lang": "de",
    },
}


def checkpoint_with_results(folder: Path, seed: int = 0) -> Path:
    """`tiny_checkpoint` with the RESULTS above as its results.json, ready to be pushed."""
    tiny_checkpoint(folder, seed=seed)
    (folder / "results.json").write_text(json.dumps(RESULTS))
    return folder


def tokenized_slice(tokenizer, count: int, split: str = "train"):
    return tokenize_pairs(load_multi30k(split).select(range(count)), tokenizer, "en", "de")


def budgeted_trainer(checkpoint, output_dir, examples: int, model=None, callbacks=(), **settings) -> VaswaniTrainer:
    """A VaswaniTrainer of the tiny checkpoint (or `model`, of its vocabulary) on `examples` pairs, in batches of 200
    tokens, on the CPU without reports, with `settings`: the planned runs of the budget, re-planning and size tests."""
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    defaults = dict(output_dir=str(output_dir), report_to=[], use_cpu=True, disable_tqdm=True, seed=0, max_tokens=200)
    return VaswaniTrainer(
        model=model or AutoModelForSeq2SeqLM.from_pretrained(checkpoint),
        args=VaswaniTrainingArguments(**{**defaults, **settings}),
        processing_class=tokenizer, train_dataset=tokenized_slice(tokenizer, examples), callbacks=list(callbacks),
    )  # fmt: skip


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, for a rendezvous of training processes."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
