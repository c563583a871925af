"""specops: speculative-decoding metadata kernels behind torch.ops.specops.*.

Importing specops imports torch, then loads the native extension if it matches that torch;
it never fails because the extension is missing or mismatched (see `python -m specops`).
"""

import torch  # noqa: F401  (the extension links against it: load torch first)

from specops._backend import available_backends, backend, backend_report, current_backend
from specops._constants import NULL_BLOCK_ID, PAD_SLOT_ID
from specops._extension import EXTENSION
from specops.ops import (
    SpecDecodeInputs,
    compute_slot_mapping,
    correct_num_computed_tokens,
    correct_optimistic_seq_lens,
    prepare_positions_and_seq_lens,
    prepare_spec_decode_inputs,
)

__version__ = "0.1.0"

__all__ = [
    "EXTENSION",
    "NULL_BLOCK_ID",
    "PAD_SLOT_ID",
    "SpecDecodeInputs",
    "available_backends",
    "backend",
    "backend_report",
    "compute_slot_mapping",
    "correct_num_computed_tokens",
    "correct_optimistic_seq_lens",
    "current_backend",
    "prepare_positions_and_seq_lens",
    "prepare_spec_decode_inputs",
]
