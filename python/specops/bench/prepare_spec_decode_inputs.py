"""Benchmark of the fused prepare_spec_decode_inputs against the unfused sequence it replaces:
the three specops ops one after another (correct, positions, a slot mapping per group), and
the same sequence in numpy and in torch eager. The "MRV2 target" cases time its request-indexed
mode (model runner V2's target step: positions, seq_lens, every group's slots and block-table
gather in one launch, where vLLM launches 3) against the specops ops of those three launches;
the "MRV2 whole target" cases add the step's input ids and (W > 1) the DCP-local seq_lens to the
launch (vLLM: 5 or 6 launches) against those ops plus prepare_input_ids and dcp_local_seq_lens."""

from __future__ import annotations

import numpy as np
import torch

import specops
import time

from specops.bench._harness import Case, empty_op_call, goal_figure
from specops.bench.compute_slot_mapping import numpy_slot_mapping, torch_slot_mapping
from specops.bench.correct_num_computed_tokens import numpy_correct, numpy_step, torch_correct
from specops.bench.prepare_positions_and_seq_lens import numpy_positions, torch_positions
from specops.bench.workload import BenchStep, make_bench_step

# (R, query_len, block sizes, cp_sharded, cp_world_size)
SHAPES = [
    (8, 4, [128], [True], 1),
    (256, 4, [128], [True], 1),
    (256, 4, [128, 64, 16], [True, True, False], 2),
    (1024, 8, [128], [True], 1),
]
QUICK_SHAPES = [(8, 4, [128], [True], 1), (64, 4, [128, 16], [True, False], 2)]
# The fused op's contract: at most this fraction of the unfused native ops' time, at these
# batch sizes (requests), in one run.
FUSED_GOAL = 0.7
GOAL_BATCHES = (256, 1024)


def _fused_goal(num_groups: int):
    """The goal figure, and the floor it cannot go below: both sides restore the counts, and the
    unfused sequence makes 2 + G op calls where the fused one makes one, so with bodies that cost
    nothing the ratio would be (restore + one empty op call) / (restore + (2 + G) of them)."""
    def derive(medians: dict[str, float]) -> dict[str, float]:
        restore, call = medians["restore"], medians["empty-specops-op"]
        floor = (restore + call) / (restore + (2 + num_groups) * call)
        return dict([goal_figure("fused/native-unfused", medians["specops"] / medians["native-unfused"], FUSED_GOAL),
                     ("ratio floor (empty op calls)", floor)])
    return derive


def _empty_specops_op(device: torch.device):
    """One specops op call that does no work (correct_num_computed_tokens of zero rows through its
    wrapper): the Python wrapper, FastOp's boxing, the dispatcher and the checks of a call."""
    empty = torch.zeros(0, dtype=torch.int32, device=device)
    return lambda: specops.correct_num_computed_tokens(empty, empty, empty, empty, empty, empty)


def _group_cp(step: BenchStep, g: int) -> tuple[int, int]:
    return (step.cp_world_size, step.cp_rank) if step.cp_sharded[g] else (1, 0)


def fused(step: BenchStep, positions: torch.Tensor, seq_lens: torch.Tensor, slot_mappings: list[torch.Tensor]) -> None:
    step.restore()
    specops.prepare_spec_decode_inputs(
        *step.correction_args(), step.query_start_loc, step.block_tables, step.block_sizes, positions=positions,
        seq_lens=seq_lens, slot_mappings=slot_mappings, cp_sharded=step.cp_sharded,
        cp_world_size=step.cp_world_size, cp_rank=step.cp_rank)


def native_unfused(step: BenchStep, positions: torch.Tensor, seq_lens: torch.Tensor,
                   slot_mappings: list[torch.Tensor]) -> None:
    step.restore()
    specops.correct_num_computed_tokens(*step.correction_args())
    specops.prepare_positions_and_seq_lens(step.num_computed_tokens, step.query_start_loc, positions=positions,
                                           seq_lens=seq_lens)
    for g, (table, block_size) in enumerate(zip(step.block_tables, step.block_sizes)):
        world, rank = _group_cp(step, g)
        specops.compute_slot_mapping(step.query_start_loc, positions, table, block_size, out=slot_mappings[g],
                                     cp_world_size=world, cp_rank=rank)


def torch_unfused(step: BenchStep, positions: torch.Tensor, seq_lens: torch.Tensor,
                  slot_mappings: list[torch.Tensor], num_tokens: int) -> None:
    step.restore()
    torch_correct(*step.correction_args())
    torch_positions(step.num_computed_tokens, step.query_start_loc, positions, seq_lens, num_tokens)
    for g, (table, block_size) in enumerate(zip(step.block_tables, step.block_sizes)):
        world, rank = _group_cp(step, g)
        torch_slot_mapping(step.query_start_loc, positions, table, block_size, world, rank, 1, slot_mappings[g])


def _impls(step: BenchStep) -> dict:
    device = step.query_start_loc.device
    num_reqs, num_tokens = step.num_reqs, step.num_tokens
    positions = torch.empty(num_tokens, dtype=torch.int64, device=device)
    seq_lens = torch.empty(num_reqs, dtype=torch.int32, device=device)
    slot_mappings = [torch.empty(num_tokens, dtype=torch.int64, device=device) for _ in step.block_sizes]

    np_args, np_pristine = numpy_step(step)
    np_query_start_loc = step.query_start_loc.cpu().numpy()
    np_tables = [t.cpu().numpy() for t in step.block_tables]
    np_positions = np.empty(num_tokens, dtype=np.int64)
    np_seq_lens = np.empty(num_reqs, dtype=np.int32)
    np_slots = [np.empty(num_tokens, dtype=np.int64) for _ in step.block_sizes]

    def numpy_unfused():
        np.copyto(np_args[0], np_pristine)
        numpy_correct(*np_args)
        numpy_positions(np_args[0], np_query_start_loc, np_positions, np_seq_lens)
        for g, (table, block_size) in enumerate(zip(np_tables, step.block_sizes)):
            numpy_slot_mapping(np_query_start_loc, np_positions, table, block_size, *_group_cp(step, g), 1,
                               np_slots[g])

    return {
        "specops": lambda: fused(step, positions, seq_lens, slot_mappings),
        "native-unfused": lambda: native_unfused(step, positions, seq_lens, slot_mappings),
        "numpy": numpy_unfused,
        "torch-eager": lambda: torch_unfused(step, positions, seq_lens, slot_mappings, num_tokens),
        "restore": step.restore,
        "empty-op": empty_op_call(device),
        "empty-specops-op": _empty_specops_op(device),
    }


def cases(device: torch.device, quick: bool) -> list[Case]:
    result = []
    for num_reqs, query_len, block_sizes, cp_sharded, world in QUICK_SHAPES if quick else SHAPES:
        step = make_bench_step(num_reqs, query_len, block_sizes=block_sizes, cp_sharded=cp_sharded,
                               cp_world_size=world, device=device)
        label = f"R={num_reqs} q={query_len} G={len(block_sizes)} W={world}"
        goal = num_reqs in GOAL_BATCHES
        # The goal cases are timed in the thread's CPU time: host-only, and their figure is a
        # ratio that other processes' preemption on a shared host would blur.
        result.append(Case("prepare_spec_decode_inputs", label, num_reqs, step.num_tokens, _impls(step),
                           baselines=("native-unfused", "numpy", "torch-eager"),
                           floors=("restore", "empty-op", "empty-specops-op"),
                           family=f"G={len(block_sizes)} W={world}",
                           derive=_fused_goal(len(block_sizes)) if goal else None,
                           clock=time.thread_time if goal else time.perf_counter))
    return result + target_step_cases(device, quick)


def _target_step_impls(step: BenchStep, whole: bool = False) -> dict:
    """The step's requests on shuffled rows of request-indexed counts and tables, as model runner
    V2 keeps them; the gathered tables as wide as the sources. `whole`: with the input ids and
    the DCP-local seq_lens."""
    device = step.query_start_loc.device
    num_reqs, num_tokens = step.num_reqs, step.num_tokens
    rows = torch.randperm(num_reqs, generator=torch.Generator().manual_seed(0)).to(device)
    counts = torch.empty_like(step.pristine_counts)
    counts[rows] = step.pristine_counts
    tables = []
    for table in step.block_tables:
        by_row = torch.empty_like(table)
        by_row[rows] = table
        tables.append(by_row)
    num_blocks = [torch.full((num_reqs,), t.size(1), dtype=torch.int32, device=device) for t in tables]
    gathered = [torch.empty_like(t) for t in tables]
    positions = torch.empty(num_tokens, dtype=torch.int64, device=device)
    seq_lens = torch.empty(num_reqs, dtype=torch.int32, device=device)
    slot_mappings = [torch.empty(num_tokens, dtype=torch.int64, device=device) for _ in tables]
    empty = torch.empty(0, dtype=torch.int32, device=device)

    def fused_target():
        specops.prepare_spec_decode_inputs(
            counts, empty, empty, empty, empty, empty, step.query_start_loc, tables, step.block_sizes,
            positions=positions, seq_lens=seq_lens, slot_mappings=slot_mappings, cp_sharded=step.cp_sharded,
            cp_world_size=step.cp_world_size, cp_rank=step.cp_rank, idx_mapping=rows, num_blocks=num_blocks,
            request_indexed_counts=True, gathered_block_tables=gathered)

    def unfused_target():
        specops.prepare_positions_and_seq_lens(counts, step.query_start_loc, positions=positions, seq_lens=seq_lens,
                                               idx_mapping=rows)
        for g, (table, block_size) in enumerate(zip(tables, step.block_sizes)):
            world, rank = _group_cp(step, g)
            specops.compute_slot_mapping(step.query_start_loc, positions, table, block_size, out=slot_mappings[g],
                                         cp_world_size=world, cp_rank=rank, idx_mapping=rows, num_blocks=num_blocks[g])
        specops.gather_block_tables_multi(tables, num_blocks, rows, gathered, num_computed_tokens=counts,
                                          block_sizes=step.block_sizes)

    if not whole:
        return {"specops": fused_target, "native-unfused": unfused_target}
    # Every request decoding: its last sampled token and query_len - 1 drafts, one logit each.
    query_len = num_tokens // max(num_reqs, 1)
    generator = torch.Generator().manual_seed(1)
    ids = dict(input_ids=torch.empty(num_tokens, dtype=torch.int32, device=device), prefill_len=counts.clone(),
               last_sampled_tokens=torch.randint(0, 32000, (num_reqs,), generator=generator).to(device),
               draft_tokens=torch.randint(0, 32000, (num_reqs, max(query_len - 1, 1)), generator=generator).to(device),
               cu_num_logits=step.query_start_loc.clone(),
               logits_indices=torch.empty(num_tokens, dtype=torch.int64, device=device),
               expanded_idx_mapping=torch.empty(num_tokens, dtype=rows.dtype, device=device),
               expanded_local_pos=torch.empty(num_tokens, dtype=torch.int32, device=device))
    dcp = torch.empty(num_reqs, dtype=torch.int32, device=device) if step.cp_world_size > 1 else None

    def fused_whole():
        specops.prepare_spec_decode_inputs(
            counts, empty, empty, empty, empty, empty, step.query_start_loc, tables, step.block_sizes,
            positions=positions, seq_lens=seq_lens, slot_mappings=slot_mappings, cp_sharded=step.cp_sharded,
            cp_world_size=step.cp_world_size, cp_rank=step.cp_rank, idx_mapping=rows, num_blocks=num_blocks,
            request_indexed_counts=True, gathered_block_tables=gathered, dcp_local_seq_lens=dcp, **ids)

    def unfused_whole():
        unfused_target()
        specops.prepare_input_ids(ids["input_ids"], rows, step.query_start_loc, counts, ids["prefill_len"],
                                  ids["last_sampled_tokens"], ids["draft_tokens"], ids["cu_num_logits"],
                                  logits_indices=ids["logits_indices"], expanded_idx_mapping=ids["expanded_idx_mapping"],
                                  expanded_local_pos=ids["expanded_local_pos"])
        if dcp is not None:
            specops.dcp_local_seq_lens(seq_lens, step.cp_world_size, step.cp_rank, 1, out=dcp)

    return {"specops": fused_whole, "native-unfused": unfused_whole}


def target_step_cases(device: torch.device, quick: bool) -> list[Case]:
    result = []
    for num_reqs, query_len, block_sizes, cp_sharded, world in QUICK_SHAPES if quick else SHAPES[1:3]:
        step = make_bench_step(num_reqs, query_len, block_sizes=block_sizes, cp_sharded=cp_sharded,
                               cp_world_size=world, device=device)
        for whole in (False, True):
            name = "MRV2 whole target" if whole else "MRV2 target"
            label = f"{name} R={num_reqs} q={query_len} G={len(block_sizes)} W={world}"
            result.append(Case("prepare_spec_decode_inputs", label, num_reqs, step.num_tokens,
                               _target_step_impls(step, whole=whole), baselines=("native-unfused",),
                               family=f"{name} G={len(block_sizes)} W={world}"))
    return result
