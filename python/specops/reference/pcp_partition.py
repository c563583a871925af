"""Reference for pcp_partition: every PCP rank's DualChunkSwap layout, in plain Python.

Written as a runner would write it (one walk per rank over the requests, lists, then tensors);
it is also the plain-Python baseline of the benchmark. Returns the schema's tensors:
[padded_gather_idx, gathered_kv_write_mask, hidden_restore_idx, replicated, rank_info,
segments, local_query_start_loc] (its schema: csrc/cpu/pcp_partition.cpp).
"""

from __future__ import annotations

import torch

from specops.arguments import INT32_MAX

# The largest pcp_world_size (docs/pcp.md; csrc/cpu/pcp_partition.cpp's kMaxPcpWorldSize): the
# layout holds host arrays per rank, and int32 indexing alone let 2^30 ranks ask for tens of GiB.
MAX_PCP_WORLD_SIZE = 65536


def _replicated(q: int, prefilling: bool, world: int, dcp_world_size: int) -> bool:
    chunks = 2 * world
    return (not prefilling) or (dcp_world_size > 1 and (chunks - 1) * -(-q // chunks) >= q)


def _rank_segments(k, q, prefilling, replicated, world, shard):
    """(request, a, b, writes) of rank k, decodes first, each request's chunks in query order."""
    chunks = 2 * world
    found = []
    ordinal = 0
    for r, length in enumerate(q):
        if length == 0:
            continue
        if not replicated[r]:
            size = -(-length // chunks)
            for chunk in (k, chunks - 1 - k):
                a, b = chunk * size, min((chunk + 1) * size, length)
                if b > a:
                    found.append((r, a, b, True))
        elif shard:
            if ordinal % world == k:
                found.append((r, 0, length, True))
            ordinal += 1
        else:
            found.append((r, 0, length, k == 0))
    found.sort(key=lambda seg: (prefilling[seg[0]], seg[0], seg[1]))
    return found


def pcp_partition(
    num_scheduled_tokens: torch.Tensor,
    num_computed_tokens: torch.Tensor,
    is_prefilling: torch.Tensor,
    pcp_world_size: int,
    shard_decode_requests: bool,
    dcp_world_size: int,
    padded_num_tokens: int,
) -> list[torch.Tensor]:
    q = [int(x) for x in num_scheduled_tokens.tolist()]
    c = [int(x) for x in num_computed_tokens.tolist()]
    f = [bool(x) for x in is_prefilling.tolist()]
    world = pcp_world_size
    for r in range(len(q)):
        if q[r] < 0:
            raise ValueError(f"num_scheduled_tokens[{r}] must be >= 0, got {q[r]}")
        if c[r] < 0:
            raise ValueError(f"num_computed_tokens[{r}] must be >= 0, got {c[r]}")
        if q[r] > INT32_MAX - c[r]:
            raise ValueError(f"num_computed_tokens[{r}] + num_scheduled_tokens[{r}] must be <= 2^31 - 1, "
                             f"got {c[r]} + {q[r]}")
    replicated = [_replicated(q[r], f[r], world, dcp_world_size) for r in range(len(q))]
    starts = [0]
    for length in q:
        starts.append(starts[-1] + length)
    per_rank = [_rank_segments(k, q, f, replicated, world, shard_decode_requests) for k in range(world)]
    tokens = [sum(b - a for _, a, b, _ in segs) for segs in per_rank]
    L = max(tokens)
    if padded_num_tokens >= 0:
        if padded_num_tokens < L:
            raise ValueError("padded_num_tokens must be >= the largest rank's token count "
                             f"max(per_rank_num_tokens) = {L}, got {padded_num_tokens}")
        L = padded_num_tokens
    # Checked before the lists are sized from it, as the host op checks before it allocates.
    if L > INT32_MAX // world:
        raise ValueError(f"pcp_world_size * padded_num_tokens must be <= 2^31 - 1, got {world} * {L}")
    gather = [0] * (world * L)
    mask = [False] * (world * L)
    restore = [0] * starts[-1]
    columns = [[], [], [], []]
    query_start_locs = []
    counts = []
    for k, segs in enumerate(per_rank):
        offset = 0
        lqsl = [0]
        for r, a, b, writes in segs:
            for i in range(b - a):
                gather[k * L + offset + i] = starts[r] + a + i
                if writes:
                    mask[k * L + offset + i] = True
                    restore[starts[r] + a + i] = k * L + offset + i
            for column, value in zip(columns, (r, b - a, c[r] + a, c[r] + b)):
                column.append(value)
            offset += b - a
            lqsl.append(offset)
        if not segs:  # one empty segment (0, [0, 0)), as vLLM's partition_batch
            first = c[0] if c else 0
            for column, value in zip(columns, (0, 0, first, first)):
                column.append(value)
            lqsl.append(0)
        counts.append(max(len(segs), 1))
        query_start_locs += lqsl
    return [
        torch.tensor(gather, dtype=torch.int64),
        torch.tensor(mask, dtype=torch.bool),
        torch.tensor(restore, dtype=torch.int64),
        torch.tensor(replicated, dtype=torch.bool),
        torch.tensor([L] + tokens + counts, dtype=torch.int64),
        torch.tensor(columns, dtype=torch.int32).view(4, -1),
        torch.tensor(query_start_locs, dtype=torch.int32),
    ]
