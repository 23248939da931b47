"""What the commands share: argparse types, and reading their input and checking their output path before any work
starts (input read as training data is: split on "\n" only, UTF-8)."""

import argparse
import io
import math
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import torch

from ..checkpoints import is_ctranslate2_folder, local_folder, validate_checkpoint, validate_export
from ..outputs import check_not_input, check_output_file, resolve_output
from ..texts import iter_stream_lines, iter_text_lines
from ..threads import Threads, at_work_start, command_threads, unmeasured_threads
from ..translation.engines import ENGINES


def positive_int(text: str) -> int:
    """argparse type of the commands' counts (--batch_size, --num_beams, ...)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def finite_float(text: str) -> float:
    """argparse type of the commands' real numbers (vaswani-train's --learning_rate, --max_train_minutes, ...): a
    finite number. "nan", "inf" and numbers too large for a float ("1e400") are usage errors, not values that
    would silently disable a budget or poison every weight."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def finite_floats(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`parser` with `finite_float` as the type of every float flag: HfArgumentParser makes one of each float field
    of a dataclass (vaswani-train's and vaswani-ablate's), typed plain `float`."""
    for action in parser._actions:
        if action.type is float:
            action.type = finite_float
    return parser


def read_input(path: str | Path | None) -> list[str]:
    """The lines of the text file `path` (`.gz` allowed), or of standard input when None, split as training data is,
    one sentence a line. Refuses an empty input (and, through the line reader, bytes that are not UTF-8 text)."""
    name = "standard input" if path is None else str(path)
    numbered = iter_stream_lines(sys.stdin.buffer, name) if path is None else iter_text_lines(path)
    lines = [text for _, text in numbered]
    if not lines:
        raise ValueError(f"{name} is empty; expected one sentence per line")
    return lines


def check_models(names: Sequence[str], revision: str | None = None) -> None:
    """Every model named on the command line found before the first one loads (a folder that exists, or a Hub id),
    and each local folder after the first through the opener's checks (a checkpoint's, or an export's): loading the
    first is no work to throw away for a typo in, or damage to, the second. The first is checked as it loads."""
    folders = [local_folder(name) for name in names]
    if revision is not None and any(folder is not None for folder in folders):
        local = next(name for name, folder in zip(names, folders, strict=True) if folder is not None)
        raise ValueError(f"--revision {revision} applies to Hub ids; {local} is a local folder")
    for folder in folders[1:]:
        if folder is not None and is_ctranslate2_folder(folder):
            validate_export(folder)
        elif folder is not None:
            validate_checkpoint(folder)


def utf8_stdout():
    """Standard output in UTF-8 as the input is read, whatever the locale (whose codec could fail on a word once all
    the work is done)."""
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(encoding="utf-8")
    return sys.stdout


def add_batch_arguments(
    parser: argparse.ArgumentParser, what: str = "sentences", tokens: str = "source tokens"
) -> None:
    """--batch_size and --max_tokens, as translating, evaluating and scoring take them."""
    parser.add_argument(
        "--batch_size", type=positive_int, help=f"{what} per batch (default: 64 unless --max_tokens is given)"
    )
    parser.add_argument(
        "--max_tokens",
        type=positive_int,
        help=f"padded {tokens} per batch, {what} sorted by length (output in input order); with --batch_size, "
        "both limits",
    )


def add_models_argument(parser: argparse.ArgumentParser, together: str) -> None:
    """The positional model(s) of translating and scoring: one or more checkpoints; `together` says what several
    sharing a tokenizer do."""
    parser.add_argument(
        "model",
        nargs="+",
        help="checkpoint folder or Hub id (with its tokenizer), or an exported folder; several checkpoints that share "
        f"a tokenizer {together}",
    )


def add_model_arguments(parser: argparse.ArgumentParser, from_hub: bool = True) -> None:
    """--max_input_tokens and --engine, as translating, evaluating and scoring take them; `from_hub`: also --revision
    and --trust_remote_code."""
    parser.add_argument(
        "--max_input_tokens",
        type=positive_int,
        help="refuse longer sentences, in tokens with </s> (default: the model's max_position_embeddings)",
    )
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        help="run with PyTorch, CTranslate2 or onnxruntime (default: by what the model folder holds)",
    )
    if from_hub:
        parser.add_argument("--revision", help="a Hub branch, tag or commit")
        parser.add_argument(
            "--trust_remote_code", action="store_true", help="load the model's code from the checkpoint"
        )


def add_threads_argument(parser: argparse.ArgumentParser) -> None:
    """--threads, as translating, evaluating, scoring and serving take it (toolkit/threads.py)."""
    parser.add_argument(
        "--threads",
        type=positive_int,
        help="CPU threads torch runs the model on (default: OMP_NUM_THREADS where set, else the faster of one a core "
        "and one, measured on a short sample of the work; a CTranslate2 export runs on CTranslate2's own)",
    )


@contextmanager
def chosen_threads(
    command: str, sample: Callable[[], object] | None, requested: int | None, work: str, measure_now: bool = False
) -> Iterator[Threads | None]:
    """The block's work runs on the thread count `threads.command_threads` chooses (`requested`: --threads; `sample`:
    a short piece of the command's work), said on standard error where it was measured; torch's count is set back
    after the block (a command's main() may run inside a user's process). Yields the count where it is known without
    measuring (--threads, OMP_NUM_THREADS, one thread, no torch model; applied at once), else None: the measuring is
    put off until the block's first batch of real work (`threads.at_work_start`), after every check of the input
    (lengths, phrases, an empty file: those that need the tokenizer come after the model loads), so that a refused
    input costs no measuring and prints no thread message before its error; a block that refuses its input, or has
    nothing to translate, never measures. `measure_now`: measure before the block (a server, which has no input yet).
    """
    before = torch.get_num_threads()
    known = unmeasured_threads(sample, requested)

    def choose() -> Threads:
        threads = known or command_threads(sample, requested)
        if threads.reason == "measured":
            print(f"{command}: {threads.describe(work)}", file=sys.stderr)
        torch.set_num_threads(threads.count)
        return threads

    try:
        if known is not None or measure_now:
            yield choose()
        else:
            with at_work_start(choose):
                yield None
    finally:
        torch.set_num_threads(before)


def check_output_path(path: str | Path, inputs: Iterable[str | Path | None] = (), reads_stdin: bool = False) -> Path:
    """`path` if a file can be written there: its folder exists, can be written and has room for about the inputs'
    size, and it is no folder, nor one of `inputs` or (`reads_stdin`) standard input, which writing it would destroy
    (`outputs.check_not_input`). Checked before any sentence is translated, so that no work is lost at the end."""
    path, target = Path(path), resolve_output(path)
    if target.is_dir():
        raise ValueError(f"--output {path} is a folder; expected the path of a file to write")
    if not target.parent.is_dir():
        raise ValueError(
            f"--output {path}: the folder {target.parent} does not exist; expected a file in an existing folder"
        )
    inputs = list(inputs)
    check_not_input(path, inputs, reads_stdin)
    sizes = [Path(source).stat().st_size for source in inputs if source is not None and Path(source).is_file()]
    check_output_file(path, need_bytes=max(sizes, default=0))  # a translation is about as long as its source
    return path
