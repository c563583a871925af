"""Public op wrappers (one module per op); importing this registers fakes and device kernels."""

from specops.ops.apply_staged_writes import apply_staged_writes
from specops.ops.compute_slot_mapping import compute_slot_mapping
from specops.ops.correct_num_computed_tokens import correct_num_computed_tokens
from specops.ops.correct_optimistic_seq_lens import correct_optimistic_seq_lens
from specops.ops.cp_local_metadata import CPLocalMetadata, cp_local_metadata
from specops.ops.dcp_local_seq_lens import dcp_local_seq_lens
from specops.ops.dspark_swa_indices import dspark_swa_indices
from specops.ops.dspark_swa_indices_multi import dspark_swa_indices_multi
from specops.ops.format_slot_mapping_blocks import format_slot_mapping_blocks
from specops.ops.format_slot_mapping_blocks_multi import format_slot_mapping_blocks_multi
from specops.ops.gather_block_tables import gather_block_tables
from specops.ops.prepare_positions_and_seq_lens import prepare_positions_and_seq_lens
from specops.ops.prepare_spec_decode_inputs import SpecDecodeInputs, prepare_spec_decode_inputs
from specops.ops.sas_metadata import sas_metadata

# The step-bookkeeping ops (docs/step_bookkeeping.md).
from specops.ops.count_sampled_and_rejected import SampledCounts, count_sampled_and_rejected
from specops.ops.prepare_input_ids import StepInputIds, prepare_input_ids
from specops.ops.post_update_after_sampling import post_update_after_sampling
from specops.ops.prepare_next_token_ids import NextTokens, prepare_next_token_ids
from specops.ops.prepare_draft_prefill_inputs import prepare_draft_prefill_inputs
from specops.ops.advance_draft_step import DraftStep, advance_draft_step
from specops.ops.advance_draft_steps import DraftSteps, advance_draft_steps
from specops.ops.expand_parallel_draft_inputs import ParallelDraftInputs, expand_parallel_draft_inputs
# The rest of the DSA metadata family (docs/dsa_metadata_family.md).
from specops.ops.kv_quant_sas_metadata import kv_quant_sas_metadata
from specops.ops.lightning_indexer_metadata import lightning_indexer_metadata
# sgl-kernel-npu's call form of sas_metadata (docs/sas_metadata.md).
from specops.ops.sparse_attn_sharedkv_metadata_host import sparse_attn_sharedkv_metadata_host
from specops.ops.store_kv_block_metadata import StoreKvBlockGroups, store_kv_block_metadata
from specops.ops.compressor_metadata import CompressorMetadata, compressor_metadata
from specops.ops.compressor_metadata_multi import CompressorMetadataMulti, compressor_metadata_multi
# docs/pcp.md: prefill context parallelism
from specops.ops.pcp_gathered_slot_mappings import pcp_gathered_slot_mappings
from specops.ops.pcp_local_inputs import PCPLocalInputs, pcp_local_inputs
from specops.ops.pcp_partition import PCPDeviceLayout, PCPLayout, PCPRankLayout, pcp_partition
# Every KV-cache group's batch block table in one launch (docs/persistent_buffers.md).
from specops.ops.gather_block_tables_multi import gather_block_tables_multi

__all__ = [
    "CPLocalMetadata",
    "SpecDecodeInputs",
    "apply_staged_writes",
    "compute_slot_mapping",
    "correct_num_computed_tokens",
    "correct_optimistic_seq_lens",
    "cp_local_metadata",
    "dcp_local_seq_lens",
    "dspark_swa_indices",
    "dspark_swa_indices_multi",
    "format_slot_mapping_blocks",
    "format_slot_mapping_blocks_multi",
    "gather_block_tables",
    "prepare_positions_and_seq_lens",
    "prepare_spec_decode_inputs",
    "sas_metadata",
    # step bookkeeping
    "SampledCounts",
    "StepInputIds",
    "count_sampled_and_rejected",
    "prepare_input_ids",
    "post_update_after_sampling",
    "NextTokens",
    "prepare_next_token_ids",
    "prepare_draft_prefill_inputs",
    "DraftStep",
    "DraftSteps",
    "advance_draft_step",
    "advance_draft_steps",
    "ParallelDraftInputs",
    "expand_parallel_draft_inputs",
    # the rest of the DSA metadata family
    "CompressorMetadata",
    "CompressorMetadataMulti",
    "StoreKvBlockGroups",
    "compressor_metadata",
    "compressor_metadata_multi",
    "kv_quant_sas_metadata",
    "lightning_indexer_metadata",
    "sparse_attn_sharedkv_metadata_host",
    "store_kv_block_metadata",
    # docs/pcp.md
    "PCPDeviceLayout",
    "PCPLayout",
    "PCPLocalInputs",
    "PCPRankLayout",
    "pcp_gathered_slot_mappings",
    "pcp_local_inputs",
    "pcp_partition",
    # every group's gather_block_tables in one launch
    "gather_block_tables_multi",
]
