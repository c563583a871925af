"""specops-bench: op-level microbenchmarks against the baselines a runner would otherwise use.

Each module here exposes `cases(device, quick) -> list[Case]`; BENCHMARKS lists them in the
order the report shows them.
"""

from specops.bench import (
    compute_slot_mapping,
    correct_num_computed_tokens,
    correct_optimistic_seq_lens,
    prepare_positions_and_seq_lens,
    prepare_spec_decode_inputs,
)

BENCHMARKS = {
    "compute_slot_mapping": compute_slot_mapping,
    "correct_num_computed_tokens": correct_num_computed_tokens,
    "correct_optimistic_seq_lens": correct_optimistic_seq_lens,
    "prepare_positions_and_seq_lens": prepare_positions_and_seq_lens,
    "prepare_spec_decode_inputs": prepare_spec_decode_inputs,
}
