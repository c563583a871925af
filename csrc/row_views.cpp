#include "row_views.h"

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include <typeinfo>

namespace py = pybind11;

namespace specops {

namespace {

// A dense tensor that is nothing but its storage, sizes and strides: its alias can be made the way
// aten's own view kernels make one (alias_with_sizes_and_strides). Anything else (a tensor subclass
// or wrapper, quantized or symbolic) is aliased through shallow_copy_and_detach, which
// knows how.
bool plain(const at::Tensor& base) {
  const c10::TensorImpl& impl = *base.unsafeGetTensorImpl();
  return typeid(impl) == typeid(c10::TensorImpl) && impl.layout() == c10::kStrided && impl.has_storage() &&
         !impl.key_set().has_any(c10::python_ks) && !impl.has_symbolic_sizes_strides();
}

PyObject* row_view(const at::Tensor& base, int64_t start, int64_t end, Py_ssize_t index) {
  c10::TensorImpl* impl = base.unsafeGetTensorImpl();
  TORCH_CHECK_VALUE(impl->dim() >= 1, "tensors[", index, "] must have at least one dimension");
  const int64_t rows = impl->size(0);
  TORCH_CHECK_VALUE(start >= 0 && start <= end && end <= rows, "bounds of tensors[", index,
                    "] must satisfy 0 <= start <= end <= ", rows, ", got [", start, ", ", end, ")");
  // The sizes on the stack (no tensor here has more than 5 dimensions to be worth a heap block).
  c10::SmallVector<int64_t, 5> sizes(impl->sizes().begin(), impl->sizes().end());
  sizes[0] = end - start;
  const int64_t offset = impl->storage_offset() + start * impl->stride(0);
  c10::intrusive_ptr<c10::TensorImpl> view;
  if (plain(base)) {
    // One contiguity refresh (set_sizes_and_strides'), where a detached copy refreshes twice.
    view = c10::make_intrusive<c10::TensorImpl>(c10::TensorImpl::VIEW, c10::Storage(impl->storage()),
                                                 impl->key_set(), impl->dtype());
    view->set_sizes_and_strides(sizes, impl->strides(), offset);
    view->set_version_counter(impl->version_counter());
  } else {
    view = impl->shallow_copy_and_detach(impl->version_counter(), /*allow_tensor_metadata_change=*/true);
    view->set_sizes_and_strides(sizes, impl->strides(), offset);
  }
  return THPVariable_Wrap(at::Tensor(std::move(view)));
}

int64_t bound_at(PyObject* const* bounds, Py_ssize_t index) {
  const int64_t value = PyLong_AsLongLong(bounds[index]);
  if (value == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    TORCH_CHECK_TYPE(false, "bounds[", index, "] must be an int, got ", Py_TYPE(bounds[index])->tp_name);
  }
  return value;
}

// row_views(tensors, bounds, /): a METH_FASTCALL function, without pybind11's argument
// conversion (a std::vector of the bounds) and overload dispatch.
PyObject* row_views(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(nargs == 2, "row_views takes 2 positional arguments (tensors, bounds), got ", nargs);
  py::object tensor_items = py::reinterpret_steal<py::object>(
      PySequence_Fast(args[0], "tensors must be a sequence of tensors"));
  if (!tensor_items) throw py::error_already_set();
  py::object bound_items = py::reinterpret_steal<py::object>(
      PySequence_Fast(args[1], "bounds must be a sequence of ints"));
  if (!bound_items) throw py::error_already_set();
  const Py_ssize_t count = PySequence_Fast_GET_SIZE(tensor_items.ptr());
  const Py_ssize_t num_bounds = PySequence_Fast_GET_SIZE(bound_items.ptr());
  TORCH_CHECK_VALUE(num_bounds == 2 * count, "bounds must hold (start, end) for each of the ", count,
                    " tensors, got ", num_bounds, " entries");
  PyObject* const* tensors = PySequence_Fast_ITEMS(tensor_items.ptr());
  PyObject* const* bounds = PySequence_Fast_ITEMS(bound_items.ptr());
  py::list views(count);
  for (Py_ssize_t i = 0; i < count; ++i) {
    TORCH_CHECK_VALUE(THPVariable_Check(tensors[i]), "tensors[", i, "] must be a tensor");
    PyObject* view = row_view(THPVariable_Unpack(tensors[i]), bound_at(bounds, 2 * i), bound_at(bounds, 2 * i + 1), i);
    if (view == nullptr) throw py::error_already_set();
    PyList_SET_ITEM(views.ptr(), i, view);  // steals the reference
  }
  return views.release().ptr();
  END_HANDLE_TH_ERRORS
}

PyMethodDef row_views_def = {
    "row_views", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(row_views)), METH_FASTCALL,
    "row_views(tensors, bounds, /)\n\n[t[bounds[2i]:bounds[2i + 1]] for the i-th tensor t], along the first "
    "dimension, in one call: aliases that share t's storage and version counter (as detach() does)"};

}  // namespace

void bind_row_views(py::module_& module) {
  PyObject* function = PyCFunction_NewEx(&row_views_def, nullptr, module.attr("__name__").ptr());
  if (function == nullptr) throw py::error_already_set();
  module.add_object("row_views", py::reinterpret_steal<py::object>(function));
}

}  // namespace specops
