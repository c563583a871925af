"""specops: speculative-decoding metadata kernels behind torch.ops.specops.*.

Importing specops imports torch, then loads the native extension if it matches that torch;
it never fails because the extension is missing or mismatched (see `python -m specops`).
"""

import torch  # noqa: F401  (the extension links against it: load torch first)

from specops._backend import available_backends, backend, backend_report, current_backend
from specops._constants import NULL_BLOCK_ID, PAD_SLOT_ID
from specops._extension import EXTENSION
from specops.ops import (
    CPLocalMetadata,
    SpecDecodeInputs,
    apply_staged_writes,
    compute_slot_mapping,
    correct_num_computed_tokens,
    correct_optimistic_seq_lens,
    cp_local_metadata,
    dcp_local_seq_lens,
    dspark_swa_indices,
    dspark_swa_indices_multi,
    format_slot_mapping_blocks,
    format_slot_mapping_blocks_multi,
    gather_block_tables,
    prepare_positions_and_seq_lens,
    prepare_spec_decode_inputs,
    sas_metadata,
)
from specops.ops import (  # the step-bookkeeping ops
    SampledCounts,
    StepInputIds,
    count_sampled_and_rejected,
    prepare_input_ids,
    post_update_after_sampling,
    NextTokens,
    prepare_next_token_ids,
    DraftStep,
    advance_draft_step,
    ParallelDraftInputs,
    expand_parallel_draft_inputs,
)
from specops.ops import (  # docs/pcp.md
    PCPDeviceLayout,
    PCPLayout,
    PCPLocalInputs,
    PCPRankLayout,
    pcp_gathered_slot_mappings,
    pcp_local_inputs,
    pcp_partition,
)
from specops.persistent import MappingGroup, PersistentMappings
from specops import drafting  # docs/drafting.md: specops.drafting (imports the ops above)
from specops.sas_layout import FAEntry, FDEntry, SASSchedule, decode_sas_metadata

# The rest of the DSA metadata family.
from specops.ops import (
    CompressorMetadata,
    StoreKvBlockGroups,
    compressor_metadata,
    kv_quant_sas_metadata,
    lightning_indexer_metadata,
    store_kv_block_metadata,
)
from specops.sas_family_layout import (
    KvQuantFAEntry,
    KvQuantSASSchedule,
    LDEntry,
    LIEntry,
    LightningIndexerSchedule,
    decode_kv_quant_sas_metadata,
    decode_lightning_indexer_metadata,
)

__version__ = EXTENSION.built_version or "0.1.0"

__all__ = [
    "CPLocalMetadata",
    "EXTENSION",
    "FAEntry",
    "FDEntry",
    "MappingGroup",
    "NULL_BLOCK_ID",
    "PAD_SLOT_ID",
    "PersistentMappings",
    "SASSchedule",
    "SpecDecodeInputs",
    "apply_staged_writes",
    "available_backends",
    "backend",
    "backend_report",
    "compute_slot_mapping",
    "correct_num_computed_tokens",
    "correct_optimistic_seq_lens",
    "cp_local_metadata",
    "current_backend",
    "dcp_local_seq_lens",
    "decode_sas_metadata",
    "drafting",
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
    "DraftStep",
    "advance_draft_step",
    "ParallelDraftInputs",
    "expand_parallel_draft_inputs",
    # the rest of the DSA metadata family
    "CompressorMetadata",
    "KvQuantFAEntry",
    "KvQuantSASSchedule",
    "LDEntry",
    "LIEntry",
    "LightningIndexerSchedule",
    "StoreKvBlockGroups",
    "compressor_metadata",
    "decode_kv_quant_sas_metadata",
    "decode_lightning_indexer_metadata",
    "kv_quant_sas_metadata",
    "lightning_indexer_metadata",
    "store_kv_block_metadata",
    # docs/pcp.md
    "PCPDeviceLayout",
    "PCPLayout",
    "PCPLocalInputs",
    "PCPRankLayout",
    "pcp_gathered_slot_mappings",
    "pcp_local_inputs",
    "pcp_partition",
]
