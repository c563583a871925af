"""specops-bench: op-level microbenchmarks against the baselines a runner would otherwise use.

Each module here exposes `cases(device, quick) -> list[Case]`; BENCHMARKS lists them in the
order the report shows them.
"""

from specops.bench import compute_slot_mapping, sas_metadata

BENCHMARKS = {
    "compute_slot_mapping": compute_slot_mapping,
    "sas_metadata": sas_metadata,
}
