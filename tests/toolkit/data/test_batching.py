import random

import datasets
import pytest
import torch
from torch.utils.data import DataLoader

from modeling_vaswani.toolkit.data.batching import TokenBudgetBatchSampler, check_examples_fit


def random_lengths(count, seed=0, longest=40):
    rng = random.Random(seed)
    return [rng.randint(1, longest) for _ in range(count)], [rng.randint(1, longest) for _ in range(count)]


def epoch_batches(sampler, epoch):
    sampler.set_epoch(epoch)
    return list(sampler)


def rank_batches(source, target, max_tokens, replicas, epoch=0, **kwargs):
    samplers = [
        TokenBudgetBatchSampler(source, target, max_tokens, num_replicas=replicas, rank=r, **kwargs)
        for r in range(replicas)
    ]
    return [epoch_batches(sampler, epoch) for sampler in samplers], samplers


@pytest.mark.parametrize("shuffle", [True, False])
def test_every_batch_respects_padded_budget_for_source_and_target(shuffle):
    source, target = random_lengths(500)
    sampler = TokenBudgetBatchSampler(source, target, max_tokens=100, shuffle=shuffle)
    for batch in sampler:
        assert len(batch) * max(source[i] for i in batch) <= 100
        assert len(batch) * max(target[i] for i in batch) <= 100


def test_batches_group_similar_lengths():
    source, target = random_lengths(500)
    batches = list(TokenBudgetBatchSampler(source, target, max_tokens=200))
    spread = sum(max(source[i] for i in b) - min(source[i] for i in b) for b in batches) / len(batches)
    assert spread <= 2, "sorting by length should keep source lengths within a batch nearly equal"
    assert sum(len(b) for b in batches) / len(batches) > 5, "batches should be filled up to the budget"


def test_every_example_exactly_once_per_epoch():
    source, target = random_lengths(300)
    sampler = TokenBudgetBatchSampler(source, target, max_tokens=90)
    for epoch in range(3):
        seen = [i for batch in epoch_batches(sampler, epoch) for i in batch]
        assert sorted(seen) == list(range(300))
        assert len(sampler) == len(epoch_batches(sampler, epoch))


@pytest.mark.parametrize("replicas", [2, 3])
@pytest.mark.parametrize("count", [97, 250])
def test_ranks_disjoint_equal_count_and_cover_everything(replicas, count):
    source, target = random_lengths(count, seed=count)
    per_rank, samplers = rank_batches(source, target, 70, replicas, epoch=1)
    counts = {len(batches) for batches in per_rank}
    assert len(counts) == 1, f"ranks got different numbers of batches: {[len(b) for b in per_rank]}"
    assert all(len(sampler) == len(per_rank[0]) for sampler in samplers)
    seen = [i for batches in per_rank for batch in batches for i in batch]
    assert sorted(seen) == list(range(count)), "ranks must be disjoint and together cover every example once"
    for batch in (batch for batches in per_rank for batch in batches):
        assert len(batch) * max(source[i] for i in batch) <= 70
        assert len(batch) * max(target[i] for i in batch) <= 70


def test_batch_count_made_divisible_by_splitting_not_dropping():
    # 5 examples of length 10 with a budget of 20 give 3 batches on one rank: [2, 2, 1].
    source = target = [10] * 5
    assert len(TokenBudgetBatchSampler(source, target, 20)) == 3
    per_rank, _ = rank_batches(source, target, 20, replicas=2)
    assert [len(batches) for batches in per_rank] == [2, 2]
    assert sorted(i for batches in per_rank for b in batches for i in b) == list(range(5))


def test_fewer_examples_than_replicas_is_an_error():
    with pytest.raises(ValueError, match="num_replicas=3"):
        TokenBudgetBatchSampler([5, 5], [5, 5], max_tokens=100, num_replicas=3, rank=0)


def test_same_seed_and_epoch_give_same_order_and_other_epoch_differs():
    source, target = random_lengths(400)
    first = TokenBudgetBatchSampler(source, target, 100, seed=7)
    resumed = TokenBudgetBatchSampler(source, target, 100, seed=7)
    assert epoch_batches(first, 3) == epoch_batches(resumed, 3)
    assert epoch_batches(first, 3) == epoch_batches(first, 3), "iterating twice must not advance the order"
    assert epoch_batches(first, 4) != epoch_batches(first, 3)
    assert epoch_batches(TokenBudgetBatchSampler(source, target, 100, seed=8), 3) != epoch_batches(first, 3)


def test_without_shuffle_batches_come_shortest_first_and_ignore_epoch():
    source, target = random_lengths(200)
    sampler = TokenBudgetBatchSampler(source, target, 100, shuffle=False)
    batches = epoch_batches(sampler, 0)
    assert batches == epoch_batches(sampler, 5)
    longest = [max(source[i] for i in batch) for batch in batches]
    assert longest == sorted(longest)


def test_example_longer_than_budget_is_an_error_naming_it():
    with pytest.raises(
        ValueError,
        match=r"training example 3 \(counted from 1\) has 4 source and 51 target tokens \(</s> included\), more than "
        r"--max_tokens 50 .*Expected --max_tokens >= 51, or --max_length 50 to drop the pairs longer than the budget",
    ):
        TokenBudgetBatchSampler([3, 4, 4], [3, 4, 51], max_tokens=50)


def test_examples_over_the_budget_are_refused_by_name_before_any_batch_is_cut():
    """vaswani-train checks the tokenized training set before building the model: the first example no batch can
    hold, named by the caller (its file and line) or counted from 1, its token counts, the budget and the ways out;
    examples that --max_length drops do not count."""
    dataset = datasets.Dataset.from_dict(
        {"input_ids": [[1] * n for n in (3, 30, 4, 60)], "labels": [[1] * n for n in (3, 8, 45, 2)]}
    )
    with pytest.raises(
        ValueError,
        match=r"^training example 2 \(counted from 1\) has 30 source and 8 target tokens \(</s> included\), more "
        r"than --max_tokens 20 .*; 2 more example\(s\) do too\. Expected --max_tokens >= 30 \(60 for all of them\), "
        r"or --max_length 20 to drop",
    ):
        check_examples_fit(dataset, max_tokens=20)
    with pytest.raises(ValueError, match=r"^training example at train\.en, line 3 has 4 source and 45 target tokens"):
        check_examples_fit(dataset, 40, name_example=lambda index: f"at train.en, line {index + 1}")
    with pytest.raises(ValueError, match=r"example 2 .* Expected --max_tokens >= 30, or --max_length 20"):
        check_examples_fit(dataset, 20, max_length=44)  # the 45- and 60-token pairs are dropped
    check_examples_fit(dataset, 20, max_length=20)  # all longer ones dropped: nothing left over the budget
    check_examples_fit(dataset, 60)
    with pytest.raises(ValueError, match="max_tokens must be > 0, got 0"):
        check_examples_fit(dataset, 0)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"max_tokens": 0}, "max_tokens must be > 0, got 0"),
        ({"max_tokens": -5}, "max_tokens must be > 0, got -5"),
        ({"target_lengths": [1, 2]}, "differ in size: 3 vs 2"),
        ({"source_lengths": [1, -2, 3]}, "source_lengths must be >= 0, got -2 at index 1"),
        ({"source_lengths": [1.5, 2, 3]}, "source_lengths must be a 1-D sequence of integers"),
        ({"num_replicas": 0}, "num_replicas must be >= 1, got 0"),
        ({"num_replicas": 2, "rank": 2}, r"rank must be in \[0, 1\] for num_replicas=2, got 2"),
        ({"rank": -1}, "got -1"),
        ({"seed": -1}, "seed must be >= 0, got -1"),
    ],
)
def test_bad_arguments_are_errors_naming_the_values(arguments, message):
    kwargs = {"source_lengths": [1, 2, 3], "target_lengths": [1, 2, 3], "max_tokens": 10, **arguments}
    with pytest.raises(ValueError, match=message):
        TokenBudgetBatchSampler(**kwargs)


def test_negative_epoch_is_an_error():
    with pytest.raises(ValueError, match="epoch must be >= 0, got -1"):
        TokenBudgetBatchSampler([1], [1], 10).set_epoch(-1)


def test_empty_dataset_yields_nothing():
    sampler = TokenBudgetBatchSampler([], [], 10, num_replicas=2, rank=1)
    assert len(sampler) == 0 and list(sampler) == []


def tokenized_dataset():
    source, target = random_lengths(60, seed=3, longest=12)
    return datasets.Dataset.from_dict(
        {"input_ids": [list(range(1, n + 1)) for n in source], "labels": [list(range(1, n + 1)) for n in target]}
    )


def test_from_dataset_reads_lengths_from_columns_and_respects_selection():
    dataset = tokenized_dataset().select(range(59, -1, -2))
    sampler = TokenBudgetBatchSampler.from_dataset(dataset, max_tokens=30, shuffle=False)
    expected = TokenBudgetBatchSampler(
        [len(x) for x in dataset["input_ids"]], [len(x) for x in dataset["labels"]], 30, shuffle=False
    )
    assert list(sampler) == list(expected)


def test_lengths_and_cuts_read_in_chunks_give_the_same_batches(monkeypatch):
    """Corpora of millions are read and cut LENGTH_BATCH examples at a time: chunk edges must not move a batch."""
    from modeling_vaswani.toolkit.data import batching

    dataset = tokenized_dataset().select(range(59, -1, -2))
    whole = list(TokenBudgetBatchSampler.from_dataset(dataset, max_tokens=30, shuffle=False))
    monkeypatch.setattr(batching, "LENGTH_BATCH", 7)
    assert list(TokenBudgetBatchSampler.from_dataset(dataset, max_tokens=30, shuffle=False)) == whole


def test_dataloader_with_batch_sampler_and_padding_collate():
    dataset = tokenized_dataset()
    sampler = TokenBudgetBatchSampler.from_dataset(dataset, max_tokens=40, seed=1)

    def collate(examples):
        def pad(column):
            longest = max(len(example[column]) for example in examples)
            return torch.tensor([example[column] + [0] * (longest - len(example[column])) for example in examples])

        return {"input_ids": pad("input_ids"), "labels": pad("labels")}

    loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=collate)
    batches = list(loader)
    assert len(batches) == len(loader) == len(sampler)
    assert all(b["input_ids"].numel() <= 40 and b["labels"].numel() <= 40 for b in batches)
    assert sum(b["input_ids"].shape[0] for b in batches) == len(dataset)
    assert sum(int((b["labels"] != 0).sum()) for b in batches) == sum(len(x) for x in dataset["labels"])
