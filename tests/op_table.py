"""Every op, described once for the hardening tests (see docs/hardening.md).

Adding an op = one new file in op_specs/ (named after the schema, defining its OpSpec; the
vocabulary is op_specs/_spec.py, shared corruptions op_specs/_corruptions.py): OP_TABLE below
finds it by its name. test_bad_input_matrix.py, test_guard_bands.py and test_steady_state.py
derive all their cases from OP_TABLE; test_bad_input_matrix.py fails for a schema in
torch.ops.specops that has no entry here.
"""

from __future__ import annotations

import importlib
import pkgutil

import op_specs
from op_specs._spec import Arg, Bad, Call, Corruption, OpSpec, bad, bad_with, extreme_values, get_arg, set_arg, stale
from op_specs._spec import names_pattern, t32, t64, takes_none, tensor_keys
# Re-exported for the tests that name one spec.
from op_specs.compute_slot_mapping import SLOT_MAPPING
from op_specs.dspark_swa_indices import DSPARK
from op_specs.prepare_spec_decode_inputs import FUSED

__all__ = ["Arg", "Bad", "Call", "Corruption", "OpSpec", "bad", "bad_with", "extreme_values", "get_arg", "set_arg",
           "stale", "names_pattern", "t32", "t64", "takes_none", "tensor_keys", "OP_TABLE", "HOST_HELPERS", "DSPARK", "FUSED", "SLOT_MAPPING"]


def _discovered() -> tuple[OpSpec, ...]:
    """The OpSpec of every public module of op_specs/, each named after its schema (the module
    defines it; specs it imports from another module are that module's)."""
    specs = []
    for info in sorted(pkgutil.iter_modules(op_specs.__path__), key=lambda info: info.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"op_specs.{info.name}")
        found = [value for value in vars(module).values() if isinstance(value, OpSpec) and value.name == info.name]
        assert len(found) == 1, f"op_specs/{info.name}.py must define one OpSpec named {info.name!r}, found {found}"
        specs.append(found[0])
    return tuple(specs)


OP_TABLE: tuple[OpSpec, ...] = _discovered()

# Schemas that are not public ops: reached only through another op's wrapper, covered there.
HOST_HELPERS = {
    "cp_local_max_lens": "the host ints of cp_local_metadata, from its query_start_loc(_cpu)/seq_lens(_cpu)",
    "check_slot_mapping_positions": "compute_slot_mapping's value checks for every group of PersistentMappings.refresh",
    "query_start_loc_tokens": "query_start_loc[R] after query_start_loc's checks, the token count a wrapper sizes from",
    # A public op, but host-only (no device kernel, no buffers to write: it returns the layout),
    # so none of the matrix's families applies; tests/ops/test_pcp_partition.py covers its bad input.
    "pcp_partition": "every PCP rank's layout from host counts (specops.pcp_partition)",
}
