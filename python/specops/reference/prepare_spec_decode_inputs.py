"""Reference for prepare_spec_decode_inputs: literally the unfused sequence of references (in the
request-indexed mode: positions and seq_lens through idx_mapping, the slot mappings, then the
block-table gather)."""

from __future__ import annotations

import torch

from specops._constants import PAD_SLOT_ID
from specops._step_layout import group_layouts, spec_decode_extents
from specops.reference.compute_slot_mapping import compute_slot_mapping
from specops.reference.correct_num_computed_tokens import correct_num_computed_tokens
from specops.reference.gather_block_tables_multi import gather_block_tables_multi
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
    idx_mapping: torch.Tensor | None,
    num_tokens_padded: int | None,
    num_reqs_padded: int | None,
    cp_world_size: int,
    cp_rank: int,
    cp_interleave: int,
    block_sizes: list[int],
    blocks_per_kv_block: list[int],
    cp_sharded: list[bool],
    slot_mapping_enabled: list[bool],
    num_blocks: list[torch.Tensor] = (),
    request_indexed_counts: bool = False,
    gathered_block_tables: list[torch.Tensor] = (),
    num_gathered_rows: int = 0,
    sliding_window_reach: list[int] = (),
) -> None:
    num_tokens_padded, num_reqs_padded = spec_decode_extents(positions, seq_lens, num_tokens_padded, num_reqs_padded)
    correct_num_computed_tokens(num_computed_tokens, num_accepted_tokens, prev_positions, valid_sampled_token_count,
                                prev_num_draft_tokens, cpu_num_computed_tokens)
    # Request-indexed counts have no rows to correct (prev_positions is empty).
    prepare_positions_and_seq_lens(num_computed_tokens, query_start_loc, positions, seq_lens, num_tokens_padded,
                                   num_reqs_padded, idx_mapping if request_indexed_counts else None)
    num_tokens = max(0, min(int(query_start_loc[-1]), num_tokens_padded))
    layouts = group_layouts(block_sizes, blocks_per_kv_block, cp_sharded, slot_mapping_enabled, cp_world_size,
                            cp_rank, cp_interleave)
    for g, (table, out, layout) in enumerate(zip(block_tables, slot_mappings, layouts)):
        if not layout.enabled:  # PAD for every token; the table is never read
            out[:num_tokens_padded] = PAD_SLOT_ID
            continue
        compute_slot_mapping(query_start_loc, positions[:num_tokens], table, layout.block_size, out,
                             layout.blocks_per_kv_block, *layout.cp, idx_mapping, num_tokens_padded,
                             num_blocks[g] if num_blocks else None)
    if gathered_block_tables:
        reach = list(sliding_window_reach) or [0] * len(block_tables)
        gather_block_tables_multi(block_tables, num_blocks, idx_mapping, gathered_block_tables, num_gathered_rows,
                                  num_computed_tokens, reach, block_sizes)
