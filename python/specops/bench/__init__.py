"""specops-bench: op-level microbenchmarks against the baselines a runner would otherwise use.

Each module here exposes `cases(device, quick) -> list[Case]`; BENCHMARKS lists them in the
order the report shows them.
"""

from specops.bench import (
    apply_staged_writes,
    compute_slot_mapping,
    correct_num_computed_tokens,
    correct_optimistic_seq_lens,
    cp_local_metadata,
    dcp_local_seq_lens,
    draft_loop,
    drafting,
    dspark_swa_indices,
    dspark_swa_indices_multi,
    format_slot_mapping_blocks,
    format_slot_mapping_blocks_multi,
    gather_block_tables,
    persistent_mappings,
    prepare_positions_and_seq_lens,
    prepare_spec_decode_inputs,
    sas_metadata,
)
from specops.bench import (  # the step-bookkeeping ops
    advance_draft_step,
    count_sampled_and_rejected,
    expand_parallel_draft_inputs,
    post_update_after_sampling,
    prepare_input_ids,
    prepare_next_token_ids,
)
from specops.bench import pcp_gathered_slot_mappings, pcp_partition  # docs/pcp.md

# The rest of the DSA metadata family.
from specops.bench import kv_quant_sas_metadata, lightning_indexer_metadata, store_kv_block_metadata

BENCHMARKS = {
    "compute_slot_mapping": compute_slot_mapping,
    "correct_num_computed_tokens": correct_num_computed_tokens,
    "correct_optimistic_seq_lens": correct_optimistic_seq_lens,
    "prepare_positions_and_seq_lens": prepare_positions_and_seq_lens,
    "prepare_spec_decode_inputs": prepare_spec_decode_inputs,
    "gather_block_tables": gather_block_tables,
    "apply_staged_writes": apply_staged_writes,
    "persistent_mappings": persistent_mappings,
    "cp_local_metadata": cp_local_metadata,
    "dcp_local_seq_lens": dcp_local_seq_lens,
    "format_slot_mapping_blocks": format_slot_mapping_blocks,
    "format_slot_mapping_blocks_multi": format_slot_mapping_blocks_multi,
    "dspark_swa_indices": dspark_swa_indices,
    "dspark_swa_indices_multi": dspark_swa_indices_multi,
    "sas_metadata": sas_metadata,
    "drafting": drafting,
    "draft_loop": draft_loop,
    # the step-bookkeeping ops
    "prepare_input_ids": prepare_input_ids,
    "count_sampled_and_rejected": count_sampled_and_rejected,
    "post_update_after_sampling": post_update_after_sampling,
    "prepare_next_token_ids": prepare_next_token_ids,
    "advance_draft_step": advance_draft_step,
    "expand_parallel_draft_inputs": expand_parallel_draft_inputs,
    # the rest of the DSA metadata family
    "kv_quant_sas_metadata": kv_quant_sas_metadata,
    "lightning_indexer_metadata": lightning_indexer_metadata,
    "store_kv_block_metadata": store_kv_block_metadata,
    # docs/pcp.md
    "pcp_partition": pcp_partition,
    "pcp_gathered_slot_mappings": pcp_gathered_slot_mappings,
}
