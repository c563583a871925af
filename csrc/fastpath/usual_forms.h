// The wrappers' usual argument forms, each taken in one C call.
//
// Before a wrapper calls its op it takes its arguments as the schema does: a list (or tuple) of
// tensors as a new list, checked entry by entry (specops.arguments' checked_tensor_list), the
// per-group settings of a multi-group op as lists, one value standing for every group
// (group_settings), and it returns its results as a NamedTuple. Written in Python, those few
// steps are a large share of a small batch's call (docs/changelog.md has the counts). Here each
// is one METH_FASTCALL function that takes the forms a runner passes
// (exact lists and tuples, plain ints, True and False) in C and hands every other call to the
// Python function it fronts, unchanged: every conversion (a NumPy integer, a bool tensor) and
// every error, message included, stays that function's.
//
//   usual_tensor_list(plain) -> tensor_list(value, name)
//   usual_group_settings(plain) -> group_settings(block_sizes, blocks_per_kv_block, cp_sharded,
//                                                 slot_mapping_enabled, num_groups)
//   record_maker(record_type, plain) -> make(values): record_type(*values) for a tuple of as
//       many values as the record has fields, allocated and filled as tuple.__new__ fills a
//       tuple subclass (no Python-level __new__); any other call is plain(values).
//
// Each fronted function is its plain twin (specops.arguments, specops._fastpath), which
// SPECOPS_FASTPATH=0 selects alone.
#pragma once

#include <pybind11/pybind11.h>

namespace specops {

void bind_usual_forms(pybind11::module_& module);

}  // namespace specops
