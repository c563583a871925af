"""Public op wrappers (one module per op); importing this registers fakes and device kernels."""

from specops.ops.apply_staged_writes import apply_staged_writes
from specops.ops.compute_slot_mapping import compute_slot_mapping
from specops.ops.gather_block_tables import gather_block_tables
from specops.ops.sas_metadata import sas_metadata

__all__ = ["apply_staged_writes", "compute_slot_mapping", "gather_block_tables", "sas_metadata"]
