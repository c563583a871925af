"""Reference for prepare_spec_decode_inputs: literally the unfused sequence of references."""

from __future__ import annotations

import torch

from specops.reference.compute_slot_mapping import compute_slot_mapping
from specops.reference.correct_num_computed_tokens import correct_num_computed_tokens
from specops.reference.prepare_positions_and_seq_lens import prepare_positions_and_seq_lens


def prepare_spec_decode_inputs(
    num_computed_tokens: torch.Tensor,
    num_accepted_tokens: torch.Tensor,
    prev_positions: torch.Tensor,
    valid_sampled_token_count: torch.Tensor,
    prev_num_draft_tokens: torch.Tensor,
    cpu_num_computed_tokens: torch.Tensor,
    query_start_loc: torch.Tensor,
    positions: torch.Tensor,
    seq_lens: torch.Tensor,
    block_tables: list[torch.Tensor],
    slot_mappings: list[torch.Tensor],
    block_sizes: list[int],
    blocks_per_kv_block: list[int],
    cp_sharded: list[bool],
    cp_world_size: int,
    cp_rank: int,
    cp_interleave: int,
    idx_mapping: torch.Tensor | None,
    num_tokens_padded: int,
    num_reqs_padded: int,
) -> None:
    correct_num_computed_tokens(num_computed_tokens, num_accepted_tokens, prev_positions, valid_sampled_token_count,
                                prev_num_draft_tokens, cpu_num_computed_tokens)
    prepare_positions_and_seq_lens(num_computed_tokens, query_start_loc, positions, seq_lens, num_tokens_padded,
                                   num_reqs_padded)
    num_tokens = min(int(query_start_loc[-1]), num_tokens_padded)
    for table, out, block_size, kv_blocks, sharded in zip(block_tables, slot_mappings, block_sizes,
                                                          blocks_per_kv_block, cp_sharded):
        world, rank, interleave = (cp_world_size, cp_rank, cp_interleave) if sharded else (1, 0, 1)
        compute_slot_mapping(query_start_loc, positions[:num_tokens], table, block_size, out, kv_blocks, world, rank,
                             interleave, idx_mapping, num_tokens_padded)
