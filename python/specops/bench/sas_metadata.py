"""Benchmark of sas_metadata: the schedule of a decode step (1 .. 1024 requests) and of prefill
batches, against the plain Python scheduler a runner would otherwise run (the reference), with
the balance the schedule achieves: max core cost / mean core cost (1.0 is perfect)."""

from __future__ import annotations

import torch

import specops
from specops.bench._harness import Case
from specops.bench.workload import make_bench_batch
from specops.reference.sas_metadata import WorkItem, sas_metadata as reference_sas_metadata, work_items
from specops.sas_layout import FIXED_COST, SASSchedule

# A DeepSeek-style sparse-attention layer on one rank: 64 query heads sharing one KV head of
# 576 dims (KV_TILE 64), on 24 cube and 48 vector cores.
MODEL = dict(num_heads_q=64, num_heads_kv=1, head_dim=576)
CORES = dict(num_cube_cores=24, num_vector_cores=48)
DECODE_SHAPES = [(1, 1), (16, 1), (64, 1), (256, 1), (256, 4), (1024, 1)]
PREFILL_SHAPES = [(1, 8192), (4, 2048)]
QUICK_DECODE_SHAPES = [(8, 1), (256, 1)]
QUICK_PREFILL_SHAPES = [(1, 1024)]


def core_costs(schedule: SASSchedule, items: list[WorkItem]) -> list[int]:
    """Each cube core's cost: chunks + FIXED_COST summed over the pieces it runs."""
    index = {(item.bn2, item.m): i for i, item in enumerate(items)}
    tile = schedule.header.kv_tile
    costs = []
    for entry in schedule.fa:
        cost = 0
        if entry.enabled:
            first, last = index[(entry.bn2_start, entry.m_start)], index[(entry.bn2_end, entry.m_end)]
            for i in range(first, last + 1):
                item = items[i]
                start = entry.kv_start if i == first else item.lo
                end = entry.kv_end if i == last else item.hi
                cost += -(-(end - item.lo) // tile) - (start - item.lo) // tile + FIXED_COST
        costs.append(cost)
    return costs


def balance(cu_seqlens_q: torch.Tensor, seqused_kv: torch.Tensor, out: torch.Tensor, window_left: int,
            window_right: int) -> float:
    schedule = specops.decode_sas_metadata(out)
    items = work_items(cu_seqlens_q.cpu(), seqused_kv.cpu(), MODEL["num_heads_q"], MODEL["num_heads_kv"],
                       MODEL["head_dim"], window_left, window_right)
    costs = core_costs(schedule, items)
    mean = schedule.header.total_cost / len(costs)
    return max(costs) / mean if mean else 1.0


def _case(label: str, cu_seqlens_q: torch.Tensor, seqused_kv: torch.Tensor, window_left: int) -> Case:
    window_right = 0
    args = (cu_seqlens_q, seqused_kv, MODEL["num_heads_q"], MODEL["num_heads_kv"], MODEL["head_dim"],
            window_left, window_right, CORES["num_cube_cores"], CORES["num_vector_cores"])
    out = torch.empty(1024, dtype=torch.int32, device=cu_seqlens_q.device)
    reference_out = torch.empty_like(out)

    def run_specops():
        specops.sas_metadata(cu_seqlens_q, seqused_kv, **MODEL, window_left=window_left, window_right=window_right,
                             **CORES, out=out)

    run_specops()
    reference_sas_metadata(*args, reference_out)
    if not torch.equal(out, reference_out):
        raise RuntimeError(f"sas_metadata {label}: specops and the reference disagree")
    return Case(
        "sas_metadata", label, cu_seqlens_q.numel() - 1, int(cu_seqlens_q[-1]),
        {"specops": run_specops, "reference": lambda: reference_sas_metadata(*args, reference_out)},
        baselines=("reference",),
        extras={"balance": balance(cu_seqlens_q, seqused_kv, out, window_left, window_right)},
        family=label.split()[0] if window_left < 0 else "windowed",
    )


def cases(device: torch.device, quick: bool) -> list[Case]:
    result = []
    for num_reqs, query_len in QUICK_DECODE_SHAPES if quick else DECODE_SHAPES:
        batch = make_bench_batch(num_reqs, query_len, block_size=128, max_context=8192, device=device)
        result.append(_case(f"decode R={num_reqs} q={query_len}", batch.query_start_loc, batch.seq_lens, -1))
    for num_reqs, query_len in QUICK_PREFILL_SHAPES if quick else PREFILL_SHAPES:
        batch = make_bench_batch(num_reqs, query_len, block_size=128, max_context=4096, seed=1, device=device)
        result.append(_case(f"prefill {num_reqs}x{query_len}", batch.query_start_loc, batch.seq_lens, -1))
    if not quick:
        batch = make_bench_batch(256, 1, block_size=128, max_context=8192, device=device)
        result.append(_case("decode R=256 win=2048", batch.query_start_loc, batch.seq_lens, 2048))
    return result
