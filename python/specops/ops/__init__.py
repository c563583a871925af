"""Public op wrappers (one module per op); importing this registers fakes and device kernels."""

from specops.ops.apply_staged_writes import apply_staged_writes
from specops.ops.compute_slot_mapping import compute_slot_mapping
from specops.ops.cp_local_metadata import CPLocalMetadata, cp_local_metadata
from specops.ops.dspark_swa_indices import dspark_swa_indices
from specops.ops.format_slot_mapping_blocks import format_slot_mapping_blocks
from specops.ops.gather_block_tables import gather_block_tables
from specops.ops.sas_metadata import sas_metadata

__all__ = [
    "CPLocalMetadata",
    "apply_staged_writes",
    "compute_slot_mapping",
    "cp_local_metadata",
    "dspark_swa_indices",
    "format_slot_mapping_blocks",
    "gather_block_tables",
    "sas_metadata",
]
