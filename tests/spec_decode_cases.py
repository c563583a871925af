"""Shared parts of the prepare_spec_decode_inputs tests: fresh outputs, the fused call, the
unfused sequence, the independent expectation (the per-op ones of tests/expectations.py in
sequence) and the step comparisons."""

from __future__ import annotations

import torch
from expectations import compute_slot_mapping as expected_slots
from expectations import corrected_counts, positions_and_seq_lens
from strategies import SpecDecodeStep, assert_same

import specops

PAD = specops.PAD_SLOT_ID


def i32(values):
    return torch.tensor(values, dtype=torch.int32)


def fresh_outputs(step: SpecDecodeStep, padded_tokens: int, padded_reqs: int, positions_dtype=torch.int64,
                  slot_dtypes=None):
    slot_dtypes = slot_dtypes or [torch.int64] * len(step.block_tables)
    return dict(positions=torch.full((padded_tokens,), 555, dtype=positions_dtype),
                seq_lens=torch.full((padded_reqs,), 555, dtype=torch.int32),
                slot_mappings=[torch.full((padded_tokens,), 555, dtype=dtype) for dtype in slot_dtypes])


def run_fused(step: SpecDecodeStep, outputs: dict, cp_world_size=1, cp_rank=0, cp_interleave=1,
              slot_mapping_enabled=True, **padding):
    return specops.prepare_spec_decode_inputs(
        *step.correction.args(), step.query_start_loc, step.block_tables, step.block_sizes,
        blocks_per_kv_block=step.blocks_per_kv_block, cp_sharded=step.cp_sharded, cp_world_size=cp_world_size,
        cp_rank=cp_rank, cp_interleave=cp_interleave, idx_mapping=step.idx_mapping,
        slot_mapping_enabled=slot_mapping_enabled, **outputs, **padding)


def run_unfused(step: SpecDecodeStep, outputs: dict, cp_world_size=1, cp_rank=0, cp_interleave=1, **padding):
    """The sequence the fused op replaces, through the public ops."""
    specops.correct_num_computed_tokens(*step.correction.args())
    specops.prepare_positions_and_seq_lens(step.correction.num_computed_tokens, step.query_start_loc,
                                           positions=outputs["positions"], seq_lens=outputs["seq_lens"],
                                           num_tokens_padded=padding.get("num_tokens_padded"),
                                           num_reqs_padded=padding.get("num_reqs_padded"))
    for g, table in enumerate(step.block_tables):
        sharded = step.cp_sharded[g]
        specops.compute_slot_mapping(
            step.query_start_loc, outputs["positions"][: step.num_tokens], table, step.block_sizes[g],
            out=outputs["slot_mappings"][g], blocks_per_kv_block=step.blocks_per_kv_block[g],
            cp_world_size=cp_world_size if sharded else 1, cp_rank=cp_rank if sharded else 0,
            cp_interleave=cp_interleave if sharded else 1, idx_mapping=step.idx_mapping,
            num_tokens_padded=padding.get("num_tokens_padded"))


def expectation(step: SpecDecodeStep, outputs: dict, cp_world_size: int, cp_rank: int, cp_interleave: int,
                enabled: list[bool], num_tokens_padded: int, num_reqs_padded: int) -> tuple[SpecDecodeStep, dict]:
    """The step and the outputs after the fused op, from the independent per-op expectations:
    the count correction, then positions and seq_lens from the corrected counts, then each
    group's slot mapping (PAD for every padded token of a disabled group)."""
    expected_step, expected = clone_step(step), clone_outputs(outputs)
    correction = expected_step.correction
    correction.num_computed_tokens, correction.num_accepted_tokens = corrected_counts(*step.correction.args())
    expected["positions"], expected["seq_lens"] = positions_and_seq_lens(
        correction.num_computed_tokens, step.query_start_loc, outputs["positions"], outputs["seq_lens"],
        num_tokens_padded, num_reqs_padded)
    for g, table in enumerate(step.block_tables):
        out = expected["slot_mappings"][g]
        if not enabled[g]:
            out[:num_tokens_padded] = PAD
            continue
        sharded = step.cp_sharded[g]
        expected["slot_mappings"][g] = expected_slots(
            step.query_start_loc, expected["positions"][: step.num_tokens], table, step.block_sizes[g], out,
            blocks_per_kv_block=step.blocks_per_kv_block[g], cp_world_size=cp_world_size if sharded else 1,
            cp_rank=cp_rank if sharded else 0, cp_interleave=cp_interleave if sharded else 1,
            idx_mapping=step.idx_mapping, num_tokens_padded=num_tokens_padded)
    return expected_step, expected


def assert_same_step(actual_step, actual, expected_step, expected, what):
    assert_same(actual_step.correction.num_computed_tokens, expected_step.correction.num_computed_tokens,
                f"{what}: num_computed_tokens")
    assert_same(actual_step.correction.num_accepted_tokens, expected_step.correction.num_accepted_tokens,
                f"{what}: num_accepted_tokens")
    assert_same(actual["positions"], expected["positions"], f"{what}: positions")
    assert_same(actual["seq_lens"], expected["seq_lens"], f"{what}: seq_lens")
    for g, (a, e) in enumerate(zip(actual["slot_mappings"], expected["slot_mappings"])):
        assert_same(a, e, f"{what}: slot_mappings[{g}]")


def clone_step(step: SpecDecodeStep) -> SpecDecodeStep:
    return SpecDecodeStep(step.correction.clone(), step.query_start_loc, step.block_tables, step.block_sizes,
                          step.blocks_per_kv_block, step.cp_sharded, step.idx_mapping)


def clone_outputs(outputs: dict) -> dict:
    return dict(positions=outputs["positions"].clone(), seq_lens=outputs["seq_lens"].clone(),
                slot_mappings=[t.clone() for t in outputs["slot_mappings"]])
