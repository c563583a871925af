"""build_tree_kernel_efficient: SGLang's draft tree, every backend against the plain-Python
expectation of tree_cases.py (random trees in SGLang's layout, chains, stars, a hand-computed
tree in every mask mode), opcheck, compile, bad input."""

from __future__ import annotations

import random

import pytest
import torch
from conftest import device_backends, examples
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import assert_rejected_without_writes, assert_same
from tree_cases import expect_build, max_draft_tokens, packed_dtype, random_batch

import specops

STALE = 77


def _mask_for(call: dict, mode: int) -> torch.Tensor:
    batch, n = call["verified_seq_len"].numel(), call["draft_token_num"]
    if mode == 2:
        return torch.full((batch * n,), STALE, dtype=packed_dtype(n))
    cells = batch * n * n + (int(call["verified_seq_len"].sum()) * n if mode == 0 else 0)
    return torch.full((cells,), True, dtype=torch.bool)


def _outputs(call: dict) -> dict:
    batch, n = call["verified_seq_len"].numel(), call["draft_token_num"]
    return dict(positions=torch.full((batch * n,), STALE), retrive_index=torch.full((batch, n), STALE),
                retrive_next_token=torch.full((batch, n), STALE), retrive_next_sibling=torch.full((batch, n), STALE))


def run_and_check(call: dict, mode: int, what: str = "") -> None:
    call = dict(call, tree_mask_mode=mode, tree_mask=_mask_for(call, mode), **_outputs(call))
    expected = expect_build(call, call["tree_mask"].long().tolist())
    specops.build_tree_kernel_efficient(**call)
    for name in ("positions", "retrive_index", "retrive_next_token", "retrive_next_sibling"):
        assert_same(call[name], torch.tensor(expected[name], dtype=torch.int64).reshape(call[name].shape), what + name)
    assert call["tree_mask"].long().tolist() == expected["tree_mask"], what + "tree_mask"


# A hand-computed tree (topk 2, depth 3): candidates 0, 1 (the root's children), 2..5 (step 1:
# 2, 3 under candidate 0, 4, 5 under 1), step 2 under beams 3 and 4. Selected: 0, 1, 3, 4, 6 ->
# nodes 1..5 with parents 0, 0, 1, 2, 3 (6 // 2 = 3 -> parent_list[3] = candidate 3 = node 3).
HAND = dict(parent_list=torch.tensor([[-1, 0, 1, 3, 4]]), selected_index=torch.tensor([[0, 1, 3, 4, 6]]),
            verified_seq_len=torch.tensor([10]), topk=2, depth=3, draft_token_num=6)
HAND_ROWS = [[1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [1, 0, 1, 0, 0, 0], [1, 1, 0, 1, 0, 0], [1, 0, 1, 0, 1, 0],
             [1, 1, 0, 1, 0, 1]]


def test_hand_computed_links_and_positions(backend):
    tree = specops.build_tree_kernel_efficient(**HAND, tree_mask_mode=1)
    assert tree.retrive_index.tolist() == [[0, 1, 2, 3, 4, 5]]
    assert tree.retrive_next_token.tolist() == [[1, 3, 4, 5, -1, -1]]
    assert tree.retrive_next_sibling.tolist() == [[-1, 2, -1, -1, -1, -1]]
    assert tree.positions.tolist() == [10, 11, 11, 12, 12, 13]
    assert tree.tree_mask.view(6, 6).long().tolist() == HAND_ROWS


def test_hand_computed_bitpacked_words(backend):
    # Bit k is node k, bit 0 the root (SGLang's tree.cuh, little endian): 0b1, 0b11, 0b101, ...
    tree = specops.build_tree_kernel_efficient(**HAND, tree_mask_mode=2)
    assert tree.tree_mask.dtype == torch.uint8
    assert tree.tree_mask.long().tolist() == [1, 3, 5, 11, 21, 43]


def test_hand_computed_bitpacked_wide_words(backend):
    # 20 tokens: a chain of 19 under the root (topk 1): row i has bits 0..i; uint32 words.
    call = dict(parent_list=torch.tensor([[-1] + list(range(18))]), selected_index=torch.arange(19)[None],
                verified_seq_len=torch.tensor([0]), topk=1, depth=19, draft_token_num=20, tree_mask_mode=2)
    tree = specops.build_tree_kernel_efficient(**call)
    assert tree.tree_mask.dtype == torch.uint32
    assert tree.tree_mask.long().tolist() == [2 ** (i + 1) - 1 for i in range(20)]
    assert tree.retrive_next_token.tolist() == [list(range(1, 20)) + [-1]]


def test_hand_computed_full_mask_keeps_the_prefix(backend):
    # Two requests, seq_len 3 and 10: request 1's rows start after (3 + 6) * 6 = 54 cells.
    call = dict(HAND, parent_list=HAND["parent_list"].repeat(2, 1), selected_index=HAND["selected_index"].repeat(2, 1),
                verified_seq_len=torch.tensor([3, 10]))
    mask = torch.full((54 + 16 * 6,), True)
    mask[0:3] = False  # a prefix cell: never written
    specops.build_tree_kernel_efficient(**call, tree_mask=mask, tree_mask_mode=0)
    rows = mask[:54].view(6, 9)
    assert rows[:, 3:].long().tolist() == HAND_ROWS
    assert rows[0, :3].tolist() == [False] * 3 and bool(rows[1:, :3].all())
    assert mask[54:].view(6, 16)[:, 10:].long().tolist() == HAND_ROWS


@pytest.mark.parametrize("shape,topk,depth,n", [("chain", 1, 8, 9), ("chain", 3, 4, 5), ("star", 8, 1, 9),
                                                ("star", 4, 3, 5), ("random", 1, 1, 1), ("random", 8, 8, 64)])
@pytest.mark.parametrize("mode", [0, 1, 2])
def test_degenerate_and_edge_trees(backend, shape, topk, depth, n, mode):
    if mode == 2 and n > 32:
        n = 32
    call = random_batch(random.Random(n * 7 + topk), 3, topk, depth, n, shape)
    run_and_check(call, mode, f"{shape} ")


@settings(max_examples=examples(12))
@given(seed=st.integers(0, 2**31), topk=st.integers(1, 8), depth=st.integers(1, 8), mode=st.sampled_from([0, 1, 2]),
       batch=st.integers(0, 5), data=st.data())
def test_random_trees(backend, seed, topk, depth, mode, batch, data):
    n = data.draw(st.integers(1, min(max_draft_tokens(topk, depth), 32 if mode == 2 else 64)))
    run_and_check(random_batch(random.Random(seed), batch, topk, depth, n), mode)


def test_unselected_parent_and_cycles_stay_in_bounds():
    """A parent that is not selected leaves the node unlinked (SGLang skips it); a self-parent
    walks at most `depth` steps. Every path agrees (in range: the host op accepts them)."""
    call = dict(parent_list=torch.tensor([[-1, 0, 1, 5, 9]]), selected_index=torch.tensor([[0, 6, 7, 9]]),
                verified_seq_len=torch.tensor([4]), topk=2, depth=3, draft_token_num=5)
    # node 2 (6 // 2 = 3 -> candidate 5, not selected): unlinked; node 4 (9 // 2 = 4 -> candidate 9 = itself).
    for name in ["native", *device_backends(), "reference"]:
        with specops.backend(name):
            run_and_check(call, 1, f"{name} ")


def test_a_selection_outside_the_candidates_stays_in_bounds_on_the_device_paths():
    call = dict(parent_list=torch.tensor([[-1, 0, 1]]), selected_index=torch.tensor([[0, -3, 99]]),
                verified_seq_len=torch.tensor([2]), topk=2, depth=2, draft_token_num=4, tree_mask_mode=1)
    for name in [*device_backends(), "reference"]:
        with specops.backend(name):
            tree = specops.build_tree_kernel_efficient(**call)
        assert tree.retrive_next_token.tolist() == [[1, -1, -1, -1]], name
        assert tree.positions.tolist() == [2, 3, 3, 3], name


def _opcheck_args(mode):
    call = random_batch(random.Random(5), 3, 3, 3, 7)
    mask = _mask_for(call, mode)
    out = _outputs(call)
    return (call["parent_list"], call["selected_index"], call["verified_seq_len"], mask, out["positions"],
            out["retrive_index"], out["retrive_next_token"], out["retrive_next_sibling"], 3, 3, 7, mode)


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_opcheck(mode):
    torch.library.opcheck(torch.ops.specops.build_tree_kernel_efficient.default, _opcheck_args(mode))


def test_compiles_without_graph_break():
    args = _opcheck_args(1)

    def step(parent_list, selected_index, verified_seq_len, mask, positions):
        tree = specops.build_tree_kernel_efficient(parent_list, selected_index, verified_seq_len + 1, mask, positions,
                                                   topk=3, depth=3, draft_token_num=7, tree_mask_mode=1)
        return tree.positions * 2, tree.retrive_next_token + 1

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    expected = step(*(t.clone() for t in args[:5]))
    for got, want in zip(compiled(*args[:5]), expected):
        assert_same(got, want)


def _call():
    call = dict(HAND, tree_mask_mode=1)
    call.update(tree_mask=torch.full((36,), True), **_outputs(HAND))
    return call


BAD_INPUTS = [
    ("topk", dict(topk=0)),
    ("depth", dict(depth=0)),
    ("draft_token_num", dict(draft_token_num=0)),
    ("tree_mask_mode", dict(tree_mask_mode=3)),
    ("parent_list", dict(parent_list=torch.tensor([[-1, 0, 1, 3]]))),
    ("parent_list", dict(parent_list=torch.tensor([[-1, 0, 1, 3, 4]], dtype=torch.int32))),
    ("selected_index", dict(selected_index=torch.tensor([[0, 1, 3, 4]]))),
    ("verified_seq_len", dict(verified_seq_len=torch.tensor([10, 3]))),
    ("tree_mask", dict(tree_mask=torch.full((35,), True))),
    ("tree_mask", dict(tree_mask=torch.full((36,), 1, dtype=torch.int32))),
    ("tree_mask", dict(tree_mask_mode=2, tree_mask=torch.zeros(6, dtype=torch.int16))),
    ("positions", dict(positions=torch.zeros(5, dtype=torch.int64))),
    ("retrive_index", dict(retrive_index=torch.zeros(1, 5, dtype=torch.int64))),
    ("retrive_next_token", dict(retrive_next_token=torch.zeros(1, 6, dtype=torch.int32))),
    ("retrive_next_sibling", dict(retrive_next_sibling=torch.zeros(2, 6, dtype=torch.int64)[:, :6].t()[:1])),
]


@pytest.mark.parametrize("argument,change", BAD_INPUTS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(BAD_INPUTS)])
def test_bad_input_names_the_argument_and_writes_nothing(backend, argument, change):
    call = _call()
    call.update(change)
    assert_rejected_without_writes(specops.build_tree_kernel_efficient, call, argument=argument,
                                   written=("tree_mask", "positions", "retrive_index", "retrive_next_token",
                                            "retrive_next_sibling"))


@pytest.mark.parametrize("argument,change", [
    ("selected_index", dict(selected_index=torch.tensor([[0, 1, 3, 4, 10]]))),  # 10 // 2 = 5: past parent_list
    ("selected_index", dict(selected_index=torch.tensor([[0, -1, 3, 4, 6]]))),
    ("verified_seq_len", dict(verified_seq_len=torch.tensor([-1]))),
    ("tree_mask", dict(tree_mask_mode=0, tree_mask=torch.full((36 + 10 * 6 - 1,), True))),
])
def test_native_rejects_invalid_values_and_writes_nothing(argument, change):
    call = _call()
    call.update(change)
    with specops.backend("native"):
        assert_rejected_without_writes(specops.build_tree_kernel_efficient, call, argument=argument,
                                       written=("tree_mask", "positions", "retrive_index"), errors=ValueError)
