"""Translates a file (or standard input) with a checkpoint, one output line per input line.

vaswani-translate runs/small/averaged --input text.en --output text.de
echo "A man rides a bike. Two dogs play." | vaswani-translate runs/small/averaged
vaswani-translate runs/small/averaged          # type a line: its translation comes back at once
vaswani-translate runs/small/ct2 --input text.en           # a vaswani-export-ctranslate2 folder, run by CTranslate2
vaswani-translate runs/a/averaged runs/b/averaged --input text.en        # an ensemble of two models
vaswani-translate runs/small/averaged --input test.en --no_split_sentences   # already one sentence a line

Input is UTF-8 text, split into lines on "\\n" only as training data is. A line may hold a paragraph: it is split
into sentences (sentencex, by the rules of the model's source language: --source_lang, else the one the training run
recorded in results.json or the tokenizer's configuration, else generic rules, said once), the sentences of all lines
are translated in the same batches, and each line's translations are joined with the line's own spacing (indentation,
the spaces and tabs between sentences). One output line per input line, always: an empty or blank line gives an empty
line, and a line break inside a translation (a "\\r" the line or its prefix held, U+2028, any that str.splitlines
knows) is written as a space, with a warning. --no_split_sentences translates each line whole, as one sentence, and
refuses an empty line (input already one sentence a line, such as a test set).

Refused before any sentence is translated: bad counts, an --output that cannot be written (or is the input), a model
folder that does not exist or whose weights are damaged, input that is empty, not UTF-8 or binary, a sentence longer
than --max_input_tokens (named by its line and first words), and with --no_split_sentences an empty line. What can be
checked before a model loads is: the --input and --target_prefix files (and standard input when it is a file) are
read, and every model of an ensemble is found, before the first one loads.

From a pipe or a terminal (no --input, --output or --target_prefix), lines are translated as they arrive: those that
came in together as one batch, each answered before more input is read (a bad line ends the run there, every line
before it answered, those that came in with it too). A file given with --input, or redirected with <, is read whole
and batched by length.

--nbest N writes N lines a sentence, best first, Moses style: the line's number from 0, its translation and the
score the beam search ranked it by, log P(Y|X) / lp(Y) (natural logarithm; |Y| counts </s>): under the paper's
decoding Section 6.1's lp(Y) = ((5 + |Y|) / 6)^alpha, with --no_paper_decoding transformers' |Y|^alpha. Times lp(Y) it
is the log P(Y|X) vaswani-score gives the same translation. An empty line has no hypotheses (no lines with its
number), and a line that splits into several sentences is refused (give --no_split_sentences to translate it whole).
A --target_prefix line starts the translation of its line's first sentence.

--alignments writes each line as Marian's --alignment does: the translation, " ||| " and its word alignment in
Pharaoh format, "i-j" for source word i and target word j, space-separated ("A man rides. ||| 0-0 1-1 2-2"). Words
are the line's and the translation's whitespace-separated words, counted from 0 across a paragraph's sentences (the
input line's words, the output line's words); each target word is linked to the source word the model attends to most
(docs/documents.md#word-alignments). An empty line gives " ||| ", and a sentence translated as nothing links no
words; split an output line at its last " ||| ". It needs a PyTorch checkpoint's attention weights: a CTranslate2
export is refused (give the checkpoint it was exported from), and so is --nbest. With an ensemble, the translation is
the ensemble's and its alignment the first model's attention over it.

--format html translates an HTML document, the default for an --input ending in .html or .htm: the whole input is one
document (a page, or a fragment of one), its block elements' text translated sentence by sentence, written back whole
with its markup; --format xml-inline translates each line as a line with inline tags (<b>, <i>, <a href="...">,
<br/>), one output line per input line, written as well-formed XML; --format text (the default otherwise) reads tags
as text. Tags are put back around the target words the first model's word alignment links to the words they wrapped;
<script>, <style>, <code>, <pre> and translate="no" content is kept as it is; malformed HTML is repaired as lxml
repairs it (docs/documents.md#markup). Markup needs a PyTorch checkpoint's attention weights (a CTranslate2 export is
refused), and goes with none of --nbest, --alignments, --target_prefix, --no_split_sentences.
"""

import argparse
import os
import stat
import sys
from dataclasses import replace

from transformers import AutoTokenizer, GenerationConfig

from ..checkpoints import load_tokenizer, local_folder
from ..data.markup import check_documents, check_markup_text
from ..outputs import atomic_text
from ..texts import iter_arrived_lines, iter_text_lines, write_lines
from ..threads import decoding_sample
from ..translation.alignment import pharaoh
from ..translation.collapse import collapse_warning
from ..translation.engines import engine_for, load_ensemble
from ..translation.request import Spelling, TranslationRequest, translate_request
from ..translation.terminology import Glossary, check_clashes, sentence_terms
from ..translation.translate import (
    InputError,
    input_token_limit,
    source_language,
    split_input,
)
from .arguments import (
    add_batch_arguments,
    add_model_arguments,
    add_models_argument,
    add_threads_argument,
    check_models,
    check_output_path,
    chosen_threads,
    positive_int,
    read_input,
    utf8_stdout,
)
from .shell import command


def parse_arguments(argv=None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_models_argument(parser, "decode as an ensemble (their log-probabilities averaged at each step)")
    parser.add_argument("--input", help="text file, a paragraph or sentence a line (default: standard input)")
    parser.add_argument("--output", help="where to write the translations (default: standard output)")
    add_batch_arguments(parser)
    parser.add_argument("--num_beams", type=positive_int, help="beam size (default: the checkpoint's, 4)")
    parser.add_argument(
        "--nbest",
        type=positive_int,
        help="write the N best hypotheses a sentence, Moses style: 'id ||| translation ||| score' (see --help's end)",
    )
    parser.add_argument(
        "--alignments",
        action="store_true",
        help="write 'translation ||| 0-0 1-2 ...' (Marian's --alignment): source-target word pairs, whitespace-"
        "separated words counted from 0 in the input line and in the translation (see --help's end)",
    )
    parser.add_argument(
        "--target_prefix",
        help="a file of one prefix a line (empty for none): each line's translation starts with its prefix",
    )
    parser.add_argument(
        "--constraints",
        help="a file of one line per input line, its phrases separated by tabs (fairseq's --constraints; an empty "
        "line for none): each line's translation holds each of its phrases (see --help's end)",
    )
    parser.add_argument(
        "--avoid",
        help="a file of one line per input line, its phrases separated by tabs: phrases its translation must not hold",
    )
    parser.add_argument(
        "--glossary",
        help="a file of 'source term<TAB>target term' lines: each sentence holding a source term (whole words, any "
        "case) holds its target term in its translation",
    )
    parser.add_argument(
        "--no_split_sentences",
        action="store_true",
        help="translate each line whole, as one sentence (input already one sentence a line; an empty line refused)",
    )
    parser.add_argument(
        "--source_lang",
        help="the language whose rules split lines into sentences (default: the model's source language, as its "
        "training recorded it; else generic rules)",
    )
    parser.add_argument(
        "--format",
        choices=("text", "html", "xml-inline"),
        help="html: the input is one HTML document; xml-inline: lines with inline tags; text: tags are text "
        "(default: html for an --input ending in .html or .htm, else text; see --help's end)",
    )
    parser.add_argument("--no_paper_decoding", action="store_true", help="transformers' own length penalty and limit")
    parser.add_argument("--max_new_tokens", type=positive_int, help="the output length limit (lowers the paper's)")
    add_model_arguments(parser)
    add_threads_argument(parser)
    arguments = parser.parse_args(argv)
    if arguments.format is None:
        html = (arguments.input or "").lower().endswith((".html", ".htm"))
        arguments.format = "html" if html else "text"
    return parser, arguments


# The request's fields as the command's flags name them (translation/request.py's refusals).
FLAGS = Spelling(flags=True, names={"language": "source_lang", "target_prefixes": "target_prefix"})


def command_request(arguments: argparse.Namespace) -> TranslationRequest:
    """The request the flags make, checked before any text is read (`TranslationRequest.check`): the files of
    phrases stand for their phrases (read with the input, where their line counts are known); the glossary is
    read."""
    glossary = None if arguments.glossary is None else Glossary.read(arguments.glossary)
    return TranslationRequest(
        num_beams=arguments.num_beams, paper_decoding=not arguments.no_paper_decoding, nbest=arguments.nbest,
        max_new_tokens=arguments.max_new_tokens, target_prefixes=arguments.target_prefix,
        constraints=arguments.constraints, avoid=arguments.avoid, glossary=glossary, alignments=arguments.alignments,
        format=arguments.format, split_sentences=not arguments.no_split_sentences, language=arguments.source_lang,
        models=len(arguments.model), batch_size=arguments.batch_size, max_tokens=arguments.max_tokens,
        max_input_tokens=arguments.max_input_tokens,
    )  # fmt: skip


@command("vaswani-translate")
def main(argv=None):
    _, arguments = parse_arguments(argv)
    if arguments.output:
        check_output_path(
            arguments.output,
            [arguments.input, arguments.target_prefix, arguments.constraints, arguments.avoid],
            reads_stdin=arguments.input is None,
        )
    check_models(arguments.model, arguments.revision)  # a typo in the second model is not found after the first loads
    engine = engine_for(local_folder(arguments.model[0]), arguments.engine)
    request = command_request(arguments)
    beams = request.beams_to_hold(lambda: stored_beams(arguments.model[0], arguments.revision))
    request = request.check(engine, beams, arguments.model[0], FLAGS)  # its one check, before anything loads
    per_line = (arguments.target_prefix, arguments.constraints, arguments.avoid)  # files read whole, line by line
    streaming = arguments.input is None and arguments.output is None and all(path is None for path in per_line)
    streaming = streaming and is_stream(0) and arguments.format != "html"  # a document is read whole
    # Before any model loads, what can be read is: the files, and standard input where it is one (a pipe or a
    # terminal is read once the model is there: its lines may take their time to come).
    sentences = read_input(arguments.input) if arguments.input is not None or not is_stream(0) else None
    prefixes = read_prefixes(arguments.target_prefix, None if sentences is None else len(sentences))
    terminology = read_terminology(arguments, request.glossary, None if sentences is None else len(sentences))
    check_terminology_first(arguments, request.language, sentences, terminology)
    if sentences is not None and arguments.format != "text":  # markup.Document's rules, before the model loads
        check_markup_text("\n".join(sentences), arguments.input or "standard input")
        documents = ["\n".join(sentences)] if arguments.format == "html" else sentences
        check_documents(documents, arguments.format, arguments.input or "standard input")
    model, tokenizer, others = load_ensemble(
        arguments.model, arguments.revision, arguments.trust_remote_code, arguments.engine
    )  # fmt: skip
    split = not arguments.no_split_sentences
    language = None
    if split:  # the flag, else what the first model's run recorded (results.json, its tokenizer), else generic rules
        language = source_language(arguments.model[0], tokenizer, request.language, arguments.revision)
    request = replace(
        request, max_input_tokens=input_token_limit(model, arguments.max_input_tokens), language=language
    )
    ensemble = {"ensemble": others} if others else {}

    def render(
        lines: list[str], first: int = 0, prefixes: list[str] | None = None, progress: bool = True, terms=terminology
    ):
        """The output lines for `lines`, the first of them the input's line `first` (from 0): in n-best lists their
        numbers, in errors (with sentence splitting) their line numbers. `terms`: their terminology arguments."""
        asked = replace(
            request, texts=lines, first_line=first + 1, target_prefixes=prefixes, progress=progress, **terms
        )  # fmt: skip
        outputs = translate_request(model, tokenizer, asked, **ensemble)
        if arguments.alignments:
            return [f"{line.text} ||| {pharaoh(line.alignment)}" for line in outputs]
        if arguments.nbest:
            return [
                f"{first + i} ||| {h.text} ||| {h.score:.4f}"
                for i, hypotheses in enumerate(outputs)
                for h in hypotheses
            ]
        return outputs

    sample = decoding_sample(model, arguments.num_beams)
    with chosen_threads("vaswani-translate", sample, arguments.threads, "decoding"):
        if streaming:
            stream(render, split)
            return
        translate_whole(arguments, render, sentences, prefixes, terminology, request.glossary)


def translate_whole(arguments, render, sentences: list[str] | None, prefixes, terminology: dict, glossary) -> None:
    """Translates the whole input (`sentences`, else standard input read now) through `render` and writes it, with
    the warning of a collapsed model (translation/collapse.py) on standard error."""
    split = not arguments.no_split_sentences
    if sentences is None:  # a pipe or a terminal, read whole
        sentences = read_input(None)
        check_prefix_count(arguments.target_prefix, prefixes, len(sentences))
        terminology = read_terminology(arguments, glossary, len(sentences))
    if arguments.format == "html":  # one document, its lines joined back as they were read
        sentences = ["\n".join(sentences)]
    try:
        lines = render(sentences, prefixes=prefixes, terms=terminology)
    except InputError as error:  # with splitting, the error names the line; without, the sentence is the line
        kind = "" if split else ", one sentence a line"
        raise InputError(f"{arguments.input or 'standard input'}{kind}: {error}") from None
    if arguments.format == "html":  # its line breaks are the document's own, not one line a translation
        write_document(lines[0], arguments.output)
        return
    write(lines, arguments.output)
    if not arguments.nbest:  # an n-best list is several translations a line, which may rightly be alike
        warn_if_collapsed(sentences, [line.rsplit(" ||| ", 1)[0] if arguments.alignments else line for line in lines])


def warn_if_collapsed(sources: list[str], translations: list[str]) -> None:
    warning = collapse_warning(sources, translations)
    if warning:
        print(f"vaswani-translate: warning: {warning}", file=sys.stderr)


def is_stream(fd: int) -> bool:
    """Whether `fd` is a pipe, a socket or a terminal (input that arrives over time), not a file read at once."""
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)


def stream(render, split: bool = True) -> None:
    """Translates standard input as it arrives (a pipe, a terminal): the lines that have come in, as one batch, are
    written and flushed before more are read. A bad line (not text, over the limits; with `split` False, empty) ends
    the run with its error after every line before it has been answered, those that came in the same read
    included."""
    output, lines_read, written = utf8_stdout(), 0, 0
    # A line that is not text: the lines before it in its read come as a group first, then its error.
    for group in iter_arrived_lines(sys.stdin.fileno(), "standard input"):
        written += answer(render, group, output, split, written)
        lines_read = group[-1][0]
    if not lines_read:
        raise ValueError("standard input is empty; expected one sentence per line")


def answer(render, group: list[tuple[int, str]], output, split: bool = True, written: int = 0) -> int:
    """Writes and flushes the translations of `group`, numbered lines translated as one batch, after the `written`
    output lines before them, and returns how many lines it wrote. Where one of them cannot be translated
    (InputError whose `sentence` is its place in the group, from 1), the lines before it are answered first, then its
    error is raised: no good line goes unanswered because a bad one came in the same read. With sentence splitting
    the error names the line by its number in the whole input; without, the sentence at fault is counted from the
    group's first line."""
    first = group[0][0]
    try:
        lines = render([text for _, text in group], first=first - 1, progress=False)
    except InputError as error:
        if error.sentence is not None and error.sentence > 1:
            answer(render, group[: error.sentence - 1], output, split, written)  # raises for an earlier bad line
        if split:
            raise InputError(f"standard input: {error}") from None
        counted = "" if first == 1 else f", counting from line {first}"
        raise InputError(f"standard input, one sentence a line{counted}: {error}") from None
    write_lines(lines, output, first=written + 1)
    output.flush()
    return len(lines)


def read_prefixes(path: str | None, sentences: int | None) -> list[str] | None:
    """The lines of the --target_prefix file, one per input line (an empty line: no prefix; a line's prefix starts
    the translation of its first sentence); their count is checked where the number of input lines is known."""
    if path is None:
        return None
    prefixes = [text for _, text in iter_text_lines(path)]
    if sentences is not None:
        check_prefix_count(path, prefixes, sentences)
    return prefixes


def read_terminology(arguments: argparse.Namespace, glossary: Glossary | None, sentences: int | None) -> dict:
    """translate()'s terminology arguments from --constraints and --avoid (one line per input line, phrases
    separated by tabs, fairseq's format) and the --glossary read; the line counts are checked where the input's is
    known."""
    terminology = {}
    for flag in ("constraints", "avoid"):
        path = getattr(arguments, flag)
        if path is not None:
            lines = [text for _, text in iter_text_lines(path)]
            if sentences is not None and len(lines) != sentences:
                raise ValueError(
                    f"--{flag} {path} has {len(lines)} lines; expected {sentences}, one per input line (an empty "
                    "line for none)"
                )
            terminology[flag] = [[phrase for phrase in line.split("\t") if phrase.strip()] for line in lines]
    if glossary is not None:
        terminology["glossary"] = glossary
    return terminology


def check_terminology_first(
    arguments: argparse.Namespace, language: str | None, sentences: list[str] | None, terminology: dict
) -> None:
    """Before any model loads, with the first model's tokenizer alone, what `terminology.sentence_terms` refuses: a
    phrase to avoid inside a phrase to hold of the same line, constraints for a line of several sentences or none;
    named by file and line. Where standard input is a pipe, read once the model is there, only what the files tell
    is checked here (its lines' glossary terms are checked as they are translated)."""
    if not terminology:
        return
    tokenizer = first_tokenizer(arguments)

    def name(field: str, line: int | None) -> str:
        where = f"--{field} {getattr(arguments, field)}"
        return where if line is None else f"{where}, line {line}"

    if sentences is None:
        check_clashes(tokenizer, terminology.get("constraints"), terminology.get("avoid"), None, name)
        return
    layout = None
    if not arguments.no_split_sentences:
        language = source_language(arguments.model[0], tokenizer, language, arguments.revision)
        layout = split_input(sentences, tokenizer, language)
    sentence_terms(
        layout, layout.sentences if layout else sentences, terminology.get("constraints"), terminology.get("avoid"),
        terminology.get("glossary"), tokenizer, name,
    )  # fmt: skip


def stored_beams(name: str, revision: str | None) -> int | None:
    """The beam count the model `name` loads with, from its generation_config.json (a folder's, an export's or the
    Hub's), read before the model loads so that the request's one check holds an n-best list to it; None where it
    has none (the loaded model's defaults then stand, and generate() refuses more sequences than beams)."""
    try:
        return GenerationConfig.from_pretrained(local_folder(name) or name, revision=revision).num_beams
    except OSError:  # no such file, or none that loads: the model's own check names it as it loads
        return None


def first_tokenizer(arguments: argparse.Namespace):
    """The first model's tokenizer, loaded alone: a folder's as its checks load it, a Hub model's from the Hub."""
    folder = local_folder(arguments.model[0])
    if folder is not None:
        return load_tokenizer(folder)
    options = {"revision": arguments.revision, "trust_remote_code": arguments.trust_remote_code}
    return AutoTokenizer.from_pretrained(arguments.model[0], **options)


def check_prefix_count(path: str | None, prefixes: list[str] | None, sentences: int) -> None:
    if prefixes is not None and len(prefixes) != sentences:
        raise ValueError(
            f"--target_prefix {path} has {len(prefixes)} lines; expected {sentences}, one per input line (an empty "
            "line for none)"
        )


def write(translations: list[str], output: str | None) -> None:
    """To `output` (atomically: an earlier file stays whole until the new one is complete), else to standard output
    (in UTF-8)."""
    if output:
        with atomic_text(output) as target:
            write_lines(translations, target)
        return
    write_lines(translations, utf8_stdout())


def write_document(text: str, output: str | None) -> None:
    """`text`, a whole document, and a final line break, to `output` (atomically) else to standard output."""
    if output:
        with atomic_text(output) as target:
            target.write(text + "\n")
        return
    utf8_stdout().write(text + "\n")


if __name__ == "__main__":  # python -m modeling_vaswani.toolkit.cli.translate, as under accelerate launch -m
    main()
