"""The OpSpec of torch.ops.specops.verify_tree_greedy (one line of OP_TABLE in tests/op_table.py)."""

from __future__ import annotations

import random

import torch
from hypothesis import strategies as st
from tree_cases import max_draft_tokens, random_batch

import specops

from ._corruptions import _pick
from ._spec import I32, I64, Arg, Bad, Call, Corruption, OpSpec, STALE, bad, bad_with


def _tree_call(rng: random.Random, batch: int, topk: int, depth: int, n: int, vocab: int) -> Call:
    with specops.backend("native"):
        tree = specops.build_tree_kernel_efficient(**random_batch(rng, batch, topk, depth, n), tree_mask_mode=1)
    tokens = torch.tensor([rng.randrange(vocab) for _ in range(2 * batch * n)], dtype=I64).view(2, batch, n)
    return dict(predicts=torch.full((batch * n,), STALE, dtype=I32),
                accept_index=torch.full((batch, depth + 1), STALE, dtype=I32),
                accept_token_num=torch.full((batch,), STALE, dtype=I32), candidates=tokens[0].clone(),
                retrive_index=tree.retrive_index, retrive_next_token=tree.retrive_next_token,
                retrive_next_sibling=tree.retrive_next_sibling, target_predict=tokens[1].clone())


def _valid() -> Call:
    return _tree_call(random.Random(4), 2, 2, 3, 6, vocab=2)


def _metadata() -> list[Bad]:
    return [
        bad_with("candidates of int32", "candidates", lambda call: call.update(candidates=call["candidates"].int())),
        bad_with("retrive_index of fewer columns", "retrive_index",
                 lambda call: call.update(retrive_index=call["retrive_index"][:, :5].contiguous())),
        bad_with("retrive_next_token of another batch", "retrive_next_token",
                 lambda call: call.update(retrive_next_token=call["retrive_next_token"][:1])),
        bad_with("target_predict strided", "target_predict",
                 lambda call: call.update(target_predict=torch.zeros(2, 8, dtype=I64)[:, :6])),
        bad_with("predicts short", "predicts", lambda call: call.update(predicts=call["predicts"][:-1])),
        bad_with("accept_index without columns", "accept_index",
                 lambda call: call.update(accept_index=torch.zeros(2, 0, dtype=I32))),
        bad_with("accept_token_num of another batch", "accept_token_num",
                 lambda call: call.update(accept_token_num=torch.zeros(3, dtype=I32))),
        bad_with("accept_index sharing predicts", ("accept_index", "predicts"),
                 lambda call: call.update(accept_index=call["predicts"][:8].view(2, 4))),
    ]


def _values() -> list[Bad]:
    return [
        bad_with("a flat index past the batch", "retrive_index", lambda call: call["retrive_index"].__setitem__((1, 2), 12)),
        bad_with("a link past the row", "retrive_next_token", lambda call: call["retrive_next_token"].__setitem__((0, 0), 6)),
        bad_with("a sibling below -1", "retrive_next_sibling",
                 lambda call: call["retrive_next_sibling"].__setitem__((1, 3), -2)),
    ]


@st.composite
def _draw(draw) -> Call:
    topk, depth = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    n = draw(st.integers(1, min(max_draft_tokens(topk, depth), 12)))
    return _tree_call(random.Random(draw(st.integers(0, 2**16))), draw(st.integers(0, 4)), topk, depth, n,
                      vocab=draw(st.integers(1, 3)))


def _bad_links(draw, call: Call) -> bool:
    """Links outside the row and flat indices outside the batch: the walk ends there (no access
    outside), every device path and the reference agree; the host op rejects them."""
    name = draw(st.sampled_from(["retrive_index", "retrive_next_token", "retrive_next_sibling"]))
    links = call[name].view(-1)
    if links.numel() == 0:
        return False
    links[_pick(draw, links.numel())] = draw(st.sampled_from([-2, -(2**40), 2**40, 2**63 - 1, -(2**63)]))
    return True


def _cycles(draw, call: Call) -> bool:
    """Links inside the row that form cycles: valid for the host op, bounded by n tries a level."""
    batch, n = call["candidates"].shape
    if batch == 0:
        return False
    for name in ("retrive_next_token", "retrive_next_sibling"):
        call[name][_pick(draw, batch), _pick(draw, n)] = _pick(draw, n)
    return False


VERIFY_TREE = OpSpec(
    name="verify_tree_greedy",
    wrapper=specops.verify_tree_greedy,
    tensors=dict(predicts=Arg((I32,), 1), accept_index=Arg((I32,), 2), accept_token_num=Arg((I32,), 1),
                 candidates=Arg((I64,), 2), retrive_index=Arg((I64,), 2), retrive_next_token=Arg((I64,), 2),
                 retrive_next_sibling=Arg((I64,), 2), target_predict=Arg((I64,), 2)),
    outputs=("predicts", "accept_index", "accept_token_num"),
    valid_call=_valid,
    metadata_errors=_metadata,
    value_errors=_values,
    draw_call=_draw(),
    corruptions=(
        Corruption("links outside the row", _bad_links),
        Corruption("cycles in the links", _cycles),
    ),
    guard_examples=10,
    allocation_sizes={},
)
