"""Reference for prepare_spec_decode_inputs: literally the unfused sequence of references (in the
request-indexed mode: positions and seq_lens through idx_mapping, the slot mappings, then the
block-table gather, the input ids, the DCP-local seq_lens)."""

from __future__ import annotations

from types import SimpleNamespace

from specops._constants import PAD_SLOT_ID
from specops._step_layout import group_layouts, spec_decode_extents
from specops.reference.compute_slot_mapping import compute_slot_mapping
from specops.reference.correct_num_computed_tokens import correct_num_computed_tokens
from specops.reference.dcp_local_seq_lens import dcp_local_seq_lens
from specops.reference.gather_block_tables_multi import gather_block_tables_multi
from specops.reference.prepare_input_ids import prepare_input_ids
from specops.reference.prepare_positions_and_seq_lens import prepare_positions_and_seq_lens


def prepare_spec_decode_inputs(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    num_tokens_padded, num_reqs_padded = spec_decode_extents(a.positions, a.seq_lens, a.num_tokens_padded,
                                                             a.num_reqs_padded)
    correct_num_computed_tokens(a)  # its six arguments, under the same names
    # Request-indexed counts have no rows to correct (prev_positions is empty).
    prepare_positions_and_seq_lens(SimpleNamespace(
        num_computed_tokens=a.num_computed_tokens, query_start_loc=a.query_start_loc, positions=a.positions,
        seq_lens=a.seq_lens, num_tokens_padded=num_tokens_padded, num_reqs_padded=num_reqs_padded,
        idx_mapping=a.idx_mapping if a.request_indexed_counts else None))
    num_tokens = max(0, min(int(a.query_start_loc[-1]), num_tokens_padded))
    layouts = group_layouts(a.block_sizes, a.blocks_per_kv_block, a.cp_sharded, a.slot_mapping_enabled, a.cp_world_size,
                            a.cp_rank, a.cp_interleave)
    for g, (table, out, layout) in enumerate(zip(a.block_tables, a.slot_mappings, layouts)):
        if not layout.enabled:  # PAD for every token; the table is never read
            out[:num_tokens_padded] = PAD_SLOT_ID
            continue
        cp_world_size, cp_rank, cp_interleave = layout.cp
        compute_slot_mapping(SimpleNamespace(
            query_start_loc=a.query_start_loc, positions=a.positions[:num_tokens], block_table=table,
            block_size=layout.block_size, out=out, blocks_per_kv_block=layout.blocks_per_kv_block,
            cp_world_size=cp_world_size, cp_rank=cp_rank, cp_interleave=cp_interleave, idx_mapping=a.idx_mapping,
            num_tokens_padded=num_tokens_padded, num_blocks=a.num_blocks[g] if a.num_blocks else None))
    if a.gathered_block_tables:
        gather_block_tables_multi(SimpleNamespace(
            src_block_tables=a.block_tables, num_blocks=a.num_blocks, idx_mapping=a.idx_mapping,
            out=a.gathered_block_tables, num_reqs_padded=a.num_gathered_rows, num_computed_tokens=a.num_computed_tokens,
            sliding_window_reach=list(a.sliding_window_reach) or [0] * len(a.block_tables), block_sizes=a.block_sizes))
    if a.input_ids is not None:
        # prepare_input_ids under the same names; its input_ids are not padded past T.
        prepare_input_ids(SimpleNamespace(
            input_ids=a.input_ids, idx_mapping=a.idx_mapping, query_start_loc=a.query_start_loc,
            num_computed_tokens=a.num_computed_tokens, prefill_len=a.prefill_len,
            last_sampled_tokens=a.last_sampled_tokens, draft_tokens=a.draft_tokens, cu_num_logits=a.cu_num_logits,
            num_new_sampled_tokens=a.num_new_sampled_tokens, all_token_ids=a.all_token_ids,
            next_prefill_tokens=a.next_prefill_tokens, logits_indices=a.logits_indices,
            expanded_idx_mapping=a.expanded_idx_mapping, expanded_local_pos=a.expanded_local_pos,
            num_logits_padded=a.num_logits_padded, num_tokens_padded=-1))
    if a.dcp_local_seq_lens is not None:
        num_reqs = a.query_start_loc.numel() - 1
        dcp_local_seq_lens(SimpleNamespace(seq_lens=a.seq_lens[:num_reqs], cp_world_size=a.cp_world_size,
                                           cp_rank=a.cp_rank, cp_interleave=a.cp_interleave,
                                           out=a.dcp_local_seq_lens))
