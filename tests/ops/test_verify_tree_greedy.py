"""verify_tree_greedy: SGLang's greedy tree walk, every backend against the plain-Python
expectation of tree_cases.py (trees built by build_tree_kernel_efficient from random SGLang
layouts, targets that follow a random path, a hand-computed walk through a sibling list),
invalid links bounded on the device paths, opcheck, compile, bad input."""

from __future__ import annotations

import random

import pytest
import torch
from conftest import device_backends, examples
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import assert_rejected_without_writes, assert_same
from tree_cases import expect_verify, max_draft_tokens, random_batch

import specops

STALE = -7


def tree_call(rng: random.Random, batch: int, topk: int, depth: int, n: int, shape: str = "random",
              vocab: int = 4) -> dict:
    """A verify call over a tree of SGLang's layout (links from the native build), candidates
    from a small vocabulary (so siblings often share a token), targets that follow a path."""
    with specops.backend("native"):
        tree = specops.build_tree_kernel_efficient(**random_batch(rng, batch, topk, depth, n, shape), tree_mask_mode=1)
    candidates = torch.tensor([[rng.randrange(vocab) for _ in range(n)] for _ in range(batch)], dtype=torch.int64).reshape(batch, n)
    target = torch.tensor([[rng.randrange(vocab) for _ in range(n)] for _ in range(batch)],
                          dtype=torch.int64).reshape(batch, n)
    return dict(predicts=torch.full((batch * n,), STALE, dtype=torch.int32),
                accept_index=torch.full((batch, depth + 1), STALE, dtype=torch.int32),
                accept_token_num=torch.full((batch,), STALE, dtype=torch.int32), candidates=candidates,
                retrive_index=tree.retrive_index, retrive_next_token=tree.retrive_next_token,
                retrive_next_sibling=tree.retrive_next_sibling, target_predict=target)


def run_and_check(call: dict, what: str = "") -> None:
    expected = expect_verify(call["candidates"].tolist(), call["retrive_index"].tolist(),
                             call["retrive_next_token"].tolist(), call["retrive_next_sibling"].tolist(),
                             call["target_predict"].tolist(), call["accept_index"].size(1), call["predicts"].tolist())
    specops.verify_tree_greedy(**call)
    for name in ("predicts", "accept_index", "accept_token_num"):
        assert_same(call[name], torch.tensor(expected[name], dtype=torch.int32).reshape(call[name].shape), what + name)


def _hand() -> dict:
    # The tree of test_build_tree_kernel_efficient's HAND: root -> 1, 2; 1 -> 3 -> 5; 2 -> 4.
    return dict(predicts=torch.full((6,), STALE, dtype=torch.int32), accept_index=torch.full((1, 4), STALE, dtype=torch.int32),
                accept_token_num=torch.full((1,), STALE, dtype=torch.int32),
                candidates=torch.tensor([[0, 100, 200, 300, 400, 500]]), retrive_index=torch.arange(6)[None],
                retrive_next_token=torch.tensor([[1, 3, 4, 5, -1, -1]]),
                retrive_next_sibling=torch.tensor([[-1, 2, -1, -1, -1, -1]]),
                target_predict=torch.tensor([[200, 7, 400, 8, 999, 9]]))


def test_hand_computed_walk_follows_the_sibling(backend):
    # Root predicts 200: node 1 (100) fails, its sibling node 2 matches; node 2 predicts 400: node
    # 4 matches; node 4 has no child: done. The bonus token is node 4's prediction, 999.
    call = _hand()
    result = specops.verify_tree_greedy(**call)
    assert result.accept_index.tolist() == [[0, 2, 4, -1]]
    assert result.accept_token_num.tolist() == [2]
    assert result.predicts.tolist() == [200, STALE, 400, STALE, 999, STALE]


def test_hand_computed_envelope_stops_the_walk(backend):
    # The chain 1 -> 3 -> 5 all match, but accept_index has 3 columns: two accepted at most.
    call = _hand()
    call.update(accept_index=torch.full((1, 3), STALE, dtype=torch.int32),
                target_predict=torch.tensor([[100, 300, 0, 500, 0, 0]]))
    specops.verify_tree_greedy(**call)
    assert call["accept_index"].tolist() == [[0, 1, 3]]
    assert call["accept_token_num"].tolist() == [2]
    assert call["predicts"].tolist() == [100, 300, STALE, 500, STALE, STALE]


@pytest.mark.parametrize("shape,topk,depth,n", [("chain", 1, 8, 9), ("star", 8, 1, 9), ("random", 8, 8, 64),
                                                ("random", 1, 1, 1), ("random", 2, 3, 7)])
def test_degenerate_and_edge_trees(backend, shape, topk, depth, n):
    run_and_check(tree_call(random.Random(n), 4, topk, depth, n, shape, vocab=2), shape)


@settings(max_examples=examples(12))
@given(seed=st.integers(0, 2**31), topk=st.integers(1, 8), depth=st.integers(1, 8), batch=st.integers(0, 5),
       vocab=st.integers(1, 4), data=st.data())
def test_random_trees(backend, seed, topk, depth, batch, vocab, data):
    n = data.draw(st.integers(1, min(max_draft_tokens(topk, depth), 64)))
    run_and_check(tree_call(random.Random(seed), batch, topk, depth, n, vocab=vocab))


def test_token_ids_past_int32_wrap_as_the_int32_store():
    call = _hand()
    call["target_predict"] = torch.tensor([[100, 2**33 + 5, 0, 0, 0, 0]])
    for name in ["native", *device_backends(), "reference"]:
        fresh = {k: v.clone() for k, v in call.items()}
        with specops.backend(name):
            specops.verify_tree_greedy(**fresh)
        assert fresh["predicts"].tolist()[:2] == [100, 5], name


def _corrupt(call: dict, rng: random.Random) -> None:
    batch, n = call["candidates"].shape
    for name in ("retrive_next_token", "retrive_next_sibling", "retrive_index"):
        links = call[name]
        for _ in range(3):
            links[rng.randrange(batch), rng.randrange(n)] = rng.choice([-5, n, n + 3, 2**40, -(2**40), batch * n])


@pytest.mark.parametrize("seed", range(6))
def test_invalid_links_and_cycles_stay_in_bounds_on_the_device_paths(seed):
    """Links outside the row, flat indices outside the batch, cycles in the sibling and child
    links: the device paths and the reference agree with the expectation's bounded walk."""
    rng = random.Random(seed)
    call = tree_call(rng, 3, 2, 3, 7, vocab=1)
    _corrupt(call, rng)
    call["retrive_next_sibling"][0] = torch.tensor([1, 2, 1, 1, 1, 1, 1])  # a sibling cycle
    call["retrive_next_token"][1, 2] = 2  # a node its own child
    for name in [*device_backends(), "reference"]:
        with specops.backend(name):
            run_and_check({k: v.clone() for k, v in call.items()}, f"{name} ")


def _opcheck_args():
    call = tree_call(random.Random(3), 3, 2, 3, 6)
    return tuple(call[k] for k in ("predicts", "accept_index", "accept_token_num", "candidates", "retrive_index",
                                   "retrive_next_token", "retrive_next_sibling", "target_predict"))


def test_opcheck():
    torch.library.opcheck(torch.ops.specops.verify_tree_greedy.default, _opcheck_args())


def test_compiles_without_graph_break():
    args = _opcheck_args()

    def step(predicts, accept_index, accept_token_num, candidates, *links):
        result = specops.verify_tree_greedy(predicts, accept_index, accept_token_num, candidates + 0, *links)
        return result.accept_index * 2, result.accept_token_num + 1

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    expected = step(*(t.clone() for t in args))
    for got, want in zip(compiled(*args), expected):
        assert_same(got, want)


def _call() -> dict:
    return _hand()


BAD_INPUTS = [
    ("candidates", dict(candidates=torch.tensor([[0, 100, 200, 300, 400, 500]], dtype=torch.int32))),
    ("retrive_index", dict(retrive_index=torch.arange(5)[None])),
    ("retrive_next_token", dict(retrive_next_token=torch.zeros(2, 6, dtype=torch.int64))),
    ("retrive_next_sibling", dict(retrive_next_sibling=torch.zeros(6, dtype=torch.int64))),
    ("target_predict", dict(target_predict=torch.zeros(1, 6, dtype=torch.float32))),
    ("predicts", dict(predicts=torch.zeros(5, dtype=torch.int32))),
    ("predicts", dict(predicts=torch.zeros(6, dtype=torch.int64))),
    ("accept_index", dict(accept_index=torch.zeros(1, 4, dtype=torch.int64))),
    ("accept_index", dict(accept_index=torch.zeros(1, 0, dtype=torch.int32))),
    ("accept_token_num", dict(accept_token_num=torch.zeros(2, dtype=torch.int32))),
]


@pytest.mark.parametrize("argument,change", BAD_INPUTS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(BAD_INPUTS)])
def test_bad_input_names_the_argument_and_writes_nothing(backend, argument, change):
    call = _call()
    call.update(change)
    written = tuple(name for name in ("predicts", "accept_index", "accept_token_num") if name not in change)
    assert_rejected_without_writes(specops.verify_tree_greedy, call, argument=argument, written=written)


@pytest.mark.parametrize("argument,change", [
    ("retrive_index", dict(retrive_index=torch.tensor([[0, 1, 2, 3, 4, 6]]))),
    ("retrive_next_token", dict(retrive_next_token=torch.tensor([[1, 3, 4, 6, -1, -1]]))),
    ("retrive_next_sibling", dict(retrive_next_sibling=torch.tensor([[-1, 2, -1, -2, -1, -1]]))),
])
def test_native_rejects_invalid_links_and_writes_nothing(argument, change):
    call = _call()
    call.update(change)
    with specops.backend("native"):
        assert_rejected_without_writes(specops.verify_tree_greedy, call, argument=argument,
                                       written=("predicts", "accept_index", "accept_token_num"), errors=ValueError)
