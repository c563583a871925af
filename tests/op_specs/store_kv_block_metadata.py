"""The OpSpec of torch.ops.specops.store_kv_block_metadata (one line of OP_TABLE in tests/op_table.py)."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

import specops

from ._corruptions import _one_entry, _seed
from ._spec import I32, I64, Arg, Bad, Call, Corruption, OpSpec, bad, stale, t32

INT32_MAX = 2**31 - 1


def _store_valid() -> Call:
    return dict(slot_mapping=t32(14, 15, 16, -1, 40), group_len=stale(5), group_key_idx=stale(5),
                group_key_cache_idx=stale(5), block_size=16)


def _store_metadata() -> list[Bad]:
    return [
        bad("block_size 0", "block_size", block_size=0),
        bad("block_size past int32", "block_size", block_size=2**32),
        bad("empty slot_mapping", "slot_mapping", slot_mapping=torch.zeros(0, dtype=I32)),
        bad("empty group_len", "group_len", group_len=stale(0)),
        bad("group_key_idx shorter than group_len", "group_key_idx", group_key_idx=stale(4)),
        bad("int64 group_len", "group_len", group_len=stale(5, dtype=I64)),
    ]


def _store_values() -> list[Bad]:
    return [
        bad("slot INT32_MAX", "slot_mapping", slot_mapping=t32(14, INT32_MAX, 16, -1, 40)),
        # vllm-ascend sizes the groups by requests: a request crossing a block makes two runs.
        bad("more runs than the capacity", "group_len", group_len=stale(2), group_key_idx=stale(2),
            group_key_cache_idx=stale(2)),
    ]


@st.composite
def _store_draw(draw) -> Call:
    generator = _seed(draw)
    num_slots = draw(st.integers(1, 40))
    starts = torch.randint(0, 1 << 12, (num_slots,), generator=generator)
    # Runs: each slot continues the previous one with probability 3/4.
    slots = starts.clone()
    for i in range(1, num_slots):
        if torch.rand(1, generator=generator) < 0.75:
            slots[i] = slots[i - 1] + 1
    slots[torch.rand(num_slots, generator=generator) < 0.15] = -1
    capacity = num_slots + draw(st.integers(0, 3))
    return dict(slot_mapping=slots.to(draw(st.sampled_from([I32, I64]))), group_len=stale(capacity),
                group_key_idx=stale(capacity), group_key_cache_idx=stale(capacity),
                block_size=draw(st.sampled_from([1, 4, 16, 128])))


def _extreme_slot(call: Call) -> st.SearchStrategy[int]:
    return st.sampled_from([-(2**31), -2, 2**31 - 2])


STORE_KV_BLOCK = OpSpec(
    name="store_kv_block_metadata",
    wrapper=specops.store_kv_block_metadata,
    tensors=dict(slot_mapping=Arg((I32, I64), 1), group_len=Arg((I32,), 1), group_key_idx=Arg((I32,), 1),
                 group_key_cache_idx=Arg((I32,), 1)),
    outputs=("group_len", "group_key_idx", "group_key_cache_idx"),
    valid_call=_store_valid,
    metadata_errors=_store_metadata,
    value_errors=_store_values,
    draw_call=_store_draw(),
    corruptions=(Corruption("slots near the int32 extremes", _one_entry("slot_mapping", _extreme_slot,
                                                                          native_raises=False)),),
    allocation_sizes={},
)
