"""Triton parts of the sas family's schedule (triton_kernels/sas_metadata.py holds the kernel):
where each batch's lengths come from, a tile's cost by each member's tile rule (sas_metadata's,
and the lightning indexer's of csrc/kernels/lightning_indexer_metadata.h), and the second launch
of a paired layout (kv_quant_sas_metadata with 128 heads): the S2 blocks of each core pair's tiles
and the pair's second entry; and the family's host route (on the NPU, and on any device given host
lengths), which launches neither kernel."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import triton
import triton.language as tl

from specops.launch_target import on_npu
# pinned_words: called through this module's name (the tests replace it here).
from specops.sas_layout import pinned_words  # noqa: F401

Launcher = Callable[..., None]

# The tile rules of triton_kernels/sas_metadata.py's kernel (its COST constexpr).
COST_SAS = 0
COST_INDEXER_A3 = 1  # t * ((1536 + k) // 2), (2560 + k) above 1024 keys
COST_INDEXER_950 = 2  # the sas block cost


@triton.jit
def _indexer_block_cost(rows, keys, group, COST: tl.constexpr):
    if COST == 1:
        return rows // group * ((tl.where(keys <= 1024, 1536, 2560) + keys) // 2)
    return 6 * ((rows + 15) // 16) + 10 * ((keys + 63) // 64)


@triton.jit
def indexer_tile_cost(m, s1, s2, tiles, leftover, group, m_tile, s2_tile, mask_mode, cmp_ratio, COST: tl.constexpr):
    """Cost, last-block cost, whether M tile m sees keys and its blocks: the keys [0, hi], hi the
    last token's position when causal (clipped into [0, s2 - 1]), else s2 - 1, compressed by
    cmp_ratio and cut into S2 tiles."""
    first_row = m.to(tl.int64) * m_tile
    end_row = tl.minimum(first_row + m_tile, s1 * group)
    last_token = (end_row - 1) // group
    hi = tl.where(mask_mode == 3, last_token + s2 - s1, s2 - 1)
    hi = tl.minimum(tl.maximum(hi, 0), s2 - 1)
    keys = tl.where(s2 > 0, (hi + 1) // cmp_ratio, 0)
    sees = keys > 0
    blocks = (keys + s2_tile - 1) // s2_tile
    tail = keys % s2_tile
    rows = tl.where((m == tiles - 1) & (leftover != 0), leftover, m_tile)
    full_cost = _indexer_block_cost(rows, s2_tile + keys * 0, group, COST)
    tail_cost = tl.where(tail > 0, _indexer_block_cost(rows, tail, group, COST), 0)
    cost = tl.where(sees, full_cost * (blocks - tl.where(tail > 0, 1, 0)) + tail_cost, 0)
    last_block_cost = tl.where(sees, tl.where(tail > 0, tail_cost, full_cost), 0)
    return cost, last_block_cost, sees, blocks


@triton.jit
def _lengths(ptr, b, live, constant, SOURCE: tl.constexpr):
    """Each lane's length (int64) and whether the values read for it fit int32."""
    if SOURCE == 0:  # SOURCE_CONSTANT
        value = tl.zeros_like(b).to(tl.int64) + constant
        fits = value == value
    elif SOURCE == 1:  # SOURCE_PER_BATCH
        value = tl.load(ptr + b, mask=live, other=0).to(tl.int64)
        fits = (value >= -2147483648) & (value <= 2147483647)
    elif SOURCE == 2:  # SOURCE_CUMULATIVE
        first = tl.load(ptr + b, mask=live, other=0).to(tl.int64)
        after = tl.load(ptr + b + 1, mask=live, other=0).to(tl.int64)
        value = after - first
        fits = (first >= -2147483648) & (first <= 2147483647) & (after >= -2147483648) & (after <= 2147483647)
    else:  # SOURCE_PREFIX_SUMS: tensor[b] - tensor[b - 1], tensor[-1] = 0 (clamped offset for b = 0)
        after = tl.load(ptr + b, mask=live, other=0).to(tl.int64)
        first = tl.load(ptr + tl.maximum(b - 1, 0), mask=live & (b > 0), other=0).to(tl.int64)
        value = after - first
        fits = (first >= -2147483648) & (first <= 2147483647) & (after >= -2147483648) & (after <= 2147483647)
    return value, fits


@triton.jit
def _tile_cost(m, s1, s2, tiles, leftover, group, m_tile, s2_tile, mask_mode, win_left, win_right, has_cmp_kv,
               cmp_ratio, cmp_topk, COST: tl.constexpr):
    """Cost, last-block cost, whether M tile m sees KV and its S2 blocks (elementwise; s2 > 0
    where used), by the variant's tile rule (COST: _sas_family.COST_*)."""
    if COST == 0:
        cost, last_block_cost, sees, blocks = _sas_tile_cost(m, s1, s2, tiles, leftover, group, m_tile, s2_tile,
                                                             mask_mode, win_left, win_right, has_cmp_kv, cmp_ratio,
                                                             cmp_topk)
    else:
        cost, last_block_cost, sees, blocks = indexer_tile_cost(m, s1, s2, tiles, leftover, group, m_tile, s2_tile,
                                                                mask_mode, cmp_ratio, COST)
    return cost, last_block_cost, sees, blocks


@triton.jit
def _sas_tile_cost(m, s1, s2, tiles, leftover, group, m_tile, s2_tile, mask_mode, win_left, win_right, has_cmp_kv,
                   cmp_ratio, cmp_topk):
    first_row = m.to(tl.int64) * m_tile  # int64: first_row + m_tile can pass 2^31
    end_row = tl.minimum(first_row + m_tile, s1 * group)
    first_token = first_row // group
    last_token = (end_row - 1) // group
    offset = s2 - s1  # token t sits at KV position s2 - s1 + t
    lo = tl.where(mask_mode == 4, first_token + offset - win_left, 0)
    hi = tl.where(mask_mode == 0, s2 - 1, last_token + offset + tl.where(mask_mode == 4, win_right, 0))
    sees = (lo < s2) & (hi >= 0) & (hi >= lo)
    lo = tl.maximum(lo, 0)
    hi = tl.minimum(hi, s2 - 1)
    window = tl.where(sees, hi - lo + 1, 0)
    compressed = tl.where(sees & (has_cmp_kv != 0), (hi + 1) // cmp_ratio, 0)
    compressed = tl.where(cmp_topk > 0, tl.minimum(compressed, cmp_topk), compressed)
    rows = tl.where((m == tiles - 1) & (leftover != 0), leftover, m_tile)
    per_block = 6 * ((rows + 15) // 16)
    # The S2 tile is a multiple of 64: the 10 ceil(t / 64) of a range's blocks add up to
    # 10 ceil(range / 64).
    blocks = (window + s2_tile - 1) // s2_tile + (compressed + s2_tile - 1) // s2_tile
    cost = tl.where(sees, per_block * blocks + 10 * ((window + 63) // 64 + (compressed + 63) // 64), 0)
    last_range = tl.where(compressed > 0, compressed, window)
    last_block = last_range - ((last_range + s2_tile - 1) // s2_tile - 1) * s2_tile
    last_block_cost = tl.where(sees, per_block + 10 * ((last_block + 63) // 64), 0)
    return cost, last_block_cost, sees, tl.where(sees, blocks, 0)


@triton.jit
def _batches(query_ptr, kv_ptr, b0, num_batches, query_constant, kv_constant, group, m_tile,
             QUERY_SOURCE: tl.constexpr, KV_SOURCE: tl.constexpr, REQS: tl.constexpr):
    """Batches [b0, b0 + REQS), one per lane: S1, S2, M tiles and leftover rows of the last tile,
    and whether the values are valid (int32, lengths >= 0, at most 2^31 - 1 query rows). Lanes
    past the end, and invalid ones, get no tiles."""
    b = b0 + tl.arange(0, REQS)
    live = b < num_batches
    s1, query_fits = _lengths(query_ptr, b, live, query_constant, QUERY_SOURCE)
    s2, kv_fits = _lengths(kv_ptr, b, live, kv_constant, KV_SOURCE)
    rows = s1 * group
    valid = (query_fits & kv_fits & (s1 >= 0) & (s2 >= 0) & (rows <= 2147483647)) | (live == 0)
    tiles = tl.where(live & valid, (rows + m_tile - 1) // m_tile, 0)
    leftover = tl.where(live & valid, rows % m_tile, 0)
    return s1, s2, tiles, leftover, valid


@triton.jit
def _blocks_between(query_ptr, kv_ptr, start_b, start_m, end_b, end_m, num_batches, query_constant, kv_constant,
                    group, m_tile, s2_tile, mask_mode, win_left, win_right, has_cmp_kv, cmp_ratio, cmp_topk,
                    QUERY_SOURCE: tl.constexpr, KV_SOURCE: tl.constexpr, REQS: tl.constexpr, LANES: tl.constexpr,
                    COST: tl.constexpr):
    """The S2 blocks of the M tiles from cursor (start_b, start_m) up to (end_b, end_m)."""
    req = tl.arange(0, REQS)
    lane = tl.arange(0, LANES)
    blocks = tl.zeros([], tl.int64)
    bb = start_b
    while (bb <= end_b) & (bb < num_batches):
        s1, s2, tiles, leftover, _ = _batches(query_ptr, kv_ptr, bb, num_batches, query_constant, kv_constant, group,
                                              m_tile, QUERY_SOURCE, KV_SOURCE, REQS)
        b_s1 = tl.sum(tl.where(req == 0, s1, 0))
        b_s2 = tl.sum(tl.where(req == 0, s2, 0))
        b_tiles = tl.sum(tl.where(req == 0, tiles, 0))
        b_leftover = tl.sum(tl.where(req == 0, leftover, 0))
        t0 = tl.where(bb == start_b, start_m, 0).to(tl.int64)
        hi = tl.where(bb == end_b, end_m, b_tiles).to(tl.int64)
        while t0 < hi:
            t = t0 + lane
            _cost, _last, _sees, tile_blocks = _tile_cost(t, b_s1, b_s2, b_tiles, b_leftover, group, m_tile, s2_tile,
                                                          mask_mode, win_left, win_right, has_cmp_kv, cmp_ratio,
                                                          cmp_topk, COST)
            blocks += tl.sum(tl.where((t < hi) & (b_s2 > 0), tile_blocks, 0))
            t0 += LANES
        bb += 1
    return blocks


@triton.jit
def _finish_pairs_kernel(
    query_ptr, kv_ptr, out_ptr,
    num_batches, query_constant, kv_constant, group, m_tile, s2_tile, mask_mode, win_left, win_right, has_cmp_kv,
    cmp_ratio, cmp_topk, num_pairs,
    QUERY_SOURCE: tl.constexpr, KV_SOURCE: tl.constexpr, REQS: tl.constexpr, LANES: tl.constexpr,
    COST: tl.constexpr, ENTRY_WORDS: tl.constexpr, ENTRY_WIDTH: tl.constexpr,
):
    """After _sas_metadata_kernel wrote the first entry of each core pair: the most S2 blocks any
    pair got (its tiles, from its start cursor to its end one), then each pair's second entry, a
    copy of the first, and word 8 of both."""
    field = tl.arange(0, ENTRY_WORDS)
    most = tl.zeros([], tl.int64)
    for pair in range(0, num_pairs):
        entry = tl.load(out_ptr + 2 * ENTRY_WIDTH * pair + field)
        if tl.sum(tl.where(field == 0, entry, 0)) != 0:
            blocks = _blocks_between(query_ptr, kv_ptr, tl.sum(tl.where(field == 1, entry, 0)),
                                     tl.sum(tl.where(field == 2, entry, 0)), tl.sum(tl.where(field == 4, entry, 0)),
                                     tl.sum(tl.where(field == 5, entry, 0)), num_batches, query_constant,
                                     kv_constant, group, m_tile, s2_tile, mask_mode, win_left, win_right, has_cmp_kv,
                                     cmp_ratio, cmp_topk, QUERY_SOURCE, KV_SOURCE, REQS, LANES, COST)
            most = tl.maximum(most, blocks)
    for pair in range(0, num_pairs):
        first = out_ptr + 2 * ENTRY_WIDTH * pair
        tl.store(first + ENTRY_WIDTH + field, tl.load(first + field))
        tl.store(first + ENTRY_WORDS, most.to(tl.int32))
        tl.store(first + ENTRY_WIDTH + ENTRY_WORDS, most.to(tl.int32))


# What stands for a device tensor that holds no values (vllm-ascend's empty placeholders): an
# empty tensor means "not provided" whatever its dtype, shape and device, so the host op gets
# this one instead of a copy.
_NOT_PROVIDED = torch.empty(0, dtype=torch.int32)


def host_inputs(inputs: tuple) -> list[object]:
    """The op's arguments for its C++ host op: host tensors as they are, a device tensor that
    holds no values as the empty host placeholder (refuse_device_lengths has refused every
    device tensor with values: reading one on the host would sync the stream)."""
    return [_NOT_PROVIDED if isinstance(value, torch.Tensor) and value.device.type != "cpu" else value
            for value in inputs]


def refuse_device_lengths(arguments: tuple) -> None:
    """On the host route a length tensor that holds values on out's device is refused, naming the
    host copy to pass instead: the schedule is planned on the host, and reading a device tensor
    there would drain the stream on every call (docs/sas_metadata.md says why this is an error,
    not a silent copy). The op's checks have refused every other device (out's, or the host)."""
    out = arguments[-1]
    for name, value in zip(arguments._fields, arguments[:-1]):
        if isinstance(value, torch.Tensor) and value.device.type != "cpu" and value.numel():
            raise ValueError(f"{name} is on {out.device}: on this device the schedule is planned on the host, which "
                             f"would read {name} back with a blocking copy that drains the stream; pass its host "
                             f"copy instead (the runner's query_start_loc_cpu / seq_lens_cpu, or {name}.cpu() where "
                             "a sync is wanted)")


def plans_on_host(inputs: list[object], out: torch.Tensor) -> bool:
    """Whether a call takes the host route: always on the NPU (where the kernel does not compile),
    and for any device output when the lengths are host tensors (the recommended form: nothing
    to launch but one copy, nothing read back). All on the CPU, the kernel runs (the interpreter)."""
    if on_npu(out.device):
        return True
    return out.device.type != "cpu" and any(
        isinstance(value, torch.Tensor) and value.device.type == "cpu" and value.numel() for value in inputs)


def host_route(op_name: str, arguments: tuple) -> None:
    """The host route of the family's op `op_name`: its C++ host op on the host length tensors,
    then, for a device `out` (the last argument), one non-blocking copy of the 1024 words from
    pinned staging on the current stream. Nothing waits for the device and nothing is read from
    it; the words are in `out` for every kernel enqueued after this call on that stream (a reader
    on another stream waits on an event, as for any producer)."""
    refuse_device_lengths(arguments)
    *inputs, out = arguments
    host_op = getattr(torch.ops.specops, op_name).default
    if out.device.type == "cpu":
        host_op(*host_inputs(inputs), out)
        return
    staged = pinned_words()
    host_op(*host_inputs(inputs), staged)
    out.copy_(staged, non_blocking=True)


def npu_host_routed(op_name: str) -> Callable[[Launcher], Launcher]:
    """A family member's launcher that takes `host_route` where `plans_on_host` says so (on the
    NPU, where the kernel does not compile: triton_kernels/sas_metadata.py says why; on any device
    given host lengths) and launches the kernel everywhere else; all three members use it. The
    launcher takes the op's argument record (ops/_op.py), checked."""
    def route(launcher: Launcher) -> Launcher:
        @functools.wraps(launcher)
        def routed(arguments: tuple) -> None:
            if plans_on_host(arguments[:-1], arguments[-1]):
                host_route(op_name, arguments)
            else:
                launcher(arguments)
        return routed
    return route
