// Row ranges of the drafting layer's persistent buffers, made in one call.
//
// A draft step hands out its results as views of buffers allocated at the builder's maximum
// sizes: t[start:end] along the first dimension. Made from Python, each view costs about as much
// as a small op (the indexing machinery, then the dispatcher's view kernels), and a batch shape
// not seen before needs a dozen. row_views makes them all in one call, each as
// `detach()` makes an alias: the same storage, sizes and strides, the buffer's version counter
// (so an in-place write through any of them is seen by the version-based checks), and no
// autograd view record (these buffers never require grad). A plain dense buffer's alias is made
// as aten's view kernels make one (a view TensorImpl, one contiguity refresh, sizes on the
// stack); a call is a METH_FASTCALL function that reads its two sequences in place.
//
// Beside it, the step's per-group lookups, each one call where Python would loop with a frame of
// its own: items (the groups' tensors from a mapping by name), items_each (the same per DSpark
// call) and rows_below (whether a tensor may be short of rows, for a check that then runs in
// Python and raises its usual error).
//
// Each has a plain twin in specops._fastpath (plain_row_views etc.: the same results and errors
// through Python and torch's public API), which SPECOPS_FASTPATH=0 selects.
#pragma once

#include <pybind11/pybind11.h>

namespace specops {

void bind_row_views(pybind11::module_& module);

}  // namespace specops
