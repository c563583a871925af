// What the fast-path helpers (boxing.cpp, row_views.cpp) ask of a Python value. Each question
// is asked the same way by the plain twins (python/specops/_fastpath.py), so that a helper and
// its twin take, refuse and word the same values.
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/python_symnode.h>

#include <cstring>
#include <string>

namespace specops {

// Whether the helpers may read `value` as a tensor: its type is torch.Tensor or a subclass of it
// (torch.nn.Parameter, a real subclass), by the type object's own bases, as torch's parser
// unpacks one; twin: issubclass(type(value), torch.Tensor). Not isinstance (THPVariable_Check),
// which honours __class__: a value whose __class__ says torch.Tensor (a
// unittest.mock.MagicMock(spec=torch.Tensor)) passes it and is no tensor to unpack, and asking
// runs Python.
inline bool is_tensor(PyObject* value) {
  return THPVariableClass != nullptr &&
         PyObject_TypeCheck(value, reinterpret_cast<PyTypeObject*>(THPVariableClass)) != 0;
}

// Whether `value` is a NumPy integer scalar (numpy.int64, numpy.uint8, ...): numpy.integer among
// its type's bases, by name, without importing NumPy; twin: the same walk of type(value).__mro__.
inline bool is_numpy_integer(PyObject* value) {
  PyObject* bases = Py_TYPE(value)->tp_mro;
  if (bases == nullptr) return false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(bases); ++i) {
    if (std::strcmp(reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(bases, i))->tp_name, "numpy.integer") == 0) {
      return true;
    }
  }
  return false;
}

// Whether `value` is a torch.SymInt (a symbolic size a dispatch mode may pass), by its type.
inline bool is_symint(PyObject* value) {
  return PyObject_TypeCheck(value, reinterpret_cast<PyTypeObject*>(torch::get_symint_class().ptr())) != 0;
}

// The name the helpers' messages give `value`'s type: type(value).__name__, as the twins and the
// Python backends' messages give it. Not tp_name: that carries the module for a C type
// (array.array, functools.partial, re.Pattern, collections.deque) and not for a class written
// in Python, which the twins could not tell apart.
inline std::string type_name(PyObject* value) {
  pybind11::handle type(reinterpret_cast<PyObject*>(Py_TYPE(value)));
  return pybind11::str(type.attr("__name__")).cast<std::string>();
}

// NumPy's bool scalar, by its type's name (as pybind11 finds it): numpy.bool (NumPy 2) or
// numpy.bool_ (NumPy 1), without importing NumPy.
inline bool is_numpy_bool(PyObject* value) {
  const std::string name = Py_TYPE(value)->tp_name;
  return name == "numpy.bool" || name == "numpy.bool_";
}

// What an int argument takes besides a Python int (docs/hardening.md, "Scalar types"), which the
// generic path converts: an int subclass (an IntEnum), a NumPy integer, a one-element integer
// tensor, a SymInt; the Python backends' checked_int takes the same (but SymInts, which only a
// dispatch mode passes). Not the bools torch would read as 1 or 0 (True, a NumPy bool, a bool
// tensor): the mirror of is_boolean below. Nor anything else with __index__, which torch would
// take and the Python backends refuse: a float or complex tensor (truncated), a NumPy array, an
// object of a class of its own, a value that only claims to be a tensor
// (a MagicMock(spec=torch.Tensor)).
inline bool is_int_like(PyObject* value) {
  if (PyBool_Check(value)) return false;
  if (PyLong_Check(value) || is_numpy_integer(value) || is_symint(value)) return true;
  if (!is_tensor(value)) return false;
  const at::Tensor& tensor = THPVariable_Unpack(value);
  const c10::ScalarType dtype = tensor.scalar_type();
  return tensor.numel() == 1 && !c10::isFloatingType(dtype) && !c10::isComplexType(dtype) && dtype != c10::kBool;
}

// What a bool argument takes besides True and False (docs/hardening.md, "Scalar types"): the
// values torch's schema reads as the bool they hold, a NumPy bool and a one-element bool tensor;
// the generic path converts them. Torch would also read ints, floats and None by their truth
// value; the wrappers reject those on every backend.
inline bool is_boolean(PyObject* value) {
  if (is_numpy_bool(value)) return true;
  if (!is_tensor(value)) return false;
  const at::Tensor& tensor = THPVariable_Unpack(value);
  return tensor.scalar_type() == c10::kBool && tensor.numel() == 1;
}

// The items of a list or tuple argument as a tuple that holds them: FastOp's checks of them may run
// Python (its type's __name__, its repr, a tensor subclass's Python), which could resize or free
// a list's item array under a walk of it; a tuple's items stay.
inline pybind11::tuple held_items(PyObject* sequence) {
  auto items = pybind11::reinterpret_steal<pybind11::tuple>(PySequence_Tuple(sequence));
  if (!items) throw pybind11::error_already_set();
  return items;
}

}  // namespace specops
