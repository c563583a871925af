"""The drafting benchmark's own machinery (python/specops/bench/drafting.py): the Python calls a
new shape and a later group add, the small steps figure (a) times each sharing group on, the
paired differences figures (a), (b) and (d) are taken from, and the CP split a new shape
computes inline."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from drafting_cases import MAX_NUM_TOKENS, SWA, make_builders, make_model

from specops import _fastpath


@pytest.mark.skipif(not _fastpath.ENABLED, reason="counts the Python calls the fast path saves: under "
                    "SPECOPS_FASTPATH=0 the plain twins are Python calls themselves")
def test_a_new_shape_and_a_later_group_add_few_python_calls():
    """Counted, not timed: a first build at a new batch shape makes its views in one native
    call per kind (no Python slicing), and a later group that shares everything adds its row,
    its check and its metadata, a handful of calls (specops-bench's secondary figures)."""
    from specops.bench import drafting as bench

    case = bench._case(4, 8, 1, True, 1, torch.device("cpu"))
    figures = case.extras
    # 25 and 3 when written; 34 and 3 before the views were made in one call each.
    assert 0 < figures["(d) python calls first - repeat"] <= 30
    assert 0 < figures["(a) python calls per later sharing group"] <= 4


def test_a_shapes_cp_split_is_cp_token_splits():
    """InvariantViews writes cp_token_split's arithmetic out (a new shape skips its dataclass):
    the same four fields, in CPLocalMetadata's order, for every size, CP size and rank."""
    from specops._cp import cp_token_split
    from specops.drafting.buffers import InvariantViews

    for cp_size in (1, 2, 3, 4):
        model = make_model(2, cp_size, cp_size - 1)
        builder = make_builders(model, [SWA])[0]
        for cp_rank in range(cp_size):
            for num_input_tokens in (0, 1, 5, 8, 13, MAX_NUM_TOKENS):
                views = InvariantViews(builder.buffers(1), 2, min(num_input_tokens, 3), num_input_tokens, cp_size,
                                       cp_rank)
                assert views.split == dataclasses.astuple(cp_token_split(num_input_tokens, cp_size, cp_rank))


def test_the_bench_times_a_sharing_group_on_a_small_step_after_the_groups_it_shares_with():
    """Figure (a) of specops-bench: each later group that shares everything is timed as a step
    over g0 and the first group of its kind, with and without it, never after a DSpark group
    that builds its own indices; the two steps of each pair are listed together and paired
    (Case.paired), and so are figure (d)'s first and repeat builds."""
    from specops.bench import drafting as bench

    cpu = torch.device("cpu")
    builders = bench._builders(bench.make_model(7, 1, cpu), bench.GROUPS, cpu)
    pairs = {causal: [(pair.group, pair.base, pair.base_name, pair.with_name)
                      for pair in bench.sharing_pairs(bench.GROUPS, builders, causal)] for causal in (True, False)}
    # swa64 shares with swa (g0), the full-attention groups with c4 (g2); on a causal step the
    # DSpark groups have no indices and swa's sas_metadata.
    assert pairs[False] == [(3, (0, 2), "step g0+g2", "step g0+g2+g3"), (4, (0,), "step g0", "step g0+g4"),
                            (5, (0, 2), "step g0+g2", "step g0+g2+g5"), (7, (0, 2), "step g0+g2", "step g0+g2+g7")]
    assert pairs[True] == [(1, (0,), "step g0", "step g0-g1"), *pairs[False][:3], (6, (0,), "step g0", "step g0+g6"),
                           pairs[False][3]]
    case = bench._case(8, 8, 1, False, 1, cpu)
    names = list(case.impls)
    assert case.paired == (("step g0+g2+g3", "step g0+g2"), ("step g0+g4", "step g0"),
                           ("step g0+g2+g5", "step g0+g2"), ("step g0+g2+g7", "step g0+g2"),
                           ("first build", "repeat build")) + tuple(
        (bench._layer_name(count + 1), bench._layer_name(count)) for count in range(1, 8))
    assert names.index("step g0+g2+g3") == names.index("step g0+g2") + 1
    assert names.index("step g0+g4") == names.index("step g0") + 1
    metadata = case.impls["step g0+g2+g3"]()
    assert [m.window for m in metadata] == [b.step_windows[False] for b in (builders[0], builders[2], builders[3])]


def test_a_paired_figure_is_the_median_over_adjacent_calls():
    """Case.paired on the host: derive gets the median, over rounds of one call of each timed
    one after the other (the order alternating, so a drift within a round cancels), of a's µs
    minus b's. Here on a clock the calls advance: 5 µs a call of a, 3 of b, except that the
    host is ten times slower for one round in three; the median keeps the 2 µs."""
    from specops.bench import _harness

    now, order, slow_rounds = [0.0], [], [True]

    def costs(name: str, microseconds: float):
        def run() -> None:
            order.append(name)
            # Both calls of every third round (the warm-up is round 0).
            slow = slow_rounds[0] and (len(order) - 1) // 2 % 3 == 2
            now[0] += microseconds * 1e-6 * (10 if slow else 1)
        return run

    impls = {"base": costs("base", 3.0), "with": costs("with", 5.0)}
    assert _harness.time_paired(impls["with"], impls["base"], 6, lambda: now[0]) == pytest.approx(2.0)
    assert order == ["with", "base"] + ["with", "base", "base", "with"] * 3
    seen, slow_rounds[0] = {}, False  # through run_case, whose own timing calls come first
    case = _harness.Case("x", "y", 1, 1, impls, subject="with", baselines=(), paired=(("with", "base"),),
                         derive=lambda medians: seen.update(medians) or {}, clock=lambda: now[0])
    _harness.run_case(case, samples=5, sample_seconds=1e-4, device=torch.device("cpu"))
    assert seen["with - base"] == pytest.approx(2.0)
