// What the fast-path helpers (fast_call.cpp, row_views.cpp) ask of a Python value. Each question
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

}  // namespace specops
