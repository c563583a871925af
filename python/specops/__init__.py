"""specops: speculative-decoding metadata kernels behind torch.ops.specops.*.

Importing specops imports torch, then loads the native extension if it matches that torch;
it never fails because the extension is missing or mismatched (see `python -m specops`).
"""

import torch  # noqa: F401  (the extension links against it: load torch first)

from specops._backend import available_backends, backend, backend_report, current_backend
from specops._constants import NULL_BLOCK_ID, PAD_SLOT_ID
from specops._extension import EXTENSION
# Every op wrapper and its result type, grouped as in specops.ops (one list: specops.ops.__all__).
from specops.ops import *  # noqa: F403
from specops.ops import __all__ as _OP_NAMES
from specops.persistent import MappingGroup, PersistentMappings
from specops import drafting  # docs/drafting.md: specops.drafting (imports the ops above)
from specops.sas_layout import FAEntry, FDEntry, SASSchedule, decode_sas_metadata

# The decoders of the rest of the DSA metadata family.
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
    "EXTENSION",
    "FAEntry",
    "FDEntry",
    "MappingGroup",
    "NULL_BLOCK_ID",
    "PAD_SLOT_ID",
    "PersistentMappings",
    "SASSchedule",
    "available_backends",
    "backend",
    "backend_report",
    "current_backend",
    "decode_sas_metadata",
    "drafting",
    # the decoders of the rest of the DSA metadata family
    "KvQuantFAEntry",
    "KvQuantSASSchedule",
    "LDEntry",
    "LIEntry",
    "LightningIndexerSchedule",
    "decode_kv_quant_sas_metadata",
    "decode_lightning_indexer_metadata",
    # the ops
    *_OP_NAMES,
]
