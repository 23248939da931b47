"""Translates a file (or standard input) with a checkpoint, one output line per input line.

vaswani-translate runs/small/averaged --input sentences.en --output sentences.de
echo "A man rides a bike." | vaswani-translate runs/small/averaged
vaswani-translate runs/small/ct2 --input sentences.en       # a vaswani-export-ctranslate2 folder, run by CTranslate2

Input is UTF-8 text, one sentence a line, split on "\\n" only as training data is. Refused before any sentence is
translated: bad counts, an --output that cannot be written (or is the input), a model folder that does not exist or
whose weights are damaged, input that is empty, not UTF-8 or binary, an empty line, and a sentence longer than
--max_input_tokens.
"""

import argparse
import io
import sys

from ..evaluation.translate import InputError, input_token_limit, translate, write_lines
from ..outputs import atomic_text
from ..runtime import apply_process_settings
from ..serving.engines import ENGINES, load_translator
from .arguments import check_output_path, positive_int, read_input
from .shell import command


def parse_arguments(argv=None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="checkpoint folder or Hub id (with its tokenizer), or an exported folder")
    parser.add_argument("--input", help="text file, one sentence a line (default: standard input)")
    parser.add_argument("--output", help="where to write the translations (default: standard output)")
    parser.add_argument("--batch_size", type=positive_int, default=64, help="sentences per batch")
    parser.add_argument("--num_beams", type=positive_int, help="beam size (default: the checkpoint's, 4)")
    parser.add_argument("--no_paper_decoding", action="store_true", help="transformers' own length penalty and limit")
    parser.add_argument("--max_new_tokens", type=positive_int, help="the output length limit (lowers the paper's)")
    parser.add_argument(
        "--max_input_tokens",
        type=positive_int,
        help="refuse longer sentences, in tokens with </s> (default: the model's max_position_embeddings)",
    )
    parser.add_argument(
        "--engine", choices=ENGINES, help="run with PyTorch or CTranslate2 (default: by what the model folder holds)"
    )
    parser.add_argument("--revision", help="a Hub branch, tag or commit")
    parser.add_argument("--trust_remote_code", action="store_true", help="load the model's code from the checkpoint")
    return parser, parser.parse_args(argv)


@command("vaswani-translate")
def main(argv=None):
    apply_process_settings()  # the toolkit's settings for this process (toolkit/runtime.py)
    _, arguments = parse_arguments(argv)
    if arguments.output:
        check_output_path(arguments.output, [arguments.input])
    model, tokenizer = load_translator(
        arguments.model,
        revision=arguments.revision,
        trust_remote_code=arguments.trust_remote_code,
        engine=arguments.engine,
    )
    limit = input_token_limit(model, arguments.max_input_tokens)
    sentences = read_input(arguments.input)  # after the model: standard input is read once, and may wait
    generate_kwargs = {k: v for k in ("num_beams", "max_new_tokens") if (v := getattr(arguments, k)) is not None}
    try:
        translations = translate(
            model,
            tokenizer,
            sentences,
            batch_size=arguments.batch_size,
            paper_decoding=not arguments.no_paper_decoding,
            max_input_tokens=limit,
            **generate_kwargs,
        )
    except InputError as error:
        raise InputError(f"{arguments.input or 'standard input'}, one sentence a line: {error}") from None
    write(translations, arguments.output)


def write(translations: list[str], output: str | None) -> None:
    """To `output` (atomically: an earlier file stays whole until the new one is complete), else to standard output,
    in UTF-8 as the input is read, whatever the locale (whose codec could fail on a word once all the work is done)."""
    if output:
        with atomic_text(output) as target:
            write_lines(translations, target)
        return
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(encoding="utf-8")
    write_lines(translations, sys.stdout)


if __name__ == "__main__":  # python -m modeling_vaswani.toolkit.cli.translate, as under accelerate launch -m
    main()
