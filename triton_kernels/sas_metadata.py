"""Triton kernel for sas_metadata (docs/sas_metadata.md): the greedy schedule of csrc/kernels/sas_metadata.h
without a host sync.

One program. The schedule is a serial scan, but most of it is vector work: items are walked in
blocks of LANES lanes (REQS requests of up to ITEMS_PER_REQ items each packed side by side, or a
slice of one longer request), a block's whole items are taken by one prefix sum, and only the
item that does not fit the current core is walked piece by piece. The schedule lives in
registers ([CORE_SLOTS, 8] tables) until the end, then every word of `out` is stored exactly
once, so the program never reads back what it wrote.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops.sas_layout import (
    ENTRY_WORDS,
    FIXED_COST,
    HEADER_WORDS,
    INT32_MAX,
    LAYOUT_VERSION,
    M_TILE,
    NUM_WORDS,
    kv_tile_for,
)

REQS = 32
ITEMS_PER_REQ = 8
CORE_SLOTS = 64  # >= MAX_CUBE_CORES: rows of the FA table and of the split-item table
FD_SLOTS = 128  # >= MAX_VECTOR_CORES


@triton.jit
def _pick(values, lane, k):
    """values[k] of a lane vector, as a scalar."""
    return tl.sum(tl.where(lane == k, values, 0))


@triton.jit
def _fields(cols, f0, f1, f2, f3, f4, f5, f6, f7):
    """The eight words of an entry laid along `cols`."""
    return tl.where(cols == 0, f0, tl.where(cols == 1, f1, tl.where(cols == 2, f2, tl.where(cols == 3, f3,
           tl.where(cols == 4, f4, tl.where(cols == 5, f5, tl.where(cols == 6, f6, f7)))))))


@triton.jit
def _put(table, rows, cols, row, first_col, last_col, f0, f1, f2, f3, f4, f5, f6, f7):
    """table[row, first_col:last_col + 1] = (f0 .. f7)[first_col:last_col + 1]."""
    target = (rows == row) & (cols >= first_col) & (cols <= last_col)
    return tl.where(target, _fields(cols, f0, f1, f2, f3, f4, f5, f6, f7), table)


@triton.jit
def _get(table, rows, cols, row, col):
    return tl.sum(tl.sum(tl.where((rows == row) & (cols == col), table, 0), axis=1), axis=0)


@triton.jit
def _column(table, cols, col):
    return tl.sum(tl.where(cols == col, table, 0), axis=1)


@triton.jit
def _request_shape(cu_seqlens_q_ptr, seqused_kv_ptr, req, live, num_heads_kv, group, M_TILE: tl.constexpr):
    """Query length, KV length, query rows and item count of each lane's request; `bad` flags
    values a schedule cannot hold (their requests get no items)."""
    safe = tl.where(live, req, 0)
    q_len = (tl.load(cu_seqlens_q_ptr + safe + 1, mask=live, other=0).to(tl.int64)
             - tl.load(cu_seqlens_q_ptr + safe, mask=live, other=0).to(tl.int64))
    kv_len = tl.load(seqused_kv_ptr + safe, mask=live, other=0).to(tl.int64)
    rows = q_len * group
    bad = live & ((q_len < 0) | (kv_len < 0) | (rows > 2147483647))
    tiles = tl.where(bad | (rows <= 0), 0, (rows + M_TILE - 1) // M_TILE)
    return q_len, kv_len, rows, tiles, tiles * num_heads_kv, bad


@triton.jit
def _sas_metadata_kernel(
    cu_seqlens_q_ptr, seqused_kv_ptr, out_ptr,
    num_reqs, num_heads_kv, group, kv_tile, window_left, window_right, num_cube_cores, num_vector_cores,
    LAYOUT_VERSION: tl.constexpr, M_TILE: tl.constexpr, FIXED_COST: tl.constexpr, NUM_WORDS: tl.constexpr,
    HEADER_WORDS: tl.constexpr, ENTRY_WORDS: tl.constexpr,
    REQS: tl.constexpr, ITEMS_PER_REQ: tl.constexpr, CORE_SLOTS: tl.constexpr, FD_SLOTS: tl.constexpr,
):
    LANES: tl.constexpr = REQS * ITEMS_PER_REQ
    MIN_CAP: tl.constexpr = 1 + FIXED_COST
    lane = tl.arange(0, LANES)
    rows2d = tl.arange(0, CORE_SLOTS)[:, None]
    cols2d = tl.arange(0, ENTRY_WORDS)[None, :]

    valid = tl.full([], 1, tl.int32)
    base = tl.zeros([], tl.int64)
    cap = tl.zeros([], tl.int64)
    fa = tl.zeros([CORE_SLOTS, ENTRY_WORDS], tl.int64)  # per cube core, the words of its FA entry
    splits = tl.zeros([CORE_SLOTS, ENTRY_WORDS], tl.int64)  # per split item: bn2, m, ws_start, ws_num, rows
    num_splits = tl.zeros([], tl.int64)
    slots = tl.zeros([], tl.int64)
    total = tl.zeros([], tl.int64)
    overflow = tl.full([], 0, tl.int32)

    # Scan 0 checks the values and sums the unsplit cost; scan 1 runs the greedy fill at the
    # lower bound of the cap; scan 2 reruns it one higher when scan 1 ran out of cores.
    for scan in range(3):
        run = scan == 0
        if scan == 1:
            lower_bound = (base + num_cube_cores - 1) // num_cube_cores
            cap = tl.where(lower_bound < MIN_CAP, lower_bound + 1, lower_bound)
            run = (valid != 0) & (base > 0)
        if scan == 2:
            run = (valid != 0) & (overflow != 0)
            cap = cap + 1
        if run & (scan > 0):
            fa = tl.zeros([CORE_SLOTS, ENTRY_WORDS], tl.int64)
            splits = tl.zeros([CORE_SLOTS, ENTRY_WORDS], tl.int64)
            num_splits = tl.zeros([], tl.int64)
            slots = tl.zeros([], tl.int64)
            total = tl.zeros([], tl.int64)
            overflow = tl.full([], 0, tl.int32)
        core = tl.zeros([], tl.int64)
        load = tl.zeros([], tl.int64)

        b = tl.zeros([], tl.int32)
        j0 = tl.zeros([], tl.int64)
        while run & (b < num_reqs):
            # The REQS requests from b, one per ITEMS_PER_REQ lanes.
            packed_req = b + lane // ITEMS_PER_REQ
            packed_live = (packed_req >= 0) & (packed_req < num_reqs)
            _, _, _, _, packed_items, bad = _request_shape(
                cu_seqlens_q_ptr, seqused_kv_ptr, packed_req, packed_live, num_heads_kv, group, M_TILE)
            if tl.max(bad.to(tl.int32)) > 0:
                valid = tl.full([], 0, tl.int32)
            first_long = tl.min(tl.where(packed_live & (packed_items > ITEMS_PER_REQ), packed_req, num_reqs))
            items_of_b = _pick(packed_items, lane, 0)
            # A request with more items than ITEMS_PER_REQ gets blocks of its own.
            alone = (j0 > 0) | (first_long == b)
            req = tl.where(alone, b, packed_req)
            item = tl.where(alone, j0 + lane, lane % ITEMS_PER_REQ)
            live = tl.where(alone, item < items_of_b, packed_live & (packed_req < first_long) & (item < packed_items))
            if alone:
                j0 = j0 + LANES
                if j0 >= items_of_b:
                    b = b + 1
                    j0 = j0 * 0
            else:
                b = tl.minimum(first_long, b + REQS)

            q_len, kv_len, rows, tiles, _, _ = _request_shape(
                cu_seqlens_q_ptr, seqused_kv_ptr, req, live, num_heads_kv, group, M_TILE)
            n2 = item // tl.maximum(tiles, 1)
            m = item - n2 * tiles
            row_begin = m * M_TILE
            row_end = tl.minimum(row_begin + M_TILE, rows)
            first_position = kv_len - q_len + row_begin // group
            last_position = kv_len - q_len + (row_end - 1) // group
            lo = tl.where(window_left < 0, 0, tl.maximum(first_position - window_left, 0))
            hi = tl.where(window_right < 0, kv_len, tl.minimum(last_position + window_right + 1, kv_len))
            scheduled = live & (hi > lo) & (tiles > 0)
            chunks = tl.where(scheduled, (hi - lo + kv_tile - 1) // kv_tile, 0)
            units = tl.where(scheduled, chunks + FIXED_COST, 0)
            bn2 = req.to(tl.int64) * num_heads_kv + n2
            tile_rows = row_end - row_begin

            if scan == 0:
                base += tl.sum(units)
                if base > 2147483647:
                    valid = tl.full([], 0, tl.int32)
                run = valid != 0
            else:
                start = tl.zeros([], tl.int32)
                while start < LANES:
                    # Whole items while they fit the current core.
                    pending = tl.where(lane >= start, units, 0)
                    over = (pending > 0) & (load + tl.cumsum(pending, 0) > cap)
                    k = tl.min(tl.where(over, lane, LANES))
                    taken = (pending > 0) & (lane < k)
                    taken_units = tl.sum(tl.where(taken, pending, 0))
                    if taken_units > 0:
                        first = tl.min(tl.where(taken, lane, LANES))
                        last = tl.max(tl.where(taken, lane, -1))
                        if load == 0:
                            fa = _put(fa, rows2d, cols2d, core, 0, 3, 1, _pick(bn2, lane, first),
                                      _pick(m, lane, first), _pick(lo, lane, first), 0, 0, 0, 0)
                            fa = _put(fa, rows2d, cols2d, core, 7, 7, 0, 0, 0, 0, 0, 0, 0, -1)
                        fa = _put(fa, rows2d, cols2d, core, 4, 6, 0, 0, 0, 0, _pick(bn2, lane, last),
                                  _pick(m, lane, last), _pick(hi, lane, last), 0)
                        load += taken_units
                        total += taken_units
                    start = tl.minimum(k, LANES - 1) + 1
                    if k < LANES:
                        # The item that does not fit: piece by piece, a core at a time.
                        item_bn2 = _pick(bn2, lane, k)
                        item_m = _pick(m, lane, k)
                        item_lo = _pick(lo, lane, k)
                        item_hi = _pick(hi, lane, k)
                        item_chunks = _pick(chunks, lane, k)
                        item_rows = _pick(tile_rows, lane, k)
                        done = tl.zeros([], tl.int64)
                        while done < item_chunks:
                            if load + MIN_CAP > cap:
                                core += 1
                                load = load * 0
                            if core >= num_cube_cores:
                                overflow = tl.full([], 1, tl.int32)
                                done = item_chunks
                                start = start * 0 + LANES
                                run = overflow == 0
                            else:
                                take = tl.minimum(item_chunks - done, cap - load - FIXED_COST)
                                split = (done > 0) | (take < item_chunks)
                                if (done == 0) & split:
                                    splits = _put(splits, rows2d, cols2d, num_splits, 0, 4,
                                                  item_bn2, item_m, slots, 0, item_rows, 0, 0, 0)
                                    num_splits += 1
                                if load == 0:
                                    fa = _put(fa, rows2d, cols2d, core, 0, 3, 1, item_bn2, item_m,
                                              item_lo + done * kv_tile, 0, 0, 0, 0)
                                    fa = _put(fa, rows2d, cols2d, core, 7, 7, 0, 0, 0, 0, 0, 0, 0, -1)
                                fa = _put(fa, rows2d, cols2d, core, 4, 6, 0, 0, 0, 0, item_bn2, item_m,
                                          tl.minimum(item_lo + (done + take) * kv_tile, item_hi), 0)
                                if split:
                                    if _get(fa, rows2d, cols2d, core, 7) < 0:
                                        fa = _put(fa, rows2d, cols2d, core, 7, 7, 0, 0, 0, 0, 0, 0, 0, slots)
                                    slots += 1
                                    pieces = _get(splits, rows2d, cols2d, num_splits - 1, 3) + 1
                                    splits = _put(splits, rows2d, cols2d, num_splits - 1, 3, 3,
                                                  0, 0, 0, pieces, 0, 0, 0, 0)
                                load += take + FIXED_COST
                                total += take + FIXED_COST
                                done += take

    ok = (valid != 0) & (total <= 2147483647)

    header_index = tl.arange(0, ENTRY_WORDS)
    header = tl.where(header_index == 0, LAYOUT_VERSION, tl.where(header_index == 1, num_cube_cores,
             tl.where(header_index == 2, num_vector_cores, tl.where(header_index == 3, M_TILE,
             tl.where(header_index == 4, kv_tile, tl.where(header_index == 5, total,
             tl.where(header_index == 6, num_splits, slots))))))).to(tl.int64)
    tl.store(out_ptr + header_index, tl.where(ok, header, 0).to(tl.int32))

    tl.store(out_ptr + HEADER_WORDS + rows2d * ENTRY_WORDS + cols2d, tl.where(ok, fa, 0).to(tl.int32),
             mask=(rows2d < num_cube_cores) & (cols2d < ENTRY_WORDS))

    # Merge entries: split item k gets floor or ceil of V / S entries (the first V % S the ceil),
    # at most its rows, numbered item after item; its rows are dealt out as evenly as possible.
    split_index = tl.arange(0, CORE_SLOTS)
    per_item = num_vector_cores // tl.maximum(num_splits, 1)
    with_extra = num_vector_cores % tl.maximum(num_splits, 1)
    split_rows = _column(splits, cols2d, 4)
    wanted = per_item + tl.where(split_index < with_extra, 1, 0)
    entries = tl.where(split_index < num_splits, tl.minimum(split_rows, wanted), 0)
    entries_end = tl.cumsum(entries, 0)
    entries_start = entries_end - entries
    vector_core = tl.arange(0, FD_SLOTS)[:, None]
    owner = (entries_start[None, :] <= vector_core) & (vector_core < entries_end[None, :])
    owned = tl.sum(owner.to(tl.int32), axis=1) > 0
    fd_bn2 = tl.sum(tl.where(owner, _column(splits, cols2d, 0)[None, :], 0), axis=1)
    fd_m = tl.sum(tl.where(owner, _column(splits, cols2d, 1)[None, :], 0), axis=1)
    fd_ws_start = tl.sum(tl.where(owner, _column(splits, cols2d, 2)[None, :], 0), axis=1)
    fd_ws_num = tl.sum(tl.where(owner, _column(splits, cols2d, 3)[None, :], 0), axis=1)
    fd_rows = tl.sum(tl.where(owner, split_rows[None, :], 0), axis=1)
    fd_count = tl.maximum(tl.sum(tl.where(owner, entries[None, :], 0), axis=1), 1)
    fd_first = tl.sum(tl.where(owner, entries_start[None, :], 0), axis=1)
    e = tl.arange(0, FD_SLOTS) - fd_first
    rows_each = fd_rows // fd_count
    rows_extra = fd_rows % fd_count
    row_start = e * rows_each + tl.minimum(e, rows_extra)
    row_num = rows_each + tl.where(e < rows_extra, 1, 0)
    fd = _fields(cols2d, 1, fd_bn2[:, None], fd_m[:, None], fd_ws_start[:, None], fd_ws_num[:, None],
                 row_start[:, None], row_num[:, None], 0)
    fd = tl.where(owned[:, None] & ok, fd, 0)
    tl.store(out_ptr + HEADER_WORDS + (num_cube_cores + vector_core) * ENTRY_WORDS + cols2d, fd.to(tl.int32),
             mask=(vector_core < num_vector_cores) & (cols2d < ENTRY_WORDS))

    word = tl.arange(0, NUM_WORDS)
    unused = ((word >= ENTRY_WORDS) & (word < HEADER_WORDS)) | (
        word >= HEADER_WORDS + (num_cube_cores + num_vector_cores) * ENTRY_WORDS)
    tl.store(out_ptr + word, tl.zeros([NUM_WORDS], tl.int32), mask=unused)


def sas_metadata(
    cu_seqlens_q: torch.Tensor,
    seqused_kv: torch.Tensor,
    num_heads_q: int,
    num_heads_kv: int,
    head_dim: int,
    window_left: int,
    window_right: int,
    num_cube_cores: int,
    num_vector_cores: int,
    out: torch.Tensor,
) -> None:
    # Windows wider than any int32 sequence see what int32 max sees; clamped, they fit int32.
    _sas_metadata_kernel[(1,)](
        cu_seqlens_q, seqused_kv, out,
        seqused_kv.numel(), num_heads_kv, num_heads_q // num_heads_kv, kv_tile_for(head_dim),
        min(window_left, INT32_MAX), min(window_right, INT32_MAX), num_cube_cores, num_vector_cores,
        LAYOUT_VERSION=LAYOUT_VERSION, M_TILE=M_TILE, FIXED_COST=FIXED_COST, NUM_WORDS=NUM_WORDS,
        HEADER_WORDS=HEADER_WORDS, ENTRY_WORDS=ENTRY_WORDS,
        REQS=REQS, ITEMS_PER_REQ=ITEMS_PER_REQ, CORE_SLOTS=CORE_SLOTS, FD_SLOTS=FD_SLOTS,
    )
