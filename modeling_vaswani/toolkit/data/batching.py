"""Token-budget batching of Section 5.1 of the paper.

"Sentence pairs were batched together by approximate sequence length. Each training batch contained a set of sentence
pairs containing approximately 25000 source tokens and 25000 target tokens." This is fairseq's `--max-tokens`. The
Hugging Face Trainer only knows a fixed number of examples per batch, and neither transformers nor accelerate has a
token-budget sampler, so it is written here by hand.

The budget counts padded tokens: a batch of `n` examples whose longest source has `s` tokens costs `n * s` source
tokens (and likewise for the target), which is what the GPU actually holds.
"""

from collections.abc import Callable, Iterator, Sequence

import numpy as np
from torch.utils.data import Sampler

LENGTH_BATCH = 100_000  # examples whose lengths are read (or cut into batches) at a time


class TokenBudgetBatchSampler(Sampler[list[int]]):
    """Yields lists of example indices whose padded source and target sizes each stay within `max_tokens`.

    Examples are sorted by (source length, target length) and cut greedily into batches. Shuffling only permutes
    examples of identical lengths and the order of the batches, so the sorted length sequence and hence the batch
    boundaries are the same every epoch: `len()` never changes and is known before iterating.

    For distributed training every rank builds the same batch list from `(seed, epoch)` and rank `r` takes batches
    `r, r + R, r + 2R, ...`. The batch count is made a multiple of `num_replicas` by halving the batches with the
    most examples, so every rank gets the same number of batches (DDP would hang otherwise) and every example is seen
    exactly once per epoch. Do not let accelerate shard this sampler again: its `BatchSamplerShard` repeats batches to
    even out the ranks.

    Args:
        source_lengths, target_lengths: token counts of each example (`input_ids` and `labels`).
        max_tokens: budget of padded tokens per batch, for source and for target separately. A batch here is what one
            rank sees in one forward pass; the paper's 25000 is per training step over its 8 GPUs, so divide it by
            `num_replicas * gradient_accumulation_steps`.
        shuffle: randomise the order of batches and ties among equal lengths each epoch; off for evaluation.
        seed: with the epoch, determines the order, so a resumed run sees the same data in the same order.
        num_replicas, rank: the number of data-parallel processes and this process's index.
    """

    def __init__(
        self,
        source_lengths: Sequence[int],
        target_lengths: Sequence[int],
        max_tokens: int,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
    ):
        self._source = _as_lengths(source_lengths, "source_lengths")
        self._target = _as_lengths(target_lengths, "target_lengths")
        _check_arguments(self._source, self._target, max_tokens, seed, num_replicas, rank)
        refuse_too_long(self._source, self._target, max_tokens)
        self.max_tokens = max_tokens
        self.shuffle = shuffle
        self.seed = seed
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        order = self._sorted_order(None)
        spans = _greedy_spans(self._source[order], self._target[order], max_tokens)
        self._spans = _split_until_divisible(spans, num_replicas)

    @classmethod
    def from_dataset(
        cls, dataset, max_tokens: int, source_column: str = "input_ids", target_column: str = "labels", **kwargs
    ) -> "TokenBudgetBatchSampler":
        """Builds the sampler from a tokenized `datasets.Dataset`, taking lengths from its token-list columns
        (`dataset_lengths`)."""
        source, target = dataset_lengths(dataset, source_column, target_column)
        return cls(source, target, max_tokens, **kwargs)

    def set_epoch(self, epoch: int) -> None:
        """Called by the Trainer/accelerate at the start of each epoch to get a new, reproducible order."""
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        self.epoch = epoch

    def __len__(self) -> int:
        """Number of batches this rank yields per epoch."""
        return len(self._spans) // self.num_replicas

    def __iter__(self) -> Iterator[list[int]]:
        rng = np.random.default_rng([self.seed, self.epoch]) if self.shuffle else None
        order = self._sorted_order(rng)
        batch_order = rng.permutation(len(self._spans)) if rng is not None else np.arange(len(self._spans))
        for position in batch_order[self.rank :: self.num_replicas]:
            start, end = self._spans[position]
            yield order[start:end].tolist()

    def _sorted_order(self, rng: np.random.Generator | None) -> np.ndarray:
        # A random permutation before a stable sort breaks ties among equal lengths randomly.
        permutation = rng.permutation(len(self._source)) if rng is not None else np.arange(len(self._source))
        # lexsort's last key is the primary one.
        return permutation[np.lexsort((self._target[permutation], self._source[permutation]))]


def _as_lengths(lengths: Sequence[int], name: str) -> np.ndarray:
    array = np.asarray(lengths)
    if array.ndim != 1 or (array.size and not np.issubdtype(array.dtype, np.integer)):
        raise ValueError(f"{name} must be a 1-D sequence of integers, got shape {array.shape} and dtype {array.dtype}")
    array = array.astype(np.int64)
    negative = np.flatnonzero(array < 0)
    if negative.size:
        raise ValueError(f"{name} must be >= 0, got {array[negative[0]]} at index {negative[0]}")
    return array


def _check_arguments(source: np.ndarray, target: np.ndarray, max_tokens: int, seed: int, replicas: int, rank: int):
    if len(source) != len(target):
        raise ValueError(f"source_lengths and target_lengths differ in size: {len(source)} vs {len(target)}")
    if max_tokens <= 0:
        raise ValueError(f"max_tokens must be > 0, got {max_tokens}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    if replicas < 1:
        raise ValueError(f"num_replicas must be >= 1, got {replicas}")
    if not 0 <= rank < replicas:
        raise ValueError(f"rank must be in [0, {replicas - 1}] for num_replicas={replicas}, got {rank}")


def _too_long(source: np.ndarray, target: np.ndarray, max_tokens: int, max_length: int | None = None) -> np.ndarray:
    """Indices of the examples longer than `max_tokens` on either side, leaving out those longer than `max_length`
    (which a length filter drops)."""
    longest = np.maximum(source, target)
    over = longest > max_tokens
    if max_length is not None:
        over &= longest <= max_length
    return np.flatnonzero(over)


def _fits_all(source: np.ndarray, target: np.ndarray, too_long: np.ndarray) -> int:
    return int(np.maximum(source[too_long], target[too_long]).max())


def dataset_lengths(dataset, source_column: str = "input_ids", target_column: str = "labels"):
    """The token counts of each example of a tokenized `datasets.Dataset` (its token-list columns), read through
    Arrow a batch at a time: neither millions of token lists as Python objects nor a gathered copy of the columns
    (after a length filter, the data sits under an index mapping) is ever held."""
    import pyarrow.compute as pc  # comes with `datasets`, an optional dependency of this package

    columns = dataset.select_columns([source_column, target_column]).with_format("arrow")
    lengths = {source_column: [], target_column: []}
    for batch in columns.iter(batch_size=LENGTH_BATCH):
        for name, parts in lengths.items():
            parts.append(pc.list_value_length(batch[name]).to_numpy(zero_copy_only=False))
    source, target = (np.concatenate(parts) if parts else np.zeros(0, np.int64) for parts in lengths.values())
    return source, target


def check_examples_fit(
    dataset,
    max_tokens: int,
    max_length: int | None = None,
    name_example: Callable[[int], str] | None = None,
    source_column: str = "input_ids",
    target_column: str = "labels",
) -> None:
    """Refuses a tokenized training set holding an example that alone exceeds the token budget `max_tokens`, before
    any model is built or batch cut: the sampler could never place it. Examples longer than `max_length`, which the
    length filter drops, are left out. The first such example is named by `name_example(index)` ("at FILE, line N",
    say; index counted from 0), else by its index counted from 1, with its token counts, the budget and the two ways
    out: a larger --max_tokens, or --max_length to drop the longer pairs."""
    if max_tokens <= 0:
        raise ValueError(f"max_tokens must be > 0, got {max_tokens}")
    source, target = dataset_lengths(dataset, source_column, target_column)
    refuse_too_long(source, target, max_tokens, max_length, name_example)


def refuse_too_long(source, target, max_tokens: int, max_length=None, name_example=None) -> None:
    """Refuses the first example (by `name_example(index)`, else its index from 1) whose token counts `source`,
    `target` (numpy arrays, </s> included) exceed `max_tokens` on a side, leaving out those over `max_length`."""
    too_long = _too_long(source, target, max_tokens, max_length)
    if not too_long.size:
        return
    index = int(too_long[0])
    where = name_example(index) if name_example is not None else f"{index + 1} (counted from 1)"
    more, every = too_long.size - 1, _fits_all(source, target, too_long)
    raise ValueError(
        f"training example {where} has {source[index]} source and {target[index]} target tokens (</s> included), "
        f"more than --max_tokens {max_tokens} (the padded tokens a batch may hold on each side): no batch can hold it"
        + (f"; {more} more example(s) do too" if more else "")
        + f". Expected --max_tokens >= {max(source[index], target[index])}"
        + (f" ({every} for all of them)" if more else "")
        + f", or --max_length {max_tokens} to drop the pairs longer than the budget"
    )


def _greedy_spans(source: np.ndarray, target: np.ndarray, max_tokens: int) -> list[tuple[int, int]]:
    """Cuts the length-sorted examples into `[start, end)` ranges that each respect the padded budget."""
    longest_side = np.maximum(source, target)
    spans, start, longest = [], 0, 0
    # Each cut depends on the previous one, so this is a loop; over chunks, so that no Python int per example of a
    # corpus of millions is held at once.
    for offset in range(0, len(longest_side), LENGTH_BATCH):
        for index, length in enumerate(longest_side[offset : offset + LENGTH_BATCH].tolist(), start=offset):
            longest = max(longest, length)
            if (index + 1 - start) * longest > max_tokens:
                spans.append((start, index))
                start, longest = index, length
    if start < len(source):
        spans.append((start, len(source)))
    return spans


def _split_until_divisible(spans: list[tuple[int, int]], num_replicas: int) -> list[tuple[int, int]]:
    # A subset of a batch stays within the budget, so halving is always safe; it costs at most num_replicas - 1
    # slightly smaller batches, whereas dropping or repeating batches would change what the model is trained on.
    spans = list(spans)
    while len(spans) % num_replicas:
        widest = max(range(len(spans)), key=lambda position: spans[position][1] - spans[position][0])
        start, end = spans[widest]
        if end - start < 2:
            raise ValueError(
                f"cannot give each of num_replicas={num_replicas} ranks the same number of batches without dropping "
                f"or repeating examples: {len(spans)} batches of one example each, not a multiple of {num_replicas}; "
                "use fewer ranks, a larger max_tokens or more examples"
            )
        middle = (start + end + 1) // 2
        spans[widest : widest + 1] = [(start, middle), (middle, end)]
    return spans
