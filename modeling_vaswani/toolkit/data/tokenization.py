"""Translation pairs into the model's inputs: `input_ids`, `attention_mask` and `labels`, never truncated; pairs
longer than a `max_length` dropped and counted."""

import logging

import pyarrow as pa
import pyarrow.compute as pc
from datasets import Dataset, DatasetDict, Features, List, Value

from ..values import count
from .pairs import check_languages

logger = logging.getLogger(__name__)


def _check_tokenizer(tokenizer) -> None:
    # The model prepends the decoder start token to the labels itself; labels must end with </s> and not start
    # with <s>, or the model learns to never stop or sees <s> twice.
    ids = tokenizer("a")["input_ids"]
    if tokenizer.eos_token_id is None or ids[-1] != tokenizer.eos_token_id:
        raise ValueError(f"tokenizer encodes 'a' as {ids}: expected the ids to end with eos_token_id")
    if tokenizer.bos_token_id is not None and ids[0] == tokenizer.bos_token_id:
        raise ValueError(f"tokenizer encodes 'a' as {ids}: expected no leading bos_token_id (the model adds it)")


# int32 ids (vocabularies are far below 2**31) and int8 masks: a quarter of the default int64 on disk and in the
# page cache, which is what a 4.5M-pair corpus's tokenized copy costs.
TOKENIZED_FEATURES = Features(
    {
        "input_ids": List(Value("int32")),
        "attention_mask": List(Value("int8")),
        "labels": List(Value("int32")),
    }
)


def _encode(batch, tokenizer, source_lang: str, target_lang: str) -> dict:
    sources = [pair[source_lang] for pair in batch["translation"]]
    targets = [pair[target_lang] for pair in batch["translation"]]
    encoded = tokenizer(sources, text_target=targets, truncation=False)
    return {key: encoded[key] for key in TOKENIZED_FEATURES}


def _keep_fitting(batch: pa.Table, max_length: int) -> pa.Table:
    # On Arrow's list offsets: no Python list per example is built to count its tokens.
    fits = pc.and_(
        pc.less_equal(pc.list_value_length(batch["input_ids"]), max_length),
        pc.less_equal(pc.list_value_length(batch["labels"]), max_length),
    )
    return batch.filter(fits)


def check_max_length(max_length: int | None) -> None:
    """Refuses a `max_length` that is not None or an int >= 2, before any tokenizing."""
    count("max_length", max_length, 2, "a token plus </s>", optional=True)


def filter_by_length(tokenized: Dataset, max_length: int, num_proc: int | None = None, name: str = "dataset"):
    """Drop the pairs of a tokenized dataset whose source or target (counting the </s>) has more than `max_length`
    tokens, and log how many (WARNING when any is dropped)."""
    check_max_length(max_length)
    # A map that returns fewer rows, not `Dataset.filter`: a filter leaves the kept rows behind an index mapping,
    # through which every later read (the sampler's lengths, each batch) gathers a copy (47 s for 4.5M pairs'
    # lengths); this writes the kept rows out once, in Arrow, and the result is cached like the tokenization.
    kept = tokenized.with_format("arrow").map(
        _keep_fitting,
        batched=True,
        fn_kwargs={"max_length": max_length},
        num_proc=num_proc,
        desc=f"Length filter {name}",
    )
    kept = kept.with_format(tokenized.format["type"], tokenized.format["columns"])
    removed = len(tokenized) - len(kept)
    log = logger.warning if removed else logger.info
    log("%s: dropped %d of %d pairs longer than max_length=%d tokens", name, removed, len(tokenized), max_length)
    return kept


def _tokenize_split(
    dataset: Dataset,
    tokenizer,
    source_lang: str,
    target_lang: str,
    max_length: int | None,
    num_proc: int | None,
    name: str,
) -> Dataset:
    tokenized = dataset.map(
        _encode,
        batched=True,
        remove_columns=dataset.column_names,
        features=TOKENIZED_FEATURES,
        fn_kwargs={"tokenizer": tokenizer, "source_lang": source_lang, "target_lang": target_lang},
        num_proc=num_proc,
        desc=f"Tokenizing {name}",
    )
    return tokenized if max_length is None else filter_by_length(tokenized, max_length, num_proc, name)


def tokenize_pairs(
    dataset: Dataset | DatasetDict,
    tokenizer,
    source_lang: str,
    target_lang: str,
    max_length: int | None = None,
    num_proc: int | None = None,
) -> Dataset | DatasetDict:
    """Map translation pairs to `input_ids`, `attention_mask` and `labels` (target ids ending with </s>).

    Nothing is ever truncated: a cut-off target would teach the model to stop mid-sentence, and a cut-off source
    to translate text it never saw. With `max_length` set, pairs whose source or target (counting the </s>) is
    longer are dropped by `filter_by_length` and the count is logged (WARNING when any is dropped). Dropping was
    chosen over raising because large corpora (WMT) hold a few overlong or misaligned pairs that nobody wants to train
    on; evaluation sets should be tokenized without `max_length` so that every reference is kept. The original
    columns are removed, so rows align with the input only when `max_length` is None. `num_proc` worker processes
    share the work. Results are cached by `datasets` beside the input's
    Arrow files, so a second run over the same data and tokenizer reads them back.
    """
    check_languages(source_lang, target_lang)
    check_max_length(max_length)
    count("num_proc", num_proc, 1, "worker processes", optional=True)
    _check_tokenizer(tokenizer)
    if isinstance(dataset, DatasetDict):
        return DatasetDict(
            {
                name: _tokenize_split(part, tokenizer, source_lang, target_lang, max_length, num_proc, name)
                for name, part in dataset.items()
            }
        )
    name = str(dataset.split) if dataset.split is not None else "dataset"
    return _tokenize_split(dataset, tokenizer, source_lang, target_lang, max_length, num_proc, name)
