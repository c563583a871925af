"""The OpSpec of torch.ops.specops.move_kv_cache_entries (one line of OP_TABLE in tests/op_table.py)."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

import specops

from ._corruptions import _pick, _seed
from ._spec import I32, I64, Arg, Bad, Call, Corruption, OpSpec, bad, bad_with

BF16, F16, F32, I8 = torch.bfloat16, torch.float16, torch.float32, torch.int8
CACHE_DTYPES = (BF16, F16, F32, I8)
# A cache takes any rank from 2 up ([num_blocks, block_size, *entry]): a dimension more or less is
# another valid layout, not a case of the matrix.
CACHE_RANKS = (2, 3, 4, 5, 6)


def _filled(shape, dtype, start: int) -> torch.Tensor:
    return ((torch.arange(torch.Size(shape).numel()) + start) % 120).view(shape).to(dtype)


def _move_valid() -> Call:
    # Group 0 (6 slots of block size 2): K in bf16, V in fp16, a chain (5 -> 1), (3 -> 5), a PAD;
    # group 1 (8 slots of block size 4): int8 with an odd entry.
    return dict(src_slots=torch.tensor([[5, 3, -1], [7, 6, 0]], dtype=I32),
                dst_slots=torch.tensor([[1, 5, 2], [6, 2, -1]], dtype=I32),
                kv_caches=[_filled((3, 2, 2, 4), BF16, 0), _filled((3, 2, 2, 4), F16, 5), _filled((2, 4, 3), I8, 9)],
                cache_groups=[0, 0, 1])


def _move_metadata() -> list[Bad]:
    def cache(index, make):
        def change(call):
            call["kv_caches"] = [make(t) if c == index else t for c, t in enumerate(call["kv_caches"])]
        return change

    return [
        bad("dst_slots of another shape", ("dst_slots", "src_slots"), dst_slots=torch.zeros(2, 2, dtype=I32)),
        bad("dst_slots of another dtype", ("dst_slots", "src_slots"), dst_slots=torch.zeros(2, 3, dtype=I64)),
        bad("two groups for three caches", ("cache_groups", "kv_caches"), cache_groups=[0, 0]),
        bad("a group past the pairs' rows", ("cache_groups[2]", "src_slots"), cache_groups=[0, 0, 2]),
        bad("a negative group", "cache_groups[0]", cache_groups=[-1, 0, 1]),
        bad_with("an entry not contiguous", "kv_caches[1]", cache(1, lambda t: t.transpose(2, 3))),
        bad_with("slots of a block apart", "kv_caches[2]", cache(2, lambda t: t[:, ::2])),
        bad_with("blocks overlapping", "kv_caches[0]", cache(0, lambda t: t.as_strided(t.shape, (4, 8, 4, 1)))),
        bad_with("a 1-D cache", "kv_caches[2]", cache(2, lambda t: t.flatten())),
        bad_with("one cache twice", ("kv_caches[1]", "kv_caches[0]"),
                 lambda call: call["kv_caches"].__setitem__(1, call["kv_caches"][0])),
    ]


@st.composite
def _move_draw(draw) -> Call:
    generator = _seed(draw)
    num_groups = draw(st.integers(1, 3))
    num_pairs = draw(st.integers(0, 8))
    layouts = [(draw(st.integers(1, 3)), draw(st.sampled_from([1, 2, 4]))) for _ in range(num_groups)]
    caches, groups = [], []
    for c in range(draw(st.integers(1, 4))):
        group = _pick(draw, num_groups)
        num_blocks, block_size = layouts[group]
        entry = draw(st.sampled_from([(), (3,), (2, 4)]))
        caches.append(_filled((num_blocks, block_size, *entry), draw(st.sampled_from(CACHE_DTYPES)), 11 * c))
        groups.append(group)
    most = max(n * b for n, b in layouts)
    dtype = draw(st.sampled_from([I32, I64]))
    src = torch.randint(-1, most + 2, (num_groups, num_pairs), generator=generator).to(dtype)
    dst = torch.randint(-1, most + 2, (num_groups, num_pairs), generator=generator).to(dtype)
    return dict(src_slots=src, dst_slots=dst, kv_caches=caches, cache_groups=groups)


def _slots_set(values):
    """A corruption: one entry of src_slots or dst_slots set to a value past every cache (skipped on
    every path: the host op rejects nothing, the kernels read and write nothing for the pair)."""
    def apply(draw, call: Call) -> bool:
        name = draw(st.sampled_from(["src_slots", "dst_slots"]))
        slots = call[name]
        if slots.numel():
            slots.view(-1)[_pick(draw, slots.numel())] = draw(st.sampled_from(values(slots.dtype)))
        return False
    return apply


def _past(dtype) -> list[int]:
    top = torch.iinfo(dtype).max
    return [24, 1000, 2**31 - 1, top, top - 1]


def _negative(dtype) -> list[int]:
    return [-1, -2, -(2**31), torch.iinfo(dtype).min]


MOVE_KV = OpSpec(
    name="move_kv_cache_entries",
    wrapper=specops.move_kv_cache_entries,
    tensors={"src_slots": Arg((I32, I64), 2), "dst_slots": Arg((I32, I64), 2),
             "kv_caches[0]": Arg(CACHE_DTYPES, 4, other_dims=CACHE_RANKS),
             "kv_caches[1]": Arg(CACHE_DTYPES, 4, other_dims=CACHE_RANKS),
             "kv_caches[2]": Arg(CACHE_DTYPES, 3, other_dims=CACHE_RANKS)},
    outputs=("kv_caches[0]", "kv_caches[1]", "kv_caches[2]"),
    valid_call=_move_valid,
    metadata_errors=_move_metadata,
    value_errors=lambda: [],
    draw_call=_move_draw(),
    corruptions=(
        Corruption("slots past every cache", _slots_set(_past)),
        Corruption("negative slots", _slots_set(_negative)),
    ),
    scalars=("cache_groups",),
    any_dtype=("kv_caches[0]", "kv_caches[1]", "kv_caches[2]"),
    allocation_sizes={},
)
