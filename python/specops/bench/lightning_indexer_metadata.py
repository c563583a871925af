"""Benchmark of lightning_indexer_metadata: the C++ op against the torch reference and a
plain-Python restatement of the AI-CPU kernel, at decode batches of 1..256 requests of 1..8 query
tokens (vllm-ascend's call: TND / PA_BSND, cmp_ratio 4), on A2/A3 and Ascend950."""

from __future__ import annotations

import torch

import specops
from specops.bench._family_restatement import given, greedy_words, values
from specops.bench._harness import Case, empty_op_call
from specops.bench.sas_metadata import decode_batch

BATCHES = [1, 8, 64, 256]
QUICK_BATCHES = [8, 256]
SOCS = {"A3": "Ascend910B1", "A5": "Ascend950PR_9599"}


def python_lightning_indexer_metadata(num_heads_q: int, num_heads_k: int, head_dim: int, query_quant_mode: int,
                                      key_quant_mode: int, *, actual_seq_lengths_query=None,
                                      actual_seq_lengths_key=None, batch_size: int = 0, max_seqlen_q: int = 0,
                                      max_seqlen_k: int = 0, layout_query: str = "BSND", layout_key: str = "BSND",
                                      sparse_count: int = 2048, sparse_mode: int = 3, pre_tokens: int = 2**63 - 1,
                                      next_tokens: int = 2**63 - 1, cmp_ratio: int = 1, num_cube_cores: int = 24,
                                      num_vector_cores: int = 48, soc_version: str = "Ascend910B1") -> list[int]:
    """The indexer kernel's schedule restated tile by tile, for a call it accepts (no checks)."""
    query, key = values(actual_seq_lengths_query), values(actual_seq_lengths_key)
    a5 = "Ascend950" in soc_version
    group, m_tile, s2_tile = num_heads_q, 256, 128 if a5 else 2048
    query_batches = len(query) if given(query) else batch_size
    key_batches = len(key) if given(key) else batch_size
    batches = min(query_batches, key_batches)

    def s1_of(b):
        if not given(query):
            return max_seqlen_q
        if layout_query != "TND":
            return query[b]
        if query_batches > key_batches:
            return query[b + 1] - query[b]
        return query[b] - (query[b - 1] if b else 0)

    def s2_of(b):
        if not given(key):
            return max_seqlen_k * cmp_ratio
        if layout_key == "TND":
            return key[b] - (key[b - 1] if b else 0)
        return key[b]

    def tiles_of(b):
        return -(-s1_of(b) * group // m_tile) if s2_of(b) > 0 else 0

    def block_cost(rows, keys):
        if a5:
            return 6 * -(-rows // 16) + 10 * -(-keys // 64)
        return rows // group * (((1536 if keys <= 1024 else 2560) + keys) // 2)

    def tile(b, m):
        s1, s2 = s1_of(b), s2_of(b)
        first, end = m * m_tile, min((m + 1) * m_tile, s1 * group)
        hi = (end - 1) // group + s2 - s1 if sparse_mode == 3 else s2 - 1
        keys = (min(max(hi, 0), s2 - 1) + 1) // cmp_ratio
        if keys == 0:
            return 0, 0, False, 0
        full, tail = divmod(keys, s2_tile)
        rows = end - first
        cost = full * block_cost(rows, s2_tile) + (block_cost(rows, tail) if tail else 0)
        return cost, block_cost(rows, tail if tail else s2_tile), True, full + (1 if tail else 0)

    return greedy_words(batches, tiles_of, tile, num_cube_cores)


def _case(soc: str, num_reqs: int) -> Case:
    cu_seqlens_q, seq_lens = decode_batch(num_reqs, seed=num_reqs)
    kwargs = dict(actual_seq_lengths_query=cu_seqlens_q[1:].clone(), actual_seq_lengths_key=seq_lens,
                  batch_size=num_reqs, layout_query="TND", layout_key="PA_BSND", sparse_count=512, cmp_ratio=4,
                  soc_version=SOCS[soc], num_cube_cores=24, num_vector_cores=48)
    out = torch.empty(1024, dtype=torch.int32)

    def reference():
        with specops.backend("reference"):
            specops.lightning_indexer_metadata(64, 1, 128, 0, 0, **kwargs, out=out)

    expected = python_lightning_indexer_metadata(64, 1, 128, 0, 0, **kwargs)
    for check in (lambda: specops.lightning_indexer_metadata(64, 1, 128, 0, 0, **kwargs, out=out), reference):
        check()
        if out.tolist() != expected:
            raise RuntimeError(f"lightning_indexer_metadata {soc} R={num_reqs}: specops and the Python restatement "
                               "disagree")
    return Case(
        "lightning_indexer_metadata", f"{soc} R={num_reqs}", num_reqs, int(cu_seqlens_q[-1]),
        {"specops": lambda: specops.lightning_indexer_metadata(64, 1, 128, 0, 0, **kwargs, out=out),
         "reference": reference, "python": lambda: python_lightning_indexer_metadata(64, 1, 128, 0, 0, **kwargs),
         "empty-op": empty_op_call(torch.device("cpu"))},
        baselines=("reference", "python"), floors=("empty-op",), family=soc,
        plotted=("specops", "reference", "python"),
    )


def cases(device: torch.device, quick: bool) -> list[Case]:
    """Host tensors whatever `device` is (a host op plus one asynchronous copy on a device)."""
    return [_case(soc, num_reqs) for soc in SOCS for num_reqs in (QUICK_BATCHES if quick else BATCHES)]
