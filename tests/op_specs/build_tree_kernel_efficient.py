"""The OpSpec of torch.ops.specops.build_tree_kernel_efficient (one line of OP_TABLE in tests/op_table.py)."""

from __future__ import annotations

import random

import torch
from hypothesis import strategies as st
from tree_cases import max_draft_tokens, packed_dtype, random_batch

import specops

from ._corruptions import _pick
from ._spec import I32, I64, Arg, Bad, Call, Corruption, OpSpec, PAST_INT32, bad, bad_with

_OUTPUTS = ("tree_mask", "positions", "retrive_index", "retrive_next_token", "retrive_next_sibling")


def _with_buffers(call: Call, mode: int) -> Call:
    batch, n = call["verified_seq_len"].numel(), call["draft_token_num"]
    if mode == 2:
        mask = torch.full((batch * n,), 0x5A, dtype=packed_dtype(n))
    else:
        mask = torch.full((batch * n * n + (int(call["verified_seq_len"].sum()) * n if mode == 0 else 0),), True)
    return dict(call, tree_mask=mask, positions=torch.full((batch * n,), 0x0BADF00D, dtype=I64),
                retrive_index=torch.full((batch, n), 0x0BADF00D, dtype=I64),
                retrive_next_token=torch.full((batch, n), 0x0BADF00D, dtype=I64),
                retrive_next_sibling=torch.full((batch, n), 0x0BADF00D, dtype=I64), tree_mask_mode=mode)


def _valid() -> Call:
    return _with_buffers(random_batch(random.Random(3), 2, 2, 3, 6), 1)


def _metadata() -> list[Bad]:
    _shared = torch.zeros(16, dtype=I64)
    return [
        bad("topk 0", "topk", topk=0),
        bad("depth 0", "depth", depth=0),
        bad("depth past parent_list", ("parent_list",), depth=4),
        bad("draft_token_num past 1024", "draft_token_num", draft_token_num=1025),
        bad("draft_token_num not selected_index's", "selected_index", draft_token_num=5),
        bad("tree_mask_mode 3", "tree_mask_mode", tree_mask_mode=3),
        bad("tree_mask_mode -1", "tree_mask_mode", tree_mask_mode=-1),
        bad_with("a shorter QLEN_ONLY mask", "tree_mask", lambda call: call.update(tree_mask=call["tree_mask"][:-1])),
        bad_with("a packed mask of the wrong width", "tree_mask",
                 lambda call: call.update(tree_mask_mode=2, tree_mask=torch.zeros(12, dtype=torch.int16))),
        bad_with("an int32 mask in QLEN_ONLY", "tree_mask",
                 lambda call: call.update(tree_mask=torch.zeros(72, dtype=I32))),
        bad_with("positions of another size", "positions", lambda call: call.update(positions=call["positions"][:-1])),
        bad_with("retrive_index of another batch", "retrive_index",
                 lambda call: call.update(retrive_index=call["retrive_index"][:1])),
        bad_with("verified_seq_len of another batch", "verified_seq_len",
                 lambda call: call.update(verified_seq_len=call["verified_seq_len"][:1])),
        bad_with("positions sharing retrive_index", ("positions", "retrive_index"),
                 lambda call: call.update(positions=call["retrive_index"].view(-1))),
        bad_with("retrive_next_token sharing selected_index", ("retrive_next_token", "selected_index"),
                 lambda call: call.update(retrive_next_token=_shared[4:16].view(2, 6), selected_index=_shared[:10].view(2, 5))),
    ]


def _values() -> list[Bad]:
    return [
        bad_with("a selection past the candidates", "selected_index",
                 lambda call: call["selected_index"].__setitem__((1, 4), 10)),
        bad_with("a negative selection", "selected_index", lambda call: call["selected_index"].__setitem__((0, 2), -1)),
        bad_with("a negative length", "verified_seq_len", lambda call: call["verified_seq_len"].__setitem__(0, -3)),
        bad_with("a FULL_MASK past the mask", "tree_mask",
                 lambda call: call.update(tree_mask_mode=0, tree_mask=torch.ones(72, dtype=torch.bool))),
    ]


@st.composite
def _draw(draw) -> Call:
    topk, depth, mode = draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(st.sampled_from([0, 1, 2]))
    n = draw(st.integers(1, min(max_draft_tokens(topk, depth), 12)))
    call = random_batch(random.Random(draw(st.integers(0, 2**16))), draw(st.integers(0, 4)), topk, depth, n,
                        max_seq_len=8)
    return _with_buffers(call, mode)


def _selection_outside(draw, call: Call) -> bool:
    """A selection outside the candidates (negative, or its parent entry past parent_list): the
    node is unlinked and its walk ends on the device paths; the host op rejects it."""
    picks = call["selected_index"].view(-1)
    if picks.numel() == 0:
        return False
    picks[_pick(draw, picks.numel())] = draw(st.sampled_from([-1, -(2**40), 2**40, -(2**63), 2**63 - 1]))
    return True


def _unselected_parent(draw, call: Call) -> bool:
    """parent_list entries that no selection holds, or that point back into the tree (cycles):
    valid for the host op (SGLang warns and skips the node), every path agrees."""
    parents = call["parent_list"].view(-1)
    if parents.numel() == 0:
        return False
    for _ in range(draw(st.integers(1, 3))):
        parents[_pick(draw, parents.numel())] = draw(st.sampled_from([-5, 0, 1, 2, 3, 2**40]))
    return False


def _huge_lengths(draw, call: Call) -> bool:
    """Lengths whose FULL_MASK rows fall past the mask, or wrap int64: the host op rejects them
    (a negative one everywhere, a huge one in FULL_MASK); the device paths write no cell outside."""
    lengths = call["verified_seq_len"]
    if lengths.numel() == 0:
        return False
    value = draw(st.sampled_from([-1, -(2**40), 2**40, 2**62, -(2**63)]))
    lengths[_pick(draw, lengths.numel())] = value
    return value < 0 or call["tree_mask_mode"] == 0


BUILD_TREE = OpSpec(
    name="build_tree_kernel_efficient",
    wrapper=specops.build_tree_kernel_efficient,
    tensors=dict(parent_list=Arg((I64,), 2), selected_index=Arg((I64,), 2), verified_seq_len=Arg((I64,), 1),
                 tree_mask=Arg((torch.bool, torch.uint8), 1), positions=Arg((I64,), 1),
                 retrive_index=Arg((I64,), 2), retrive_next_token=Arg((I64,), 2),
                 retrive_next_sibling=Arg((I64,), 2)),
    outputs=_OUTPUTS,
    valid_call=_valid,
    metadata_errors=_metadata,
    value_errors=_values,
    draw_call=_draw(),
    corruptions=(
        Corruption("a selection outside the candidates", _selection_outside),
        Corruption("parents not selected, cycles", _unselected_parent),
        Corruption("lengths past the mask", _huge_lengths, device="bounds"),
    ),
    guard_examples=10,
    allocation_sizes={"draft_token_num": PAST_INT32},
)
