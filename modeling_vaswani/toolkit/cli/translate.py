"""Translates a file (or standard input) with a checkpoint, one output line per input line.

vaswani-translate runs/small/averaged --input sentences.en --output sentences.de
echo "A man rides a bike." | vaswani-translate runs/small/averaged
vaswani-translate runs/small/averaged          # type a sentence: its translation comes back at once
vaswani-translate runs/small/ct2 --input sentences.en       # a vaswani-export-ctranslate2 folder, run by CTranslate2
vaswani-translate runs/a/averaged runs/b/averaged --input sentences.en   # an ensemble of two models

Input is UTF-8 text, one sentence a line, split on "\\n" only as training data is. Refused before any sentence is
translated: bad counts, an --output that cannot be written (or is the input), a model folder that does not exist or
whose weights are damaged, input that is empty, not UTF-8 or binary, an empty line, and a sentence longer than
--max_input_tokens. What can be checked before a model loads is: the --input and --target_prefix files (and standard
input when it is a file) are read, and every model of an ensemble is found, before the first one loads.

From a pipe or a terminal (no --input, --output or --target_prefix), lines are translated as they arrive: those that
came in together as one batch, each answered before more input is read (a bad line ends the run there, every line
before it answered, those that came in with it too). A file given with --input, or redirected with <, is read whole
and batched by length.

--nbest N writes N lines a sentence, best first, Moses style: the sentence's number from 0, its translation and the
score the beam search ranked it by, log P(Y|X) / lp(Y) (natural logarithm; |Y| counts </s>): under the paper's
decoding Section 6.1's lp(Y) = ((5 + |Y|) / 6)^alpha, with --no_paper_decoding transformers' |Y|^alpha. Times lp(Y) it
is the log P(Y|X) vaswani-score gives the same translation.
"""

import argparse
import os
import stat
import sys

from ..data.corpora import iter_arrived_lines, iter_text_lines
from ..evaluation.translate import InputError, input_token_limit, translate, translate_nbest, write_lines
from ..outputs import atomic_text
from ..runtime import apply_process_settings
from ..serving.engines import load_ensemble
from .arguments import (
    add_batch_arguments,
    add_model_arguments,
    check_models,
    check_output_path,
    positive_int,
    read_input,
    utf8_stdout,
)
from .shell import command


def parse_arguments(argv=None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "model",
        nargs="+",
        help="checkpoint folder or Hub id (with its tokenizer), or an exported folder; several checkpoints that share "
        "a tokenizer decode as an ensemble (their log-probabilities averaged at each step)",
    )
    parser.add_argument("--input", help="text file, one sentence a line (default: standard input)")
    parser.add_argument("--output", help="where to write the translations (default: standard output)")
    add_batch_arguments(parser)
    parser.add_argument("--num_beams", type=positive_int, help="beam size (default: the checkpoint's, 4)")
    parser.add_argument(
        "--nbest",
        type=positive_int,
        help="write the N best hypotheses a sentence, Moses style: 'id ||| translation ||| score' (see --help's end)",
    )
    parser.add_argument(
        "--target_prefix",
        help="a file of one prefix a line (empty for none): each translation starts with its line's prefix",
    )
    parser.add_argument("--no_paper_decoding", action="store_true", help="transformers' own length penalty and limit")
    parser.add_argument("--max_new_tokens", type=positive_int, help="the output length limit (lowers the paper's)")
    add_model_arguments(parser)
    arguments = parser.parse_args(argv)
    if len(arguments.model) > 1 and arguments.no_paper_decoding:
        parser.error("an ensemble (several models) decodes with the paper's decoding; drop --no_paper_decoding")
    return parser, arguments


@command("vaswani-translate")
def main(argv=None):
    apply_process_settings()  # the toolkit's settings for this process (toolkit/runtime.py)
    _, arguments = parse_arguments(argv)
    if arguments.output:
        check_output_path(arguments.output, [arguments.input, arguments.target_prefix])
    check_models(arguments.model, arguments.revision)  # a typo in the second model is not found after the first loads
    streaming = arguments.input is None and arguments.output is None and arguments.target_prefix is None
    streaming = streaming and is_stream(0)
    # Before any model loads, what can be read is: the files, and standard input where it is one (a pipe or a
    # terminal is read once the model is there: its lines may take their time to come).
    sentences = read_input(arguments.input) if arguments.input is not None or not is_stream(0) else None
    prefixes = read_prefixes(arguments.target_prefix, None if sentences is None else len(sentences))
    model, tokenizer, others = load_ensemble(
        arguments.model, arguments.revision, arguments.trust_remote_code, arguments.engine
    )  # fmt: skip
    limit = input_token_limit(model, arguments.max_input_tokens)
    generate_kwargs = {k: v for k in ("num_beams", "max_new_tokens") if (v := getattr(arguments, k)) is not None}
    if others:
        generate_kwargs["ensemble"] = others
    settings = {
        "batch_size": arguments.batch_size,
        "max_tokens": arguments.max_tokens,
        "paper_decoding": not arguments.no_paper_decoding,
        "max_input_tokens": limit,
        **generate_kwargs,
    }

    def render(sentences: list[str], first: int = 0, prefixes: list[str] | None = None, progress: bool = True):
        """The output lines for `sentences`, numbered from `first` in n-best lists."""
        if not arguments.nbest:
            return translate(model, tokenizer, sentences, target_prefixes=prefixes, progress=progress, **settings)
        lists = translate_nbest(
            model, tokenizer, sentences, arguments.nbest, target_prefixes=prefixes, progress=progress, **settings
        )
        return [
            f"{first + i} ||| {h.text} ||| {h.score:.4f}" for i, hypotheses in enumerate(lists) for h in hypotheses
        ]

    if streaming:
        stream(render)
        return
    if sentences is None:  # a pipe or a terminal, read whole
        sentences = read_input(None)
        check_prefix_count(arguments.target_prefix, prefixes, len(sentences))
    try:
        lines = render(sentences, prefixes=prefixes)
    except InputError as error:
        raise InputError(f"{arguments.input or 'standard input'}, one sentence a line: {error}") from None
    write(lines, arguments.output)


def is_stream(fd: int) -> bool:
    """Whether `fd` is a pipe, a socket or a terminal (input that arrives over time), not a file read at once."""
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)


def stream(render) -> None:
    """Translates standard input as it arrives (a pipe, a terminal): the lines that have come in, as one batch, are
    written and flushed before more are read. A bad line (not text, empty, over the limits) ends the run with its
    error after every line before it has been answered, those that came in the same read included."""
    output, lines_read = utf8_stdout(), 0
    # A line that is not text: the lines before it in its read come as a group first, then its error.
    for group in iter_arrived_lines(sys.stdin.fileno(), "standard input"):
        answer(render, group, output)
        lines_read = group[-1][0]
    if not lines_read:
        raise ValueError("standard input is empty; expected one sentence per line")


def answer(render, group: list[tuple[int, str]], output) -> None:
    """Writes and flushes the translations of `group`, numbered lines translated as one batch. Where one of them
    cannot be translated (InputError naming its sentence), the lines before it are answered first, then its error
    is raised: no good line goes unanswered because a bad one came in the same read."""
    first = group[0][0]
    try:
        lines = render([text for _, text in group], first=first - 1, progress=False)
    except InputError as error:
        if error.sentence is not None and error.sentence > 1:
            answer(render, group[: error.sentence - 1], output)  # raises in turn for an earlier bad line
        counted = "" if first == 1 else f", counting from line {first}"
        raise InputError(f"standard input, one sentence a line{counted}: {error}") from None
    write_lines(lines, output)
    output.flush()


def read_prefixes(path: str | None, sentences: int | None) -> list[str] | None:
    """The lines of the --target_prefix file, one per input sentence (an empty line: no prefix); their count is
    checked where the number of `sentences` is known."""
    if path is None:
        return None
    prefixes = [text for _, text in iter_text_lines(path)]
    if sentences is not None:
        check_prefix_count(path, prefixes, sentences)
    return prefixes


def check_prefix_count(path: str | None, prefixes: list[str] | None, sentences: int) -> None:
    if prefixes is not None and len(prefixes) != sentences:
        raise ValueError(
            f"--target_prefix {path} has {len(prefixes)} lines; expected {sentences}, one per input sentence (an "
            "empty line for none)"
        )


def write(translations: list[str], output: str | None) -> None:
    """To `output` (atomically: an earlier file stays whole until the new one is complete), else to standard output
    (in UTF-8)."""
    if output:
        with atomic_text(output) as target:
            write_lines(translations, target)
        return
    write_lines(translations, utf8_stdout())


if __name__ == "__main__":  # python -m modeling_vaswani.toolkit.cli.translate, as under accelerate launch -m
    main()
