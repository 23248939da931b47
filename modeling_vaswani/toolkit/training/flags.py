"""What `--help` of the training jobs (vaswani-train, vaswani-ablate) shows: the project's flags, the model's, the
data's and the recipe's with its time budget, by themselves; `--help_all` adds the hundreds of Seq2SeqTrainingArguments
flags after them, all of which the jobs take."""

import argparse
from dataclasses import field, fields, make_dataclass
from typing import get_type_hints

from transformers import HfArgumentParser

from .trainer import VaswaniTrainingArguments

HELP_ALL = "--help_all"
EPILOG = (
    "Every Seq2SeqTrainingArguments flag works too (--seed, --bf16, --resume_from_checkpoint, "
    f"--gradient_accumulation_steps, ...): {HELP_ALL} lists them all."
)


def help_asked(argv) -> str | None:
    """ "--help" or HELP_ALL where `argv` asks for one (the fuller wins), else None."""
    asking = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    asking.add_argument("-h", "--help", action="store_true")
    asking.add_argument(HELP_ALL, action="store_true")
    asked, _ = asking.parse_known_args(argv)
    return HELP_ALL if asked.help_all else "--help" if asked.help else None


def recipe_arguments(defaults: dict) -> type:
    """A dataclass of the training fields of the recipe: those VaswaniTrainingArguments declares itself (the paper's
    recipe, token batches, averaging, the time budget) and those the job gives a default of its own (`defaults`: the
    preset's steps, checkpoints and evaluations, the output folder), without the other Seq2SeqTrainingArguments."""
    own, types = VaswaniTrainingArguments.__annotations__, get_type_hints(VaswaniTrainingArguments)
    return make_dataclass(
        "RecipeArguments",
        [
            (
                each.name,
                types[each.name],
                field(default=each.default, default_factory=each.default_factory, metadata=each.metadata),
            )
            for each in fields(VaswaniTrainingArguments)
            if each.name in own or each.name in defaults
        ],
    )


def titled(dataclass_type: type, title: str) -> type:
    """`dataclass_type` as a titled group of flags (HfArgumentParser's `_argument_group_name`)."""
    return type(dataclass_type.__name__, (dataclass_type,), {"_argument_group_name": title})


def project_parser(groups: dict[str, type], defaults: dict) -> HfArgumentParser:
    """The parser whose help `--help` prints: each dataclass of `groups` under its title, then the recipe's, with the
    `defaults` the full parser has (the preset's)."""
    groups = {**groups, "the recipe and the time budget": recipe_arguments(defaults)}
    parser = HfArgumentParser([titled(each, title) for title, each in groups.items()], epilog=EPILOG)
    parser.add_argument(
        HELP_ALL, action="store_true", default=argparse.SUPPRESS, help="list every flag, Seq2SeqTrainingArguments' too"
    )
    parser.set_defaults(**defaults)
    return tell_complements(parser)


def tell_complements(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`parser` with each `--no_NAME` flag that HfArgumentParser adds beside a boolean field defaulting to true told
    as what it is, `--NAME false`, not as NAME's help again with "(default: False)". argparse's `_actions`: the one
    way to reach the flags HfArgumentParser made (as cli.arguments.finite_floats does)."""
    for action in parser._actions:
        if action.option_strings and action.option_strings[0] == f"--no_{action.dest}":
            action.help, action.default = f"the same as --{action.dest} false", argparse.SUPPRESS
    return parser
