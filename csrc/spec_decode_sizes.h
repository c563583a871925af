// The packed int[] of prepare_spec_decode_inputs, built in one call for the wrapper's usual
// arguments.
//
// The op takes its integers as one list (python/specops/_spec_decode_sizes.py: five scalars, then
// four per KV-cache group). Building it in Python from the keyword arguments (one int or one list
// per group, bools as 0 and 1, the padded sizes from the outputs' numel) cost about as much as
// the op's checks. spec_decode_sizes reads the arguments in their usual forms (exact lists of plain
// tensors, exact ints, True / False, per-group lists of the right length) and returns the list the
// wrapper would have packed, or None for anything else, so that the wrapper's Python handles every
// other form (its conversions, its errors) exactly as before. It checks no value: that stays the
// op's job.
#pragma once

#include <pybind11/pybind11.h>

namespace specops {

void bind_spec_decode_sizes(pybind11::module_& module);

}  // namespace specops
