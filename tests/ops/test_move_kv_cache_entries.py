"""move_kv_cache_entries: KV entries moved slot to slot in every cache of a list. Hand-computed
chained pairs (a tree path's compaction), PAD and out-of-range slots, several groups with other
block sizes and dtypes, a wide block stride, random calls on every backend against a plain-Python
expectation (the caches as lists of entries, the pairs applied one by one), one op call and one
launch for 360 caches of mixed dtypes, opcheck, compile, bad input."""

from __future__ import annotations

import pytest
import torch
from conftest import BACKENDS, examples
from host_syncs import OpLog
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import assert_same

import specops
from specops.triton_kernels import move_kv_cache_entries as triton_module

PAD = specops.PAD_SLOT_ID
DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.int8]


def _entries(cache: torch.Tensor) -> list[list]:
    """The cache as a list of slot entries (slot s = block s // B, offset s % B), plain values."""
    num_blocks, block_size = cache.shape[:2]
    return [cache[s // block_size, s % block_size].flatten().tolist() for s in range(num_blocks * block_size)]


def expected_entries(caches, groups, src, dst) -> list[list[list]]:
    """The independent expectation: each cache's entries after its group's pairs, applied in row
    order in plain Python (a pair with a slot outside the cache is skipped)."""
    result = []
    for cache, group in zip(caches, groups):
        entries = _entries(cache)
        for s, d in zip(src[group], dst[group]):
            if 0 <= s < len(entries) and 0 <= d < len(entries):
                entries[d] = list(entries[s])
        result.append(entries)
    return result


def _filled(shape, dtype, start: int) -> torch.Tensor:
    """Distinct values a slot's entry can be recognised by (exact in every dtype of DTYPES)."""
    values = torch.arange(start, start + torch.Size(shape).numel()) % 120
    return values.view(shape).to(dtype)


# A tree path [0, 2, 3] after a prefix of 4 tokens: the tokens at tree slots 6 and 7 move to 5 and 6.
# The second pair writes slot 6, which the first reads: the first must read it before.
def test_hand_computed_chained_pairs(backend):
    cache = torch.arange(2 * 4 * 3, dtype=torch.float32).view(2, 4, 3)  # slot s holds 3s, 3s+1, 3s+2
    src = torch.tensor([[6, 7, PAD, PAD]], dtype=torch.int32)
    dst = torch.tensor([[5, 6, PAD, PAD]], dtype=torch.int32)
    specops.move_kv_cache_entries(src, dst, [cache])
    slots = cache.view(8, 3).tolist()
    assert slots[5] == [18, 19, 20]  # old slot 6
    assert slots[6] == [21, 22, 23]  # old slot 7
    assert slots[7] == [21, 22, 23]  # a source keeps its entry
    assert slots[:5] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11], [12, 13, 14]]


def test_hand_computed_a_pair_reads_an_earlier_pairs_write(backend):
    """(1 -> 2) then (2 -> 3): slot 3 gets what the first pair wrote, old slot 1 (row order)."""
    cache = torch.arange(6, dtype=torch.int8).view(3, 2, 1)
    specops.move_kv_cache_entries(torch.tensor([[1, 2]]), torch.tensor([[2, 3]]), [cache])
    assert cache.flatten().tolist() == [0, 1, 1, 1, 4, 5]


def test_hand_computed_groups_pad_and_out_of_range(backend):
    """Two groups: group 0 (block size 2, 3 blocks: 6 slots) K and V in bf16 and fp16, group 1
    (block size 4, 2 blocks: 8 slots) in int8 with an odd entry. Slot 7 is past group 0's caches,
    -5 and 2^31 - 1 past every cache: skipped."""
    k0 = torch.arange(6 * 2, dtype=torch.bfloat16).view(3, 2, 2)
    v0 = (100 + torch.arange(6 * 2)).to(torch.float16).view(3, 2, 2)
    c1 = torch.arange(8 * 3, dtype=torch.int8).view(2, 4, 3)
    src = torch.tensor([[5, 7, -5, 1], [7, 2**31 - 1, PAD, 0]], dtype=torch.int64)
    dst = torch.tensor([[0, 1, 2, 4], [3, 4, 5, PAD]], dtype=torch.int64)
    out = specops.move_kv_cache_entries(src, dst, [k0, v0, c1], cache_groups=[0, 0, 1])
    assert out[0] is k0 and out[2] is c1
    # group 0: (5 -> 0), (1 -> 4); (7 -> 1) and (-5 -> 2) skipped.
    assert k0.view(6, 2).tolist() == [[10, 11], [2, 3], [4, 5], [6, 7], [2, 3], [10, 11]]
    assert v0.view(6, 2).tolist() == [[110, 111], [102, 103], [104, 105], [106, 107], [102, 103], [110, 111]]
    # group 1: (7 -> 3) only.
    expected = [[3 * s, 3 * s + 1, 3 * s + 2] for s in range(8)]
    expected[3] = [21, 22, 23]
    assert c1.view(8, 3).tolist() == expected


def test_wide_block_stride_view(backend):
    """kv[:, 0] and kv[:, 1] of a [num_blocks, 2, block_size, heads, dim] buffer: blocks are
    2 * block_size entries apart, and the other half is untouched by each."""
    kv = _filled((3, 2, 4, 2, 3), torch.bfloat16, 0)
    before = kv.clone()
    src = torch.tensor([[9, 2, PAD]], dtype=torch.int32)
    dst = torch.tensor([[1, 11, 3]], dtype=torch.int32)
    caches = [kv[:, 0], kv[:, 1]]
    expected = expected_entries(caches, [0, 0], src.tolist(), dst.tolist())
    specops.move_kv_cache_entries(src, dst, caches, cache_groups=0)
    for c, cache in enumerate(caches):
        assert _entries(cache) == expected[c], c
    assert kv[0, 0, 1].tolist() == before[2, 0, 1].tolist()  # slot 9 = block 2, offset 1
    assert kv[2, 1, 3].tolist() == before[0, 1, 2].tolist()  # slot 2 -> 11 in the V half


def test_a_two_dimensional_cache_and_empty_calls(backend):
    cache = torch.arange(8, dtype=torch.float32).view(2, 4)  # an entry of one value
    specops.move_kv_cache_entries(torch.tensor([[7, 0]]), torch.tensor([[0, 6]]), [cache])
    assert cache.flatten().tolist() == [7, 1, 2, 3, 4, 5, 7, 7]
    assert specops.move_kv_cache_entries(torch.zeros(2, 0, dtype=torch.int32), torch.zeros(2, 0, dtype=torch.int32),
                                         [cache], cache_groups=[1]) == [cache]
    assert specops.move_kv_cache_entries(torch.zeros(0, 3, dtype=torch.int32), torch.zeros(0, 3, dtype=torch.int32),
                                         []) == []
    empty = torch.zeros(0, 4, 2)
    specops.move_kv_cache_entries(torch.tensor([[0, 1]]), torch.tensor([[1, 0]]), [empty])


def _random_call(draw) -> dict:
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    num_groups = draw(st.integers(1, 3))
    num_pairs = draw(st.integers(0, 9))
    slot_dtype = draw(st.sampled_from([torch.int32, torch.int64]))
    layouts = [(draw(st.integers(1, 4)), draw(st.sampled_from([1, 2, 4, 16]))) for _ in range(num_groups)]
    caches, groups = [], []
    for c in range(draw(st.integers(0, 6))):
        group = draw(st.integers(0, num_groups - 1))
        num_blocks, block_size = layouts[group]
        entry = draw(st.sampled_from([(), (1,), (3,), (2, 5), (2, 64)]))
        caches.append(_filled((num_blocks, block_size, *entry), draw(st.sampled_from(DTYPES)), 7 * c))
        groups.append(group)
    most = max(num_blocks * block_size for num_blocks, block_size in layouts)
    # Slots in and past the caches, PAD and other negatives; chains come from the small range.
    src = torch.randint(-2, most + 3, (num_groups, num_pairs), generator=generator)
    dst = torch.randint(-2, most + 3, (num_groups, num_pairs), generator=generator)
    pad = torch.rand((num_groups, num_pairs), generator=generator) < 0.2
    src[pad] = PAD
    return dict(src_slots=src.to(slot_dtype), dst_slots=dst.to(slot_dtype), kv_caches=caches, cache_groups=groups)


@settings(max_examples=examples(40))
@given(data=st.data())
def test_random_calls_on_every_backend(data):
    call = _random_call(data.draw)
    expected = expected_entries(call["kv_caches"], call["cache_groups"], call["src_slots"].tolist(),
                                call["dst_slots"].tolist())
    results = {}
    for name in BACKENDS:
        caches = [cache.clone() for cache in call["kv_caches"]]
        with specops.backend(name):
            specops.move_kv_cache_entries(call["src_slots"], call["dst_slots"], caches,
                                          cache_groups=call["cache_groups"])
        for c, cache in enumerate(caches):
            assert _entries(cache) == expected[c], f"{name}: kv_caches[{c}]"
        results[name] = caches
    for name, caches in results.items():  # byte equality of the implementations
        for c, cache in enumerate(caches):
            assert_same(cache.view(torch.uint8), results[BACKENDS[0]][c].view(torch.uint8), f"{name}: kv_caches[{c}]")


def _model_caches(layers: int, groups: int, dtypes) -> tuple[list[torch.Tensor], list[int]]:
    """K and V of every layer of every group, as a runner passes them (kv[0], kv[1])."""
    caches, cache_groups = [], []
    for g in range(groups):
        for layer in range(layers):
            kv = _filled((2, 3, 2 + g, 2, 4), dtypes[(g + layer) % len(dtypes)], layer)
            caches += [kv[0], kv[1]]
            cache_groups += [g, g]
    return caches, cache_groups


class _CountedKernel:
    def __init__(self, kernel):
        self.kernel, self.launches = kernel, 0

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches += 1
            return self.kernel[grid](*args, **kwargs)
        return launch


@pytest.mark.parametrize("dtypes", [[torch.bfloat16], DTYPES], ids=["one dtype", "mixed dtypes"])
def test_one_launch_for_60_layers_2_caches_3_groups(monkeypatch, dtypes):
    caches, cache_groups = _model_caches(60, 3, dtypes)
    src = torch.tensor([[2, 5, PAD], [4, 3, 9], [PAD, 8, 1]], dtype=torch.int32)
    dst = torch.tensor([[1, 2, PAD], [0, 4, 2], [PAD, 0, 10]], dtype=torch.int32)
    expected = expected_entries(caches, cache_groups, src.tolist(), dst.tolist())
    counted = _CountedKernel(triton_module._move_kv_cache_entries_kernel)
    monkeypatch.setattr(triton_module, "_move_kv_cache_entries_kernel", counted)
    with specops.backend("triton"):
        specops.move_kv_cache_entries(src, dst, caches, cache_groups=cache_groups)
    assert counted.launches == 1
    assert len(caches) == 360
    for c, cache in enumerate(caches):
        assert _entries(cache) == expected[c], c


def test_one_op_call_moves_every_cache():
    caches, cache_groups = _model_caches(4, 3, DTYPES)
    src = torch.tensor([[1], [2], [3]])
    dst = src - 1
    with specops.backend("native"), OpLog() as log:
        specops.move_kv_cache_entries(src, dst, caches, cache_groups=cache_groups)
    assert log.op_names() == ["move_kv_cache_entries"]


def test_the_word_is_the_widest_every_cache_allows():
    bf16 = torch.zeros(2, 2, 4, dtype=torch.bfloat16)  # 8-byte entries
    odd = torch.zeros(2, 2, 3, dtype=torch.int8)  # 3-byte entries
    assert triton_module._word_bytes([bf16]) == 4
    assert triton_module._word_bytes([bf16, torch.zeros(2, 2, 1, dtype=torch.float16)]) == 2
    assert triton_module._word_bytes([bf16, odd]) == 1


def _opcheck_args(slot_dtype):
    k = _filled((3, 2, 2, 4), torch.bfloat16, 0)
    v = _filled((3, 2, 2, 4), torch.bfloat16, 5)
    c = _filled((2, 4, 3), torch.int8, 9)
    src = torch.tensor([[5, 2, PAD], [7, 6, 0]], dtype=slot_dtype)
    dst = torch.tensor([[1, 5, 3], [6, 2, PAD]], dtype=slot_dtype)
    return (src, dst, [k, v, c], [0, 0, 1])


@pytest.mark.parametrize("slot_dtype", [torch.int32, torch.int64])
def test_opcheck(slot_dtype):
    torch.library.opcheck(torch.ops.specops.move_kv_cache_entries.default, _opcheck_args(slot_dtype))


def test_compiles_without_graph_break():
    src, dst, (k, v, c), groups = _opcheck_args(torch.int32)

    def step(src, dst, k, v, c):
        specops.move_kv_cache_entries(src + 0, dst, [k, v, c], cache_groups=groups)
        return k + 1, v * 2, c - 1

    args = (src, dst, k, v, c)
    eager = [t.clone() for t in args]
    expected = step(*eager)
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    for actual, wanted in zip(compiled(*args), expected):
        assert_same(actual, wanted)
    for actual, wanted in zip(args, eager):
        assert_same(actual.view(torch.uint8), wanted.view(torch.uint8))


def _share_k(call):
    call["kv_caches"][1] = call["kv_caches"][0][1:]


def _cache_over_src(call):
    """kv_caches[2] laid over the bytes of src_slots (which keeps its values)."""
    buffer = torch.zeros(64, dtype=torch.int8)
    src = buffer[:24].view(torch.int32).view(2, 3)
    src.copy_(call["src_slots"])
    call["src_slots"] = src
    call["kv_caches"][2] = buffer.view(2, 4, 8)


def _call() -> dict:
    src, dst, caches, groups = _opcheck_args(torch.int32)
    return dict(src_slots=src, dst_slots=dst, kv_caches=caches, cache_groups=groups)


def _set_cache(index, value):
    def change(call):
        call["kv_caches"] = [value(cache) if c == index else cache for c, cache in enumerate(call["kv_caches"])]
    return change


BAD_INPUTS = [
    ("src_slots", lambda call: call.update(src_slots=call["src_slots"].float())),
    ("src_slots", lambda call: call.update(src_slots=call["src_slots"][0])),
    ("dst_slots", lambda call: call.update(dst_slots=call["dst_slots"].long())),
    ("dst_slots", lambda call: call.update(dst_slots=call["dst_slots"][:, :2])),
    ("dst_slots", lambda call: call.update(dst_slots=call["dst_slots"][:1])),
    ("cache_groups must have one entry per cache", lambda call: call.update(cache_groups=[0, 0])),
    (r"cache_groups\[2\]", lambda call: call.update(cache_groups=[0, 0, 2])),
    (r"cache_groups\[0\]", lambda call: call.update(cache_groups=[-1, 0, 1])),
    (r"kv_caches\[1\] must be contiguous past its first dimension", _set_cache(1, lambda t: t.transpose(2, 3))),
    (r"kv_caches\[2\] must be contiguous past its first dimension", _set_cache(2, lambda t: t[:, ::2])),
    (r"kv_caches\[0\] must not have overlapping rows", _set_cache(0, lambda t: t.as_strided(t.shape, (4, 8, 4, 1)))),
    (r"kv_caches\[2\] must be \[num_blocks, block_size, \*entry\]", _set_cache(2, lambda t: t.flatten())),
    (r"kv_caches\[1\] must not share memory with kv_caches\[0\]", _share_k),
    (r"kv_caches\[2\] must not share memory with src_slots", _cache_over_src),
    (r"kv_caches\[1\] must be a tensor", _set_cache(1, lambda t: 3)),
]


@pytest.mark.parametrize("argument,change", BAD_INPUTS, ids=[f"{i}" for i in range(len(BAD_INPUTS))])
def test_bad_input_names_the_argument_and_moves_nothing(backend, argument, change):
    call = _call()
    change(call)
    before = [cache.clone() if isinstance(cache, torch.Tensor) else cache for cache in call["kv_caches"]]
    with pytest.raises((ValueError, RuntimeError), match=argument):
        specops.move_kv_cache_entries(**call)
    for c, (cache, old) in enumerate(zip(call["kv_caches"], before)):
        if isinstance(cache, torch.Tensor):
            assert torch.equal(cache.contiguous().view(torch.uint8), old.contiguous().view(torch.uint8)), f"a rejected call wrote kv_caches[{c}]"


def test_caches_on_another_device_than_the_pairs():
    call = _call()
    call["kv_caches"] = [cache.to("meta") for cache in call["kv_caches"]]
    with pytest.raises(ValueError, match=r"kv_caches\[0\] must be on cpu like src_slots"):
        specops.move_kv_cache_entries(**call)


def test_int64_index_math_where_a_cache_passes_int32_words(monkeypatch):
    """The kernel's int64 index math (INDEX64, taken when a cache spans 2^31 words or more), here
    forced by a lower bound: the same entries moved."""
    monkeypatch.setattr(triton_module, "INT32_MAX", 10)
    monkeypatch.setattr(triton_module, "_TABLES", {})
    for slot_dtype in (torch.int32, torch.int64):
        src, dst, caches, groups = _opcheck_args(slot_dtype)
        expected = expected_entries(caches, groups, src.tolist(), dst.tolist())
        with specops.backend("triton"):
            specops.move_kv_cache_entries(src, dst, caches, cache_groups=groups)
        assert [_entries(cache) for cache in caches] == expected
    assert all(plan[3] for plan in triton_module._TABLES.values())  # INDEX64 was taken


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2, torch.bool, torch.uint8, torch.int64,
                                   torch.float64, torch.complex64], ids=str)
def test_every_dtype_moves_its_bytes(backend, dtype):
    """The move is a copy of bytes: fp8 caches (and any other dtype) move as bf16 ones do."""
    base = torch.arange(2 * 4 * 3).view(2, 4, 3)
    cache = (base % 2).to(dtype) if dtype == torch.bool else base.to(dtype)
    before = cache.clone()
    specops.move_kv_cache_entries(torch.tensor([[6, 7, PAD]]), torch.tensor([[5, 6, 0]]), [cache])
    slots, old = cache.view(8, 3).view(torch.uint8), before.view(8, 3).view(torch.uint8)
    assert torch.equal(slots[5], old[6]) and torch.equal(slots[6], old[7])
    assert torch.equal(slots[:5], old[:5]) and torch.equal(slots[7], old[7])


@pytest.mark.parametrize("pairs,expected", [
    # A chain forward: each pair reads what the pair before it wrote, across groups of 4 pairs.
    ([(s, s + 1) for s in range(9)], [0] * 10 + [10, 11]),
    # A chain backward: each pair reads before the next one writes.
    ([(s + 1, s) for s in range(9)], [1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 10, 11]),
    # Two pairs writing one slot (the later wins), a pair reading it after, PAD between.
    ([(0, 5), (1, 5), (PAD, PAD), (5, 6), (2, 5), (5, 7)], [0, 1, 2, 3, 4, 2, 1, 2, 8, 9, 10, 11]),
], ids=["forward chain", "backward chain", "rewrites"])
def test_hand_computed_orders_across_groups_of_pairs(backend, pairs, expected):
    cache = torch.arange(12, dtype=torch.int32).view(3, 4, 1)
    src = torch.tensor([[s for s, _ in pairs]])
    dst = torch.tensor([[d for _, d in pairs]])
    specops.move_kv_cache_entries(src, dst, [cache])
    assert cache.flatten().tolist() == expected
