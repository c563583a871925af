"""Every op, described once for the hardening tests (see docs/hardening.md).

Adding an op = one new file in op_specs/ (named after the schema, defining its OpSpec; the
vocabulary is op_specs/_spec.py, shared corruptions op_specs/_corruptions.py) + one line in the
OP_TABLE list below. test_bad_input_matrix.py, test_guard_bands.py and test_steady_state.py
derive all their cases from OP_TABLE; test_bad_input_matrix.py fails for a schema in
torch.ops.specops that has no entry here.
"""

from __future__ import annotations

from op_specs._spec import Arg, Bad, Call, Corruption, OpSpec, bad, bad_with, extreme_values, get_arg, set_arg, stale
from op_specs._spec import t32, t64, tensor_keys
from op_specs.apply_staged_writes import APPLY
from op_specs.compute_slot_mapping import SLOT_MAPPING
from op_specs.correct_num_computed_tokens import CORRECT_COUNTS
from op_specs.correct_optimistic_seq_lens import CORRECT_SEQ_LENS
from op_specs.cp_local_metadata import CP_LOCAL
from op_specs.dcp_local_seq_lens import DCP_LOCAL
from op_specs.dspark_swa_indices import DSPARK
from op_specs.dspark_swa_indices_multi import DSPARK_MULTI
from op_specs.format_slot_mapping_blocks import FORMAT
from op_specs.format_slot_mapping_blocks_multi import FORMAT_MULTI
from op_specs.gather_block_tables import GATHER
from op_specs.prepare_positions_and_seq_lens import PREPARE_POSITIONS
from op_specs.prepare_spec_decode_inputs import FUSED
from op_specs.sas_metadata import SAS
# The rest of the DSA metadata family.
from op_specs.compressor_metadata import COMPRESSOR
from op_specs.kv_quant_sas_metadata import KV_QUANT_SAS
from op_specs.lightning_indexer_metadata import LIGHTNING_INDEXER
from op_specs.store_kv_block_metadata import STORE_KV_BLOCK
from op_specs.pcp_gathered_slot_mappings import PCP_SLOTS  # docs/pcp.md
from op_specs.pcp_local_inputs import PCP_LOCAL  # docs/pcp.md

# The step-bookkeeping ops.
from op_specs.advance_draft_step import ADVANCE_DRAFT_STEP
from op_specs.advance_draft_steps import ADVANCE_DRAFT_STEPS
from op_specs.expand_parallel_draft_inputs import EXPAND_PARALLEL_DRAFT
from op_specs.count_sampled_and_rejected import COUNT_SAMPLED
from op_specs.post_update_after_sampling import POST_UPDATE
from op_specs.prepare_input_ids import PREPARE_INPUT_IDS
from op_specs.prepare_next_token_ids import NEXT_TOKENS

__all__ = ["Arg", "Bad", "Call", "Corruption", "OpSpec", "bad", "bad_with", "extreme_values", "get_arg", "set_arg",
           "stale", "t32", "t64", "tensor_keys", "OP_TABLE", "HOST_HELPERS", "DSPARK", "FUSED", "SLOT_MAPPING"]

OP_TABLE: tuple[OpSpec, ...] = (
    SLOT_MAPPING,
    GATHER,
    APPLY,
    FORMAT,
    FORMAT_MULTI,
    DSPARK,
    DSPARK_MULTI,
    CP_LOCAL,
    DCP_LOCAL,
    SAS,
    CORRECT_COUNTS,
    CORRECT_SEQ_LENS,
    PREPARE_POSITIONS,
    FUSED,
    # step bookkeeping
    PREPARE_INPUT_IDS,
    COUNT_SAMPLED,
    POST_UPDATE,
    NEXT_TOKENS,
    ADVANCE_DRAFT_STEP,
    ADVANCE_DRAFT_STEPS,
    EXPAND_PARALLEL_DRAFT,
    KV_QUANT_SAS,
    LIGHTNING_INDEXER,
    STORE_KV_BLOCK,
    COMPRESSOR,
    PCP_LOCAL,
    PCP_SLOTS,
    # Add an op here: one line per op (docs/hardening.md, "Adding an op").
)

# Schemas that are not public ops: reached only through another op's wrapper, covered there.
HOST_HELPERS = {
    "cp_local_max_lens": "the host ints of cp_local_metadata, from its query_start_loc(_cpu)/seq_lens(_cpu)",
    "check_slot_mapping_positions": "compute_slot_mapping's value checks for every group of PersistentMappings.refresh",
    # A public op, but host-only (no device kernel, no buffers to write: it returns the layout),
    # so none of the matrix's families applies; tests/test_pcp_partition.py covers its bad input.
    "pcp_partition": "every PCP rank's layout from host counts (specops.pcp_partition)",
}
