"""Public op wrappers (one module per op); importing this registers fakes and device kernels."""

from specops.ops.compute_slot_mapping import compute_slot_mapping
from specops.ops.sas_metadata import sas_metadata

__all__ = ["compute_slot_mapping", "sas_metadata"]
