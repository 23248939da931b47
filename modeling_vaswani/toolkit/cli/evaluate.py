"""Scores a checkpoint with BLEU: translates a source file with the paper's decoding and compares with references.

    vaswani-evaluate runs/small/averaged                  # the shipped Multi30k test2016, En->De
    vaswani-evaluate runs/en-fr/averaged --target_lang fr # the same test set, En->Fr
    vaswani-evaluate MODEL --source newstest2014.en --reference newstest2014.de
    vaswani-evaluate runs/small/ct2                       # a vaswani-export-ctranslate2 folder, run by CTranslate2

Prints sacreBLEU with its signature (the number to report), tokenized BLEU with compound splitting (the paper's
way, for comparison with its table), chrF2 and TER with their signatures, then all of it as one JSON line. Files are
read as training data is (UTF-8, split on "\\n" only, no empty line), and each line is translated whole, as the one
sentence its reference is aligned with (no sentence splitting, unlike vaswani-translate); everything is checked before
the first sentence is translated, --output and the sentences' lengths included.
"""

import argparse
import json
import sys

from ..data.corpora import MULTI30K_LANGUAGES, multi30k_files, read_sentences
from ..evaluation.metrics import translation_scores
from ..outputs import atomic_text
from ..texts import write_lines
from ..threads import decoding_sample
from ..translation.collapse import collapse_warning
from ..translation.engines import load_translator
from ..translation.request import TranslationRequest, translate_request
from ..translation.translate import InputError, input_token_limit
from .arguments import (
    add_batch_arguments,
    add_model_arguments,
    add_threads_argument,
    check_output_path,
    chosen_threads,
)
from .shell import command


def parse_arguments(argv=None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="checkpoint folder or Hub id (with its tokenizer), or an exported folder")
    parser.add_argument("--source", help="source sentences (default: Multi30k test2016 in --source_lang)")
    parser.add_argument("--reference", help="reference translations (default: Multi30k test2016 in --target_lang)")
    parser.add_argument("--source_lang", default="en", choices=MULTI30K_LANGUAGES, help="of the shipped test set")
    parser.add_argument("--target_lang", default="de", choices=MULTI30K_LANGUAGES, help="of the shipped test set")
    add_batch_arguments(parser)
    add_model_arguments(parser, from_hub=False)
    add_threads_argument(parser)
    parser.add_argument("--output", help="also write the translations here")
    arguments = parser.parse_args(argv)
    if bool(arguments.source) != bool(arguments.reference):
        parser.error("give --source and --reference together")
    if arguments.source_lang == arguments.target_lang:
        parser.error(f"--source_lang and --target_lang are both {arguments.source_lang!r}; expected two languages")
    return parser, arguments


@command("vaswani-evaluate")
def main(argv=None):
    _, arguments = parse_arguments(argv)
    if arguments.source:
        source, reference = arguments.source, arguments.reference
    else:
        test = multi30k_files("test", languages=(arguments.source_lang, arguments.target_lang))
        source, reference = test[arguments.source_lang], test[arguments.target_lang]
    if arguments.output:
        check_output_path(arguments.output, [source, reference])
    sources, references = read_sentences(source), read_sentences(reference)
    if len(sources) != len(references):
        raise ValueError(
            f"{source} has {len(sources)} sentences but {reference} has {len(references)}; "
            "expected one reference per source sentence"
        )
    model, tokenizer = load_translator(arguments.model, engine=arguments.engine)
    request = TranslationRequest(
        texts=sources, batch_size=arguments.batch_size, max_tokens=arguments.max_tokens,
        max_input_tokens=input_token_limit(model, arguments.max_input_tokens),
        split_sentences=False,  # a test set is sentence-aligned with its references: each line one sentence
    )  # fmt: skip
    try:
        with chosen_threads("vaswani-evaluate", decoding_sample(model), arguments.threads, "decoding"):
            hypotheses = translate_request(model, tokenizer, request)
    except InputError as error:
        raise InputError(f"{source}, one sentence a line: {error}") from None
    if arguments.output:
        with atomic_text(arguments.output) as handle:
            write_lines(hypotheses, handle)
    scores = translation_scores(hypotheses, references)
    print(f"sacreBLEU {scores['sacrebleu']:.2f} ({scores['signature']})")
    print(f"tokenized BLEU {scores['tokenized_bleu']:.2f} ({scores['tokenized_bleu_signature']})")
    print(f"chrF2 {scores['chrf']:.2f} ({scores['chrf_signature']})")
    print(f"TER {scores['ter']:.2f} ({scores['ter_signature']})")
    print(json.dumps(scores))
    warning = collapse_warning(sources, hypotheses)
    if warning:
        print(f"vaswani-evaluate: warning: {warning}", file=sys.stderr)


if __name__ == "__main__":  # python -m modeling_vaswani.toolkit.cli.evaluate, as under accelerate launch -m
    main()
