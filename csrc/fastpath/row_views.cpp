#include "fastpath/row_views.h"

#include "fastpath/py_values.h"

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

// `sequence` as a tuple (a new reference; nullptr with a TypeError saying `message`): a tuple is
// returned as it is, anything else copied. The lookups below read the items through the
// tuple's own array while calling code that can run Python (a key's __hash__ and __eq__, a
// mapping's __getitem__, a bound's __index__): a list's array could be resized or freed under
// them, a tuple's cannot, and the tuple keeps every item alive.
PyObject* fixed_sequence(PyObject* sequence, const char* message) {
  if (PyTuple_CheckExact(sequence)) {
    Py_INCREF(sequence);
    return sequence;
  }
  PyObject* fast = PySequence_Fast(sequence, message);  // the message for a non-sequence
  if (fast == nullptr) return nullptr;
  PyObject* tuple = PySequence_Tuple(fast);
  Py_DECREF(fast);
  return tuple;
}

int64_t bound_at(PyObject* const* bounds, Py_ssize_t index) {
  const int64_t value = PyLong_AsLongLong(bounds[index]);
  if (value == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    TORCH_CHECK_TYPE(false, "bounds[", index, "] must be an int, got ", type_name(bounds[index]));
  }
  return value;
}

// row_views(tensors, bounds, /): a METH_FASTCALL function, without pybind11's argument
// conversion (a std::vector of the bounds) and overload dispatch.
PyObject* row_views(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(nargs == 2, "row_views takes 2 positional arguments (tensors, bounds), got ", nargs);
  // Tuples (a tuple argument is taken as it is, a list copied): a bound's __index__ runs Python,
  // which could resize a list whose item array the loop reads.
  py::object tensor_items =
      py::reinterpret_steal<py::object>(fixed_sequence(args[0], "tensors must be a sequence of tensors"));
  if (!tensor_items) throw py::error_already_set();
  py::object bound_items =
      py::reinterpret_steal<py::object>(fixed_sequence(args[1], "bounds must be a sequence of ints"));
  if (!bound_items) throw py::error_already_set();
  const Py_ssize_t count = PySequence_Fast_GET_SIZE(tensor_items.ptr());
  const Py_ssize_t num_bounds = PySequence_Fast_GET_SIZE(bound_items.ptr());
  TORCH_CHECK_VALUE(num_bounds == 2 * count, "bounds must hold (start, end) for each of the ", count,
                    " tensors, got ", num_bounds, " entries");
  PyObject* const* tensors = PySequence_Fast_ITEMS(tensor_items.ptr());
  PyObject* const* bounds = PySequence_Fast_ITEMS(bound_items.ptr());
  py::list views(count);
  for (Py_ssize_t i = 0; i < count; ++i) {
    // A tensor by its type (py_values.h): one that only claims to be a tensor is not unpacked.
    TORCH_CHECK_VALUE(is_tensor(tensors[i]), "tensors[", i, "] must be a tensor");
    // Start, then end (as arguments of one call their order would be the compiler's): the first
    // bad bound is the one named, as by the plain twin (specops._fastpath.plain_row_views).
    const int64_t start = bound_at(bounds, 2 * i);
    const int64_t end = bound_at(bounds, 2 * i + 1);
    PyObject* view = row_view(THPVariable_Unpack(tensors[i]), start, end, i);
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

// [mapping[key] for key in keys], KeyError and all, as a new list (nullptr with the error set).
PyObject* items_of(PyObject* mapping, PyObject* keys) {
  PyObject* key_items = fixed_sequence(keys, "keys must be a sequence");
  if (key_items == nullptr) return nullptr;
  const Py_ssize_t count = PySequence_Fast_GET_SIZE(key_items);
  PyObject* const* key = PySequence_Fast_ITEMS(key_items);
  PyObject* values = PyList_New(count);
  for (Py_ssize_t i = 0; values != nullptr && i < count; ++i) {
    PyObject* value = PyObject_GetItem(mapping, key[i]);
    if (value == nullptr) {
      Py_CLEAR(values);  // its unset items are NULL, which a list's dealloc skips
    } else {
      PyList_SET_ITEM(values, i, value);
    }
  }
  Py_DECREF(key_items);
  return values;
}

// items(mapping, keys, /): [mapping[key] for key in keys].
PyObject* items(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_Format(PyExc_TypeError, "items takes 2 positional arguments (mapping, keys), got %zd", nargs);
    return nullptr;
  }
  return items_of(args[0], args[1]);
}

// items_each(mapping, key_lists, /): [items(mapping, keys) for keys in key_lists].
PyObject* items_each(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_Format(PyExc_TypeError, "items_each takes 2 positional arguments (mapping, key_lists), got %zd", nargs);
    return nullptr;
  }
  PyObject* lists = fixed_sequence(args[1], "key_lists must be a sequence");
  if (lists == nullptr) return nullptr;
  const Py_ssize_t count = PySequence_Fast_GET_SIZE(lists);
  PyObject* const* keys = PySequence_Fast_ITEMS(lists);
  PyObject* values = PyList_New(count);
  for (Py_ssize_t i = 0; values != nullptr && i < count; ++i) {
    PyObject* value = items_of(args[0], keys[i]);
    if (value == nullptr) {
      Py_CLEAR(values);
    } else {
      PyList_SET_ITEM(values, i, value);
    }
  }
  Py_DECREF(lists);
  return values;
}

// rows_below(values, minimum, /): whether a tensor among values may have fewer than `minimum`
// rows: True for a plain dense tensor with no dimension or fewer rows, and for any other tensor
// (a subclass, a wrapper, symbolic sizes), whose rows only its own size() tells; entries that are
// not tensors are skipped. The caller then checks in Python, which raises what it always raised.
PyObject* rows_below(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_TYPE(nargs == 2, "rows_below takes 2 positional arguments (values, minimum), got ", nargs);
  const int64_t minimum = PyLong_AsLongLong(args[1]);
  if (minimum == -1 && PyErr_Occurred()) return nullptr;
  py::object value_items = py::reinterpret_steal<py::object>(fixed_sequence(args[0], "values must be a sequence"));
  if (!value_items) return nullptr;
  const Py_ssize_t count = PySequence_Fast_GET_SIZE(value_items.ptr());
  PyObject* const* values = PySequence_Fast_ITEMS(value_items.ptr());
  for (Py_ssize_t i = 0; i < count; ++i) {
    // isinstance, as the caller's own check asks: a value that only claims to be a tensor is
    // not read here (not exact: True), and the caller's check names it.
    if (!THPVariable_Check(values[i])) continue;
    if (!THPVariable_CheckExact(values[i])) Py_RETURN_TRUE;
    const at::Tensor& tensor = THPVariable_Unpack(values[i]);
    if (!plain(tensor)) Py_RETURN_TRUE;
    const c10::TensorImpl& impl = *tensor.unsafeGetTensorImpl();
    if (impl.dim() == 0 || impl.size(0) < minimum) Py_RETURN_TRUE;
  }
  Py_RETURN_FALSE;
  END_HANDLE_TH_ERRORS
}

PyMethodDef items_def = {
    "items", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(items)), METH_FASTCALL,
    "items(mapping, keys, /)\n\n[mapping[key] for key in keys], in one call"};
PyMethodDef items_each_def = {
    "items_each", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(items_each)), METH_FASTCALL,
    "items_each(mapping, key_lists, /)\n\n[items(mapping, keys) for keys in key_lists], in one call"};
PyMethodDef rows_below_def = {
    "rows_below", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(rows_below)), METH_FASTCALL,
    "rows_below(values, minimum, /)\n\nWhether a tensor among values may have fewer than minimum rows (no "
    "dimension, fewer rows, or a tensor other than a plain dense one); other values are skipped"};

void add_function(py::module_& module, PyMethodDef* definition) {
  PyObject* function = PyCFunction_NewEx(definition, nullptr, module.attr("__name__").ptr());
  if (function == nullptr) throw py::error_already_set();
  module.add_object(definition->ml_name, py::reinterpret_steal<py::object>(function));
}

}  // namespace

void bind_row_views(py::module_& module) {
  for (PyMethodDef* definition : {&row_views_def, &items_def, &items_each_def, &rows_below_def}) {
    add_function(module, definition);
  }
}

}  // namespace specops
