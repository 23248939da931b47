"""Scores given translations with a checkpoint: the log-probability of each target line as the translation of its
source line, one output line per pair (fairseq's --score-reference, marian-scorer).

vaswani-score runs/small/averaged --source test.en --target test.de > scores.tsv
vaswani-score runs/small/averaged --source test.en --target test.de --per_token
vaswani-score runs/small/ct2 --source test.en --target test.de   # an exported folder, scored by CTranslate2

Each output line: log P(Y|X) (natural logarithm, the sum over the target's tokens, </s> included), a tab, and that
sum over the number of tokens; with --per_token, a tab and each token's log-probability, then a tab and the tokens as
the model reads them, both space-separated. The perplexity of the whole target file goes to standard error. No length
penalty enters: these are the model's probabilities (n-best lists from vaswani-translate give the same log P).
Refused before any pair is scored: files of different line counts, an empty line, a sentence longer than
--max_input_tokens, an --output that cannot be written (or is an input).
"""

import argparse
import sys

from ..outputs import atomic_text
from ..texts import write_lines
from ..threads import scoring_sample
from ..translation.engines import load_ensemble
from ..translation.scoring import perplexity, score
from ..translation.translate import InputError, input_token_limit
from .arguments import (
    add_batch_arguments,
    add_model_arguments,
    add_models_argument,
    add_threads_argument,
    check_models,
    check_output_path,
    chosen_threads,
    read_input,
    utf8_stdout,
)
from .shell import command


def parse_arguments(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_models_argument(parser, "score as an ensemble, as vaswani-translate decodes with them")
    parser.add_argument("--source", required=True, help="source sentences, one a line")
    parser.add_argument("--target", required=True, help="their translations to score, one a line")
    parser.add_argument("--output", help="where to write the scores (default: standard output)")
    parser.add_argument("--per_token", action="store_true", help="also each token's log-probability and the tokens")
    add_batch_arguments(parser, "pairs", "tokens (of the longer side)")
    add_model_arguments(parser)
    add_threads_argument(parser)
    return parser.parse_args(argv)


def format_score(sentence, per_token: bool) -> str:
    columns = [f"{sentence.total:.4f}", f"{sentence.mean:.4f}"]
    if per_token:
        columns += [" ".join(f"{p:.4f}" for p in sentence.log_probs), " ".join(sentence.tokens)]
    return "\t".join(columns)


@command("vaswani-score")
def main(argv=None):
    arguments = parse_arguments(argv)
    if arguments.output:
        check_output_path(arguments.output, [arguments.source, arguments.target])
    sources, targets = read_input(arguments.source), read_input(arguments.target)
    if len(sources) != len(targets):
        raise ValueError(
            f"--source {arguments.source} has {len(sources)} lines but --target {arguments.target} has "
            f"{len(targets)}; expected one translation a source line"
        )
    check_models(arguments.model, arguments.revision)  # each model found before the first loads
    model, tokenizer, others = load_ensemble(
        arguments.model, arguments.revision, arguments.trust_remote_code, arguments.engine
    )  # fmt: skip
    limit = input_token_limit(model, arguments.max_input_tokens)
    try:
        with chosen_threads("vaswani-score", scoring_sample(model), arguments.threads, "scoring"):
            scores = score(
                model, tokenizer, sources, targets, arguments.batch_size, arguments.max_tokens, limit, ensemble=others
            )
    except InputError as error:
        raise InputError(f"{arguments.source} and {arguments.target}, one sentence a line: {error}") from None
    lines = [format_score(sentence, arguments.per_token) for sentence in scores]
    if arguments.output:
        with atomic_text(arguments.output) as target:
            write_lines(lines, target)
    else:
        write_lines(lines, utf8_stdout())
    tokens = sum(len(sentence.log_probs) for sentence in scores)
    print(f"{len(scores)} sentences, {tokens} target tokens, perplexity {perplexity(scores):.3f}", file=sys.stderr)


if __name__ == "__main__":  # python -m modeling_vaswani.toolkit.cli.score
    main()
