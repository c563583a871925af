"""Benchmark of pcp_partition (host, every step) against a plain-Python/numpy layout builder, the
way a runner writes it today: a walk per rank over the requests, numpy index arrays. Host-only,
timed on the thread's CPU clock (time.thread_time), which other processes' preemption of a
shared host does not inflate."""

from __future__ import annotations

import time

import numpy as np
import torch

import specops
from specops.bench._harness import Case

SHAPES = [(R, P) for R in (8, 64, 256) for P in (2, 4, 8)]
QUICK_SHAPES = [(8, 2), (64, 4)]


def numpy_layout(q: np.ndarray, c: np.ndarray, f: np.ndarray, world: int, shard: bool) -> tuple:
    """Every rank's segments, then the three index arrays (DCP 1)."""
    chunks = 2 * world
    qsl = np.concatenate([[0], np.cumsum(q)])
    ranks = []
    for k in range(world):
        segments = []
        ordinal = 0
        for r in range(q.size):
            n = int(q[r])
            if n == 0:
                continue
            if f[r]:
                size = -(-n // chunks)
                for chunk in (k, chunks - 1 - k):
                    a, b = chunk * size, min((chunk + 1) * size, n)
                    if b > a:
                        segments.append((bool(f[r]), r, a, b, True))
            elif shard:
                if ordinal % world == k:
                    segments.append((False, r, 0, n, True))
                ordinal += 1
            else:
                segments.append((False, r, 0, n, k == 0))
        segments.sort(key=lambda s: s[:3])
        ranks.append(segments)
    per_rank = [sum(b - a for _, _, a, b, _ in s) for s in ranks]
    L = max(per_rank)
    gather = np.zeros(world * L, dtype=np.int64)
    mask = np.zeros(world * L, dtype=np.bool_)
    restore = np.empty(int(qsl[-1]), dtype=np.int64)
    rank_arrays = []
    for k, segments in enumerate(ranks):
        offset = k * L
        for _, r, a, b, writes in segments:
            gather[offset:offset + b - a] = np.arange(qsl[r] + a, qsl[r] + b)
            if writes:
                mask[offset:offset + b - a] = True
                restore[qsl[r] + a:qsl[r] + b] = np.arange(offset, offset + b - a)
            offset += b - a
        req = np.fromiter((s[1] for s in segments), dtype=np.int32, count=len(segments))
        lens = np.fromiter((s[3] - s[2] for s in segments), dtype=np.int32, count=len(segments))
        start = c[req] + np.fromiter((s[2] for s in segments), dtype=np.int32, count=len(segments))
        rank_arrays.append((req, lens, np.concatenate([[0], np.cumsum(lens)]), start, start + lens))
    return gather, mask, restore, rank_arrays


def batch(num_reqs: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A mixed step: three quarters decodes (spec-decode queries of 1-4), the rest prefills."""
    rng = np.random.default_rng(seed)
    f = rng.random(num_reqs) < 0.25
    q = np.where(f, rng.integers(16, 2048, num_reqs), rng.integers(1, 5, num_reqs)).astype(np.int32)
    c = rng.integers(0, 8192, num_reqs).astype(np.int32)
    return q, c, f


def cases(device: torch.device, quick: bool) -> list[Case]:
    result = []
    for num_reqs, world in QUICK_SHAPES if quick else SHAPES:
        q, c, f = batch(num_reqs, num_reqs * world)
        tq, tc, tf = torch.from_numpy(q), torch.from_numpy(c), torch.from_numpy(f)
        impls = {
            "specops": lambda tq=tq, tc=tc, tf=tf, world=world: specops.pcp_partition(
                tq, tc, tf, world, shard_decode_requests=True),
            "numpy": lambda q=q, c=c, f=f, world=world: numpy_layout(q, c, f, world, True),
        }
        result.append(Case("pcp_partition", f"R={num_reqs} P={world}", num_reqs, int(q.sum()), impls,
                           baselines=("numpy",), family=f"P={world}", clock=time.thread_time))
    return result
