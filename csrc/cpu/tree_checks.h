#pragma once
// Checks shared by the tree-speculation ops (build_tree_kernel_efficient, verify_tree_greedy).
#include "cpu/checks.h"

namespace specops::cpu {

// A 2-D tensor of exactly [rows, cols] with contiguous rows (the kernels index row r at r * cols,
// as SGLang's do); `rows_what` / `cols_what` say where the sizes come from.
template <typename Int>
inline void check_tree_matrix(const at::Tensor& t, const char* name, const Int& rows, const Int& cols,
                              const char* rows_what, const char* cols_what) {
  TORCH_CHECK_VALUE(size_of<Int>(t, 0) == rows && size_of<Int>(t, 1) == cols, name, " must have shape [", rows_what,
                    ", ", cols_what, "] = [", rows, ", ", cols, "], got ", t.sym_sizes());
  TORCH_CHECK_VALUE(size_of<Int>(t, 0) <= 1 || cols == 0 || stride_of<Int>(t, 0) == cols, name,
                    " must have contiguous rows (stride(0) = ", cols, "), got strides ", t.sym_strides());
}

}  // namespace specops::cpu
