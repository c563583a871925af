"""Benchmark of PersistentMappings.refresh (every group's captured table and slot mapping) and of
PersistentMappings.prepare_step (the runner step) against the op calls it replaces."""

from __future__ import annotations

import torch

import specops
from specops import MappingGroup, PersistentMappings
from specops.bench._harness import Case, empty_op_call
from specops.bench.compute_slot_mapping import numpy_slot_mapping, torch_slot_mapping
from specops.bench.gather_block_tables import numpy_gather, torch_gather
from specops.bench.workload import make_bench_batch

BLOCK_SIZES = (128, 64, 16)  # e.g. a full-attention, a sliding-window and an indexer group
MAX_CONTEXT = 4096
SHAPES = [(8, 1), (256, 4), (1024, 1)]
QUICK_SHAPES = [(8, 1), (64, 4)]
PADDING = 8


def make_mappings(num_reqs: int, query_len: int, device: torch.device):
    """PersistentMappings whose rows hold a batch's blocks, and that batch, shuffled."""
    batch = make_bench_batch(num_reqs, query_len, block_size=min(BLOCK_SIZES), max_context=MAX_CONTEXT)
    max_blocks = -(-(MAX_CONTEXT + query_len) // min(BLOCK_SIZES))
    mappings = PersistentMappings([MappingGroup(size) for size in BLOCK_SIZES], max_num_reqs=num_reqs + PADDING,
                                  max_num_blocks_per_req=max_blocks, max_num_tokens=batch.num_tokens + PADDING,
                                  device=device)
    generator = torch.Generator().manual_seed(1)
    idx_mapping = torch.randperm(num_reqs, generator=generator).to(torch.int32)
    seq_lens = batch.seq_lens.tolist()
    for r, row in enumerate(idx_mapping.tolist()):
        ids = [batch.block_table[r, : -(-seq_lens[r] // size)].tolist() for size in BLOCK_SIZES]
        mappings.append_blocks(row, ids, overwrite=True)
    mappings.apply_staged()
    return mappings, batch, idx_mapping.to(device)


def make_case(num_reqs: int, query_len: int, device: torch.device) -> Case:
    mappings, batch, idx_mapping = make_mappings(num_reqs, query_len, device)
    qsl, positions = batch.query_start_loc.to(device), batch.positions.to(device)
    reqs_padded, tokens_padded = num_reqs + PADDING, batch.num_tokens + PADDING
    sources = list(zip(mappings.source_block_tables, mappings.num_blocks, BLOCK_SIZES))
    tables = [torch.empty_like(t) for t in mappings.block_tables]
    slots = [torch.empty_like(s) for s in mappings.slot_mappings]
    np_sources = [(t.cpu().numpy(), c.cpu().numpy(), size) for t, c, size in sources]
    np_tables = [t.cpu().numpy() for t in tables]
    np_slots = [s.cpu().numpy() for s in slots]
    np_idx, np_qsl, np_positions = (t.cpu().numpy() for t in (idx_mapping, qsl, positions))

    def numpy_refresh():
        for (src, counts, size), table, out in zip(np_sources, np_tables, np_slots):
            numpy_gather(src, counts, np_idx, table, reqs_padded)
            numpy_slot_mapping(np_qsl, np_positions, table, size, 1, 0, 1, out[:tokens_padded])

    def torch_refresh():
        for (src, counts, size), table, out in zip(sources, tables, slots):
            torch_gather(src, counts, idx_mapping, table, reqs_padded)
            torch_slot_mapping(qsl, positions, table, size, 1, 0, 1, out[:tokens_padded])

    impls = {
        "specops": lambda: mappings.refresh(idx_mapping, qsl, positions, num_reqs_padded=reqs_padded,
                                            num_tokens_padded=tokens_padded),
        "numpy": numpy_refresh,
        "torch-eager": torch_refresh,
        "empty-op": empty_op_call(device),
    }
    return Case("persistent_mappings", f"refresh R={num_reqs} q={query_len} G={len(BLOCK_SIZES)}", num_reqs,
                batch.num_tokens, impls, floors=("empty-op",))


def make_step_case(num_reqs: int, query_len: int, device: torch.device) -> Case:
    """prepare_step against what a runner writes without it: the fused op on the source tables
    with every group's sizes and counts repeated, then one gather per group."""
    mappings, batch, idx_mapping = make_mappings(num_reqs, query_len, device)
    qsl = batch.query_start_loc.to(device)
    reqs_padded, tokens_padded = num_reqs + PADDING, batch.num_tokens + PADDING
    # Every request is a decode that did not draft last step: the correction takes the host
    # counts, so each call sees the same step.
    counts = (batch.seq_lens - query_len).to(torch.int32).to(device)
    step_inputs = (counts.clone(), torch.zeros_like(counts), torch.arange(num_reqs, dtype=torch.int32, device=device),
                   torch.ones_like(counts), torch.zeros_like(counts), counts)
    positions = torch.empty(tokens_padded, dtype=torch.int64, device=device)
    seq_lens = torch.empty(reqs_padded, dtype=torch.int32, device=device)
    slots = [torch.empty(tokens_padded, dtype=torch.int64, device=device) for _ in BLOCK_SIZES]
    tables = [torch.empty_like(t) for t in mappings.block_tables]

    def pieces():
        specops.prepare_spec_decode_inputs(
            *step_inputs, qsl, mappings.source_block_tables, list(BLOCK_SIZES), positions=positions,
            seq_lens=seq_lens, slot_mappings=slots, idx_mapping=idx_mapping, num_tokens_padded=tokens_padded,
            num_reqs_padded=reqs_padded, num_blocks=mappings.num_blocks)
        for source, count, table in zip(mappings.source_block_tables, mappings.num_blocks, tables):
            specops.gather_block_tables(source, count, idx_mapping, out=table, num_reqs_padded=reqs_padded)

    impls = {
        "specops": lambda: mappings.prepare_step(*step_inputs, qsl, idx_mapping, num_reqs_padded=reqs_padded,
                                                 num_tokens_padded=tokens_padded),
        "specops-pieces": pieces,
        "empty-op": empty_op_call(device),
    }
    return Case("persistent_mappings", f"prepare_step R={num_reqs} q={query_len} G={len(BLOCK_SIZES)}", num_reqs,
                batch.num_tokens, impls, floors=("empty-op",))


def cases(device: torch.device, quick: bool) -> list[Case]:
    shapes = QUICK_SHAPES if quick else SHAPES
    return ([make_case(num_reqs, query_len, device) for num_reqs, query_len in shapes]
            + [make_step_case(num_reqs, query_len, device) for num_reqs, query_len in shapes])
