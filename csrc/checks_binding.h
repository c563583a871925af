// checks.h's shared metadata checks for Python (specops._C.check_tensor and the rest, reached
// through specops.arguments): for the layers that check several ops' arguments before the first
// write (persistent/checks.py) and the Python fronts of the host ops, which check tensors no
// op's schema names (a layout's buffers, a host copy). Each is the C++ check itself, so its
// messages are the ops'.
#pragma once

#include <pybind11/pybind11.h>

namespace specops {

void bind_checks(pybind11::module_& module);

}  // namespace specops
