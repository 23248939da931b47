"""benchmarks/alignment.py's own arithmetic, by hand: grow-diag-final-and (written there, eflomal has none), the
scores, the diagonal baseline and the words eflomal reads. The run itself (eflomal, a trained model) is not tested
here: its figures are in docs/documents.md."""

import alignment
import pytest


def test_grow_diag_final_and_adds_the_final_links_only_where_both_words_are_unaligned():
    forward = {(0, 0), (1, 1), (3, 3), (4, 3)}
    reverse = {(0, 0), (1, 1), (4, 4)}
    # intersection (0,0) (1,1); nothing neighbours them in the union; final-and: (3,3) from the forward direction,
    # then (4,3) not (target 3 is aligned now: grow-diag-final would add it), then (4,4) from the reverse one
    assert alignment.grow_diag_final_and(forward, reverse) == {(0, 0), (1, 1), (3, 3), (4, 4)}


def test_grow_diag_final_and_grows_along_diagonals():
    forward = {(0, 0), (1, 1), (3, 2)}
    reverse = {(0, 0), (1, 1), (2, 2)}
    # (2,2) is a diagonal neighbour of (1,1) with both words free; then (3,2) neighbours (2,2) and source 3 is free.
    # Without diagonals, final-and would take (3,2) and leave (2,2) out (target 2 taken).
    assert alignment.grow_diag_final_and(forward, reverse) == {(0, 0), (1, 1), (2, 2), (3, 2)}
    assert alignment.grow_diag_final_and(set(), set()) == set()
    assert alignment.grow_diag_final_and({(0, 1)}, {(0, 1)}) == {(0, 1)}


def test_scores_by_hand():
    predicted = [[(0, 0), (1, 1)], [(0, 0)]]
    reference = [{(0, 0), (1, 0)}, {(0, 0)}]
    # 3 predicted, 3 reference, 2 in both
    assert alignment.scores(predicted, reference) == pytest.approx(
        {"P": 200 / 3, "R": 200 / 3, "F1": 200 / 3, "AER": 100 / 3}
    )
    assert alignment.scores([[(0, 0)]], [{(0, 0), (1, 1), (2, 2)}]) == pytest.approx(
        {"P": 100.0, "R": 100 / 3, "F1": 50.0, "AER": 50.0}
    )


def test_diagonal_baseline_by_hand():
    assert alignment.diagonal("a b c d", "x y") == [(1, 0), (3, 1)]
    assert alignment.diagonal("a b", "x y z") == [(0, 0), (1, 1), (1, 2)]
    assert alignment.diagonal("a", "") == []


def test_eflomal_reads_the_same_word_positions():
    assert alignment.eflomal_words("Ein Mann, „Größe“ . x-y") == "Ein Mann Größe . x-y"
    assert len(alignment.eflomal_words("A  b ... c.").split()) == len("A  b ... c.".split())
