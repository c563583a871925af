#include "row_views.h"

#include <ATen/core/Tensor.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include <string>
#include <vector>

namespace py = pybind11;

namespace specops {

namespace {

at::Tensor row_view(const at::Tensor& base, int64_t start, int64_t end, size_t index) {
  TORCH_CHECK_VALUE(base.dim() >= 1, "tensors[", index, "] must have at least one dimension");
  TORCH_CHECK_VALUE(start >= 0 && start <= end && end <= base.size(0), "bounds of tensors[", index,
                    "] must satisfy 0 <= start <= end <= ", base.size(0), ", got [", start, ", ", end, ")");
  c10::TensorImpl* impl = base.unsafeGetTensorImpl();
  c10::intrusive_ptr<c10::TensorImpl> view =
      impl->shallow_copy_and_detach(impl->version_counter(), /*allow_tensor_metadata_change=*/true);
  std::vector<int64_t> sizes = base.sizes().vec();
  sizes[0] = end - start;
  view->set_sizes_and_strides(sizes, base.strides(), base.storage_offset() + start * base.stride(0));
  return at::Tensor(std::move(view));
}

py::list row_views(const py::sequence& tensors, const std::vector<int64_t>& bounds) {
  const size_t count = py::len(tensors);
  TORCH_CHECK_VALUE(bounds.size() == 2 * count, "bounds must hold (start, end) for each of the ", count,
                    " tensors, got ", bounds.size(), " entries");
  py::list views(count);
  for (size_t i = 0; i < count; ++i) {
    PyObject* item = tensors[i].ptr();
    TORCH_CHECK_VALUE(THPVariable_Check(item), "tensors[", i, "] must be a tensor");
    const at::Tensor& base = THPVariable_Unpack(item);
    views[i] = py::reinterpret_steal<py::object>(THPVariable_Wrap(row_view(base, bounds[2 * i], bounds[2 * i + 1], i)));
  }
  return views;
}

}  // namespace

void bind_row_views(py::module_& module) {
  module.def(
      "row_views",
      [](const py::sequence& tensors, const std::vector<int64_t>& bounds) {
        HANDLE_TH_ERRORS
        return row_views(tensors, bounds);
        END_HANDLE_TH_ERRORS_PYBIND
      },
      py::arg("tensors"), py::arg("bounds"),
      "[t[bounds[2i]:bounds[2i + 1]] for the i-th tensor t], along the first dimension, in one call: aliases "
      "that share t's storage and version counter (as detach() does)");
}

}  // namespace specops
