// The specops library. Each op's schema is in its own file, beside its checks, its CPU kernel and
// its Meta kernel (csrc/cpu/NAME.cpp, TORCH_LIBRARY_FRAGMENT): ops that write into caller
// buffers mark them Tensor(a!) and return (); the Python wrappers allocate outputs when the
// caller passes none. The version bumps of written tensors are registered when specops._C is
// loaded (csrc/bindings.cpp), after every file's schemas.
#include <torch/library.h>

TORCH_LIBRARY(specops, m) {}
