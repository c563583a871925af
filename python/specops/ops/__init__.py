"""Public op wrappers (one module per op); importing this registers fakes and device kernels."""

from specops.ops.compute_slot_mapping import compute_slot_mapping
from specops.ops.correct_num_computed_tokens import correct_num_computed_tokens
from specops.ops.correct_optimistic_seq_lens import correct_optimistic_seq_lens
from specops.ops.prepare_positions_and_seq_lens import prepare_positions_and_seq_lens
from specops.ops.prepare_spec_decode_inputs import SpecDecodeInputs, prepare_spec_decode_inputs

__all__ = [
    "SpecDecodeInputs",
    "compute_slot_mapping",
    "correct_num_computed_tokens",
    "correct_optimistic_seq_lens",
    "prepare_positions_and_seq_lens",
    "prepare_spec_decode_inputs",
]
