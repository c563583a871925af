"""Triton kernel for move_kv_cache_entries: every cache's slot moves in one launch.

The caches are reached through a table of their base addresses (one int64 row per cache: address,
block stride, entry, block size, slot count, group; in words), cast in the kernel with
`.to(tl.pointer_type(...))`: one launch for any number of caches, where plain pointer arguments
(triton_kernels/_groups.py) would need one per few. The move is a copy of words (4, 2 or 1 bytes:
the widest that divides every cache's entry, block stride and address), so caches of every dtype
share the launch too: one launch a call, whatever the layers, groups and dtypes.

A task is one cache's chunk of BLOCK words of the entry. It walks its group's pairs in row order,
4 at a time: the 4 sources' chunks loaded, then stored at the destinations in order, a pair whose
source an earlier pair of the 4 writes taking that pair's words (forwarded in registers). The
same lane reads and writes the same word of an entry, so program order applies the groups of 4
one after another: the result is the host body's (a pair sees the writes of the pairs before it),
with no barrier (no two tasks touch the same word). A skipped pair (PAD, or a slot outside the cache) reads and
writes no word: its slots are clamped to 0 and its run of words is bounded by 0, so every access
is a contiguous run masked by a bound on its index, in bounds whatever the slots
(docs/device_readiness.md, "What the NPU route needs of a kernel").

The table is built on the host from the caches' metadata (no device value is read) and kept per
set of caches, so the steady state of a runner, which passes the same caches every step, copies
nothing to the device but the launch.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops.triton_kernels._launch import _placeholder, num_programs

BLOCK = 256  # words of an entry per task (an entry of 8 heads x 128 bf16 values is 512 words)
FIELDS = 6  # base address, block stride, entry, block size, slot count, group (words, int64)
INT32_MAX = 2**31 - 1
_WORDS = {4: torch.int32, 2: torch.int16, 1: torch.int8}
_TABLES: dict[tuple, tuple] = {}  # the per-caches launch plan, by the caches' metadata
_MAX_TABLES = 16  # a runner has one set of caches (two with a drafter's); a bound keeps stale sets out

UNSPECIALIZED = ["num_pairs", "src_row_stride", "dst_row_stride", "num_tasks", "chunks"]


@triton.jit
def _pair(src_row, dst_row, p, num_pairs, num_slots, block_size, block_stride, entry, INDEX64: tl.constexpr):
    """Pair p of a row: its slots (0 where it is skipped), whether it moves, the word offsets of its
    source and destination entries, and the bound of its run of words (0: it moves none)."""
    at = tl.where(p < num_pairs, p, 0)  # a pair past the row (the last group of 4) reads pair 0
    src = tl.load(src_row + at)
    dst = tl.load(dst_row + at)
    limit = num_slots.to(src.dtype)  # compared in the dtype the slots are loaded in
    valid = (p < num_pairs) & (src >= 0) & (src < limit) & (dst >= 0) & (dst < limit)
    src = tl.where(valid, src, 0)
    dst = tl.where(valid, dst, 0)
    if INDEX64:
        src = src.to(tl.int64)
        dst = dst.to(tl.int64)
    else:
        src = src.to(tl.int32)
        dst = dst.to(tl.int32)
    src_block = src // block_size
    dst_block = dst // block_size
    src_at = src_block * block_stride + (src - src_block * block_size) * entry
    dst_at = dst_block * block_stride + (dst - dst_block * block_size) * entry
    # The pair's validity folded into the bound of the entry's words: each access is a contiguous
    # run masked by a bound on its index (no words for a skipped pair), which the NPU route copies
    # as one block (a per-lane condition would make it scalar accesses).
    return src, dst, valid, src_at, dst_at, tl.where(valid, entry, 0)


@triton.jit
def _forwarded(words, src, valid, earlier_words, earlier_dst, earlier_valid):
    """A pair's words, or an earlier pair's of the same group of 4 that wrote its source."""
    return tl.where(valid & earlier_valid & (earlier_dst == src), earlier_words, words)


@triton.jit(do_not_specialize=UNSPECIALIZED)
def _move_kv_cache_entries_kernel(
    table_ptr, word_ptr, src_ptr, dst_ptr, num_pairs, src_row_stride, dst_row_stride, num_tasks, chunks,
    BLOCK: tl.constexpr, INDEX64: tl.constexpr,
):
    pid = tl.program_id(0)
    num_progs = tl.num_programs(0)
    for task in range(pid, num_tasks, num_progs):
        cache = task // chunks
        chunk = task - cache * chunks
        row = table_ptr + cache * 6
        base = tl.load(row).to(tl.pointer_type(word_ptr.dtype.element_ty))
        if INDEX64:
            block_stride = tl.load(row + 1)
            entry = tl.load(row + 2)
            block_size = tl.load(row + 3)
        else:  # every word of every cache of the launch has an int32 index
            block_stride = tl.load(row + 1).to(tl.int32)
            entry = tl.load(row + 2).to(tl.int32)
            block_size = tl.load(row + 3).to(tl.int32)
        num_slots = tl.load(row + 4)  # clamped on the host to the slots' dtype
        group = tl.load(row + 5).to(tl.int32)
        offset = chunk * BLOCK + tl.arange(0, BLOCK)
        src_row = src_ptr + group * src_row_stride
        dst_row = dst_ptr + group * dst_row_stride
        # Pairs 4 at a time: the 4 sources are loaded together (4 loads in flight, not one), then
        # stored in order. A pair whose source an earlier pair of the 4 wrote takes that pair's
        # words (forwarded; the latest such pair's), so the result is the pairs' one by one.
        for first in range(0, num_pairs, 4):
            s0, d0, v0, src_0, dst_0, bound_0 = _pair(src_row, dst_row, first, num_pairs, num_slots, block_size,
                                                      block_stride, entry, INDEX64)
            s1, d1, v1, src_1, dst_1, bound_1 = _pair(src_row, dst_row, first + 1, num_pairs, num_slots, block_size,
                                                      block_stride, entry, INDEX64)
            s2, d2, v2, src_2, dst_2, bound_2 = _pair(src_row, dst_row, first + 2, num_pairs, num_slots, block_size,
                                                      block_stride, entry, INDEX64)
            s3, d3, v3, src_3, dst_3, bound_3 = _pair(src_row, dst_row, first + 3, num_pairs, num_slots, block_size,
                                                      block_stride, entry, INDEX64)
            w0 = tl.load(base + src_0 + offset, mask=offset < bound_0, other=0)
            w1 = tl.load(base + src_1 + offset, mask=offset < bound_1, other=0)
            w2 = tl.load(base + src_2 + offset, mask=offset < bound_2, other=0)
            w3 = tl.load(base + src_3 + offset, mask=offset < bound_3, other=0)
            w1 = _forwarded(w1, s1, v1, w0, d0, v0)
            w2 = _forwarded(w2, s2, v2, w0, d0, v0)
            w2 = _forwarded(w2, s2, v2, w1, d1, v1)
            w3 = _forwarded(w3, s3, v3, w0, d0, v0)
            w3 = _forwarded(w3, s3, v3, w1, d1, v1)
            w3 = _forwarded(w3, s3, v3, w2, d2, v2)
            tl.store(base + dst_0 + offset, w0, mask=offset < bound_0)
            tl.store(base + dst_1 + offset, w1, mask=offset < bound_1)
            tl.store(base + dst_2 + offset, w2, mask=offset < bound_2)
            tl.store(base + dst_3 + offset, w3, mask=offset < bound_3)


def _word_bytes(caches: list[torch.Tensor]) -> int:
    """The widest word (4, 2 or 1 bytes) that divides every cache's address, entry and block stride."""
    word = 4
    for cache in caches:
        size = cache.element_size()
        entry = cache[0, 0].numel() * size
        for value in (cache.data_ptr(), entry, cache.stride(0) * size):
            while value % word:
                word //= 2
    return word


def _plan(a) -> tuple | None:
    """(table, word dtype, chunks, INDEX64) for the call's caches, built once per set of caches."""
    used = [(cache, group) for cache, group in zip(a.kv_caches, a.cache_groups) if cache.numel() > 0]
    if not used:
        return None
    slot_max = torch.iinfo(a.src_slots.dtype).max
    key = (a.src_slots.device, a.src_slots.dtype,
           tuple((c.data_ptr(), c.dtype, tuple(c.shape), c.stride(0), g) for c, g in used))
    plan = _TABLES.get(key)
    if plan is not None:
        return plan
    caches = [cache for cache, _ in used]
    word = _word_bytes(caches)
    rows, widest, most_words = [], 0, 0
    for cache, group in used:
        size = cache.element_size()
        entry = cache[0, 0].numel() * size // word
        block_stride = cache.stride(0) * size // word
        num_blocks, block_size = cache.shape[:2]
        rows.append([cache.data_ptr(), block_stride, entry, block_size, min(num_blocks * block_size, slot_max), group])
        widest = max(widest, (num_blocks - 1) * block_stride + block_size * entry)
        most_words = max(most_words, entry)
    table = torch.tensor(rows, dtype=torch.int64).to(a.src_slots.device)
    plan = (table, _WORDS[word], triton.cdiv(most_words, BLOCK), widest > INT32_MAX, len(rows))
    if len(_TABLES) >= _MAX_TABLES:
        _TABLES.clear()
    _TABLES[key] = plan
    return plan


def move_kv_cache_entries(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    num_pairs = a.src_slots.size(1)
    if num_pairs == 0:
        return
    plan = _plan(a)
    if plan is None:
        return
    table, word, chunks, index64, num_caches = plan
    num_tasks = num_caches * chunks
    grid = (num_programs(a.src_slots.device, num_tasks),)
    _move_kv_cache_entries_kernel[grid](
        table, _placeholder(word, a.src_slots.device), a.src_slots, a.dst_slots, num_pairs, a.src_slots.stride(0),
        a.dst_slots.stride(0), num_tasks, chunks, BLOCK=BLOCK, INDEX64=index64,
    )
