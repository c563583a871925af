"""Plain-Python expectations of the PCP ops, written from the contract (docs/pcp.md), token by
token instead of segment by segment as the implementations are: every token of the global batch
gets its ranks, then each rank's tokens are ordered and cut into segments."""

from __future__ import annotations

import dataclasses

PAD = -1


@dataclasses.dataclass
class ExpectedRank:
    segments: list[tuple[int, int, int]]  # (request, a, b)
    writes: list[bool]  # per segment
    num_tokens: int


@dataclasses.dataclass
class ExpectedLayout:
    L: int
    ranks: list[ExpectedRank]
    gather: list[int]
    mask: list[bool]
    restore: list[int]
    replicated: list[bool]


def expected_layout(q, c, f, P, shard=False, dcp=1, padded=None) -> ExpectedLayout:
    C = 2 * P
    R = len(q)
    replicated = [(not f[r]) or (dcp > 1 and (C - 1) * -(-q[r] // C) >= q[r]) for r in range(R)]
    owners = {}
    ordinal = 0
    for r in range(R):
        if replicated[r] and q[r] > 0:
            owners[r] = ordinal % P
            ordinal += 1
    # tokens[k]: (f, r, i, writes) of every token (request r, query offset i) that rank k holds
    tokens = [[] for _ in range(P)]
    for r in range(R):
        for i in range(q[r]):
            if not replicated[r]:
                chunk = i // -(-q[r] // C)
                rank = chunk if chunk < P else C - 1 - chunk
                tokens[rank].append((f[r], r, i, True))
            elif shard:
                tokens[owners[r]].append((f[r], r, i, True))
            else:
                for k in range(P):
                    tokens[k].append((f[r], r, i, k == 0))
    ranks = []
    for k in range(P):
        ordered = sorted(tokens[k])
        segments, writes = [], []
        for _, r, i, w in ordered:
            # a new segment starts at a new request, or where the query offset jumps (a chunk edge)
            continues = segments and segments[-1][0] == r and segments[-1][2] == i
            if continues and not _chunk_edge(q[r], i, C, replicated[r]):
                segments[-1] = (r, segments[-1][1], i + 1)
            else:
                segments.append((r, i, i + 1))
                writes.append(w)
        ranks.append(ExpectedRank(segments, writes, len(ordered)))
    L = max(rank.num_tokens for rank in ranks)
    if padded is not None:
        L = padded
    starts = [sum(q[:r]) for r in range(R)]
    gather, mask = [0] * (P * L), [False] * (P * L)
    restore = [None] * sum(q)
    for k, rank in enumerate(ranks):
        o = 0
        for (r, a, b), w in zip(rank.segments, rank.writes):
            for i in range(a, b):
                gather[k * L + o] = starts[r] + i
                if w:
                    mask[k * L + o] = True
                    restore[starts[r] + i] = k * L + o
                o += 1
    return ExpectedLayout(L, ranks, gather, mask, restore, replicated)


def _chunk_edge(q: int, i: int, C: int, replicated: bool) -> bool:
    """Whether query offset i starts a chunk of a non-replicated request (chunks P-1 and P are
    adjacent on one rank, and still two segments)."""
    return (not replicated) and i % -(-q // C) == 0


def expected_local_inputs(global_ids, global_positions, gather, lqsl, N, num_ids, num_pos, num_seq, num_reqs_padded):
    def read(values, o):
        if not 0 <= o < N:
            return 0
        index = gather[o]
        return values[index] if 0 <= index < len(values) else 0

    ids = [read(global_ids, o) for o in range(num_ids)]
    pos = [read(global_positions, o) for o in range(num_pos)]
    n = len(lqsl) - 1
    seq = [None] * num_seq
    for i in range(n):
        seq[i] = read(global_positions, lqsl[i + 1] - 1) + 1 if lqsl[i + 1] > lqsl[i] else 0
    for i in range(n, num_reqs_padded):
        seq[i] = 0
    return ids, pos, seq


def expected_gathered_slots(slots, gather, mask, num_out):
    out = []
    for j in range(num_out):
        if j < len(gather) and mask[j] and 0 <= gather[j] < len(slots):
            out.append(slots[gather[j]])
        else:
            out.append(PAD)
    return out
