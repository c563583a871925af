#include "fastpath/usual_forms.h"

#include "fastpath/py_values.h"

namespace py = pybind11;

namespace specops {

namespace {

// More groups than any runner has: a larger count goes to the Python function (which makes the
// same lists, or fails to allocate them).
constexpr Py_ssize_t kMaxGroups = 1 << 16;

// The call handed on, as it came, to the Python function the helper fronts.
PyObject* plain_call(PyObject* plain, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return PyObject_Vectorcall(plain, args, static_cast<size_t>(nargs), kwnames);
}

// A new list of the items of an exact list or tuple (list(value)); nullptr with an error set.
PyObject* new_list(PyObject* sequence) {
  const Py_ssize_t size = PySequence_Fast_GET_SIZE(sequence);
  PyObject** items = PySequence_Fast_ITEMS(sequence);
  PyObject* list = PyList_New(size);
  if (list == nullptr) return nullptr;
  for (Py_ssize_t i = 0; i < size; ++i) {
    Py_INCREF(items[i]);
    PyList_SET_ITEM(list, i, items[i]);
  }
  return list;
}

// tensor_list(value, name): list(value) for an exact list or tuple of tensors (by type, as
// is_tensor asks: nothing here runs Python, so the items stay as they are while they are read).
PyObject* tensor_list(PyObject* plain, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (nargs != 2 || kwnames != nullptr || !(PyList_CheckExact(args[0]) || PyTuple_CheckExact(args[0]))) {
    return plain_call(plain, args, nargs, kwnames);
  }
  const Py_ssize_t size = PySequence_Fast_GET_SIZE(args[0]);
  PyObject** items = PySequence_Fast_ITEMS(args[0]);
  for (Py_ssize_t i = 0; i < size; ++i) {
    if (!is_tensor(items[i])) return plain_call(plain, args, nargs, kwnames);
  }
  return new_list(args[0]);
}

// One per-group setting in a usual form as its list: a list as a new list, one value (a plain
// int, or True or False where `flags`) repeated for every group. nullptr without an error set for
// any other form, with one for a failed allocation.
PyObject* setting(PyObject* value, Py_ssize_t num_groups, bool flags) {
  if (PyList_CheckExact(value)) return new_list(value);
  if (!(flags ? PyBool_Check(value) : PyLong_CheckExact(value))) return nullptr;
  PyObject* list = PyList_New(num_groups);
  if (list == nullptr) return nullptr;
  for (Py_ssize_t i = 0; i < num_groups; ++i) {
    Py_INCREF(value);
    PyList_SET_ITEM(list, i, value);
  }
  return list;
}

// group_settings(block_sizes, blocks_per_kv_block, cp_sharded, slot_mapping_enabled, num_groups):
// [block_sizes, blocks_per_kv_block, cp_sharded, slot_mapping_enabled] as lists, the first two
// ints, the last two flags.
PyObject* group_settings(PyObject* plain, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  Py_ssize_t num_groups = -1;
  if (nargs == 5 && kwnames == nullptr && PyLong_CheckExact(args[4])) {
    int overflow = 0;
    const long long count = PyLong_AsLongLongAndOverflow(args[4], &overflow);
    if (overflow == 0 && count >= 0 && count <= kMaxGroups) num_groups = static_cast<Py_ssize_t>(count);
  }
  if (num_groups < 0) return plain_call(plain, args, nargs, kwnames);
  PyObject* settings = PyList_New(4);
  if (settings == nullptr) return nullptr;
  for (Py_ssize_t i = 0; i < 4; ++i) {
    PyObject* list = setting(args[i], num_groups, /*flags=*/i >= 2);
    if (list == nullptr) {
      Py_DECREF(settings);
      return PyErr_Occurred() ? nullptr : plain_call(plain, args, nargs, kwnames);
    }
    PyList_SET_ITEM(settings, i, list);
  }
  return settings;
}

// make(values), self = (record_type, plain, number of fields).
PyObject* make_record(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  auto* type = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(self, 0));
  const Py_ssize_t fields = PyLong_AsSsize_t(PyTuple_GET_ITEM(self, 2));
  if (nargs != 1 || kwnames != nullptr || !PyTuple_CheckExact(args[0]) || PyTuple_GET_SIZE(args[0]) != fields) {
    return plain_call(PyTuple_GET_ITEM(self, 1), args, nargs, kwnames);
  }
  // As tuple.__new__ makes a tuple subclass: the type's own allocation (tracked by the garbage
  // collector), then each value in place.
  PyObject* record = type->tp_alloc(type, fields);
  if (record == nullptr) return nullptr;
  for (Py_ssize_t i = 0; i < fields; ++i) {
    PyObject* value = PyTuple_GET_ITEM(args[0], i);
    Py_INCREF(value);
    PyTuple_SET_ITEM(record, i, value);
  }
  return record;
}

template <typename Function>
PyCFunction as_function(Function function) {
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(function));
}

PyMethodDef tensor_list_def = {"tensor_list", as_function(tensor_list), METH_FASTCALL | METH_KEYWORDS,
                               "tensor_list(value, name): specops.arguments' checked_tensor_list, the usual forms "
                               "in one call"};
PyMethodDef group_settings_def = {"group_settings", as_function(group_settings), METH_FASTCALL | METH_KEYWORDS,
                                  "group_settings(block_sizes, blocks_per_kv_block, cp_sharded, "
                                  "slot_mapping_enabled, num_groups): specops.arguments' group_settings, the "
                                  "usual forms in one call"};
PyMethodDef make_record_def = {"make", as_function(make_record), METH_FASTCALL | METH_KEYWORDS,
                               "make(values): record_type(*values), a tuple of the record's fields in one call"};

// `definition` bound to `self` (the Python function it fronts, or the record's facts).
py::object bound(PyMethodDef* definition, py::handle self) {
  PyObject* function = PyCFunction_NewEx(definition, self.ptr(), nullptr);
  if (function == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(function);
}

}  // namespace

void bind_usual_forms(py::module_& module) {
  module.def("usual_tensor_list", [](py::object plain) { return bound(&tensor_list_def, plain); },
             "The checked_tensor_list given (plain) with its usual forms taken in C");
  module.def("usual_group_settings", [](py::object plain) { return bound(&group_settings_def, plain); },
             "The group_settings given (plain) with its usual forms taken in C");
  module.def(
      "record_maker",
      [](py::type record_type, py::object plain) {
        if (!PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(record_type.ptr()), &PyTuple_Type)) {
          throw py::type_error("record_maker: the record type must be a tuple subclass");
        }
        const py::tuple self = py::make_tuple(record_type, plain, py::len(record_type.attr("_fields")));
        return bound(&make_record_def, self);
      },
      "make(values) -> record_type(*values) for a tuple of every field; any other call is plain(values)");
}

}  // namespace specops
