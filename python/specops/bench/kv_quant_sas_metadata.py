"""Benchmark of kv_quant_sas_metadata (the A5 schedule): the C++ op against the torch reference
and a plain-Python restatement of the AI-CPU kernel, at decode batches of 1..256 requests of
1..8 query tokens, for the model's three layer kinds, 64 and 128 heads (core pairs)."""

from __future__ import annotations

import torch

import specops
from specops.bench._family_restatement import given, greedy_words, values
from specops.bench._harness import Case, empty_op_call
from specops.bench.sas_metadata import LAYERS, decode_batch

BATCHES = [1, 8, 64, 256]
QUICK_BATCHES = [8, 256]


def python_kv_quant_sas_metadata(num_heads_q: int, num_heads_kv: int, head_dim: int, kv_quant_mode: int, *,
                                 cu_seqlens_q=None, cu_seqlens_ori_kv=None, cu_seqlens_cmp_kv=None, seqused_q=None,
                                 seqused_kv=None, batch_size: int = 0, max_seqlen_q: int = 0, max_seqlen_kv: int = 0,
                                 ori_topk: int = 0, cmp_topk: int = 0, tile_size: int = 0, rope_head_dim: int = 0,
                                 cmp_ratio: int = -1, ori_mask_mode: int = 4, cmp_mask_mode: int = 3,
                                 ori_win_left: int = 127, ori_win_right: int = 0, layout_q: str = "BSND",
                                 layout_kv: str = "PA_ND", has_ori_kv: bool = True, has_cmp_kv: bool = True,
                                 num_cube_cores: int = 24, num_vector_cores: int = 48,
                                 soc_version: str = "Ascend950PR_9599") -> list[int]:
    """The A5 kernel's schedule restated tile by tile, for a call it accepts (no checks)."""
    cu_q, used_q, used_kv = values(cu_seqlens_q), values(seqused_q), values(seqused_kv)
    group = num_heads_q
    a5 = "Ascend950" in soc_version
    scfa = has_cmp_kv and cmp_topk > 0
    tokens_per_tile = 2 if (not a5 and group != 128 and not scfa) else 1
    m_tile, s2_tile = group * tokens_per_tile, 128 if a5 else 512
    cores = num_cube_cores // 2 if (a5 and group == 128) else num_cube_cores
    if given(used_q):
        batches = len(used_q)
    elif layout_q == "TND":
        batches = len(cu_q) - 1
    else:
        batches = batch_size

    def s1_of(b):
        if given(used_q):
            return used_q[b]
        return cu_q[b + 1] - cu_q[b] if layout_q == "TND" else max_seqlen_q

    def tiles_of(b):
        return -(-s1_of(b) * group // m_tile) if used_kv[b] > 0 else 0

    def block_cost(rows, tokens):
        return 6 * -(-rows // 16) + 10 * -(-tokens // 64)

    def part(rows, length):
        full, tail = divmod(length, s2_tile)
        blocks = full + (1 if tail else 0)
        return full * block_cost(rows, s2_tile) + (block_cost(rows, tail) if tail else 0), \
            block_cost(rows, tail if tail else s2_tile), blocks

    def tile(b, m):
        s1, s2 = s1_of(b), used_kv[b]
        first, last = m * m_tile, min((m + 1) * m_tile, s1 * group) - 1
        # ori_win_right is ignored: the band ends at each token's own position.
        lo, hi = s2 - s1 + first // group - ori_win_left, s2 - s1 + last // group
        if ori_mask_mode == 0:
            lo, hi = 0, s2 - 1
        elif ori_mask_mode == 3:
            lo = 0
        if lo >= s2 or hi < 0 or hi < lo:
            return 0, 0, False, 0
        lo, hi = max(lo, 0), min(hi, s2 - 1)
        rows = min((m + 1) * m_tile, s1 * group) - first
        cost, last_cost, blocks = part(rows, hi - lo + 1)
        compressed = (hi + 1) // cmp_ratio if has_cmp_kv else 0
        if scfa:
            compressed = min(compressed, cmp_topk)
        if compressed:
            more, last_cost, more_blocks = part(rows, compressed)
            cost, blocks = cost + more, blocks + more_blocks
        return cost, last_cost, True, blocks

    return greedy_words(batches, tiles_of, tile, cores, entry_width=9, paired=group == 128)


def _case(layer: str, heads: int, num_reqs: int) -> Case:
    cu_seqlens_q, seqused_kv = decode_batch(num_reqs, seed=num_reqs)
    kwargs = dict(cu_seqlens_q=cu_seqlens_q, seqused_kv=seqused_kv, batch_size=num_reqs, ori_win_left=127,
                  layout_q="TND", layout_kv="PA_ND", **LAYERS[layer], num_cube_cores=24, num_vector_cores=48,
                  soc_version="Ascend950PR_9599")
    out = torch.empty(1024, dtype=torch.int32)

    def run(backend: str):
        def call():
            with specops.backend(backend):
                specops.kv_quant_sas_metadata(heads, 1, 512, 1, **kwargs, out=out)
        return call

    expected = python_kv_quant_sas_metadata(heads, 1, 512, 1, **kwargs)
    for backend in ("native", "reference"):
        run(backend)()
        if out.tolist() != expected:
            raise RuntimeError(f"kv_quant_sas_metadata {layer} heads={heads} R={num_reqs}: {backend} and the Python "
                               "restatement disagree")
    return Case(
        "kv_quant_sas_metadata", f"{layer} H={heads} R={num_reqs}", num_reqs, int(cu_seqlens_q[-1]),
        {"specops": lambda: specops.kv_quant_sas_metadata(heads, 1, 512, 1, **kwargs, out=out),
         "reference": run("reference"), "python": lambda: python_kv_quant_sas_metadata(heads, 1, 512, 1, **kwargs),
         "empty-op": empty_op_call(torch.device("cpu"))},
        baselines=("reference", "python"), floors=("empty-op",), family=f"{layer} H={heads}",
        plotted=("specops", "reference", "python"),
    )


def cases(device: torch.device, quick: bool) -> list[Case]:
    """Host tensors whatever `device` is (a host op plus one asynchronous copy on a device)."""
    return [_case(layer, heads, num_reqs) for layer in LAYERS for heads in (64, 128)
            for num_reqs in (QUICK_BATCHES if quick else BATCHES)]
