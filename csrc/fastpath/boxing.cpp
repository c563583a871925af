#include "fastpath/boxing.h"

#include "fastpath/py_values.h"

#if PY_VERSION_HEX < 0x030B0000
#include <longintrepr.h>  // PyLongObject's digits (Python.h includes it from 3.11 on)
#endif

#include <ATen/core/List.h>
#include <torch/csrc/autograd/python_variable.h>

namespace py = pybind11;

namespace specops {

namespace {

bool is_list_of(const c10::TypePtr& type, c10::TypeKind element) {
  return type->kind() == c10::TypeKind::ListType &&
         type->castRaw<c10::ListType>()->getElementType()->kind() == element;
}

// A Python int that fits int64; anything else (bool, numpy ints, SymInt) is the generic path's.
// Most arguments are small ints (sizes, codes, flags), held in one digit: read it directly,
// without PyLong_AsLongLongAndOverflow's general loop (18 of sas_metadata's 26 arguments).
bool read_int(PyObject* value, int64_t* number) {
  if (!PyLong_CheckExact(value)) return false;
#if PY_VERSION_HEX >= 0x030C0000
  if (PyUnstable_Long_IsCompact(reinterpret_cast<PyLongObject*>(value))) {
    *number = PyUnstable_Long_CompactValue(reinterpret_cast<PyLongObject*>(value));
    return true;
  }
#else
  const Py_ssize_t digits = Py_SIZE(value);  // signed: the sign is the int's
  if (digits >= -1 && digits <= 1) {
    *number = digits * static_cast<int64_t>(reinterpret_cast<PyLongObject*>(value)->ob_digit[0]);
    return true;
  }
#endif
  int overflow = 0;
  *number = PyLong_AsLongLongAndOverflow(value, &overflow);
  return overflow == 0;
}

// One empty list of each kind, shared by every call that passes one (an op's optional lists
// left empty: prepare_spec_decode_inputs' batch mode passes two on every call). A list argument
// is only read, so sharing is safe, and a copy costs a reference count where a new list costs an
// allocation. Never destroyed: a call may run during interpreter shutdown.
template <typename T>
const c10::List<T>& empty_list() {
  static const auto* list = new c10::List<T>();
  return *list;
}

}  // namespace

std::optional<ArgKind> argument_kind(const c10::TypePtr& type) {
  const c10::TypeKind kind = type->kind();
  if (kind == c10::TypeKind::TensorType) return ArgKind::kTensor;
  if (kind == c10::TypeKind::IntType) return ArgKind::kInt;
  if (kind == c10::TypeKind::BoolType) return ArgKind::kBool;
  if (kind == c10::TypeKind::OptionalType) {
    const c10::TypeKind element = type->castRaw<c10::OptionalType>()->getElementType()->kind();
    if (element == c10::TypeKind::TensorType) return ArgKind::kOptionalTensor;
    if (element == c10::TypeKind::IntType) return ArgKind::kOptionalInt;
  }
  if (is_list_of(type, c10::TypeKind::TensorType)) return ArgKind::kTensorList;
  if (is_list_of(type, c10::TypeKind::IntType)) return ArgKind::kIntList;
  if (is_list_of(type, c10::TypeKind::BoolType)) return ArgKind::kBoolList;
  return std::nullopt;
}

bool box_argument(PyObject* value, ArgKind kind, std::vector<c10::IValue>& stack) {
  switch (kind) {
    case ArgKind::kOptionalTensor:
      if (value == Py_None) {
        stack.emplace_back();
        return true;
      }
      [[fallthrough]];
    case ArgKind::kTensor:
      // Exactly torch.Tensor (or Parameter), by its type pointer: a subclass may override
      // __torch_function__, which only the generic path honours. Nothing here runs Python, so a
      // list's item array stays as it is while it is walked.
      if (!THPVariable_CheckExact(value)) return false;
      stack.emplace_back(THPVariable_Unpack(value));
      return true;
    case ArgKind::kTensorList: {
      if (!PyList_CheckExact(value) && !PyTuple_CheckExact(value)) return false;
      const Py_ssize_t size = PySequence_Fast_GET_SIZE(value);
      if (size == 0) {
        stack.emplace_back(empty_list<at::Tensor>());
        return true;
      }
      c10::List<at::Tensor> tensors;
      tensors.reserve(size);
      for (Py_ssize_t i = 0; i < size; ++i) {
        PyObject* item = PySequence_Fast_GET_ITEM(value, i);
        if (!THPVariable_CheckExact(item)) return false;
        tensors.push_back(THPVariable_Unpack(item));
      }
      stack.emplace_back(std::move(tensors));
      return true;
    }
    case ArgKind::kOptionalInt:
      if (value == Py_None) {
        stack.emplace_back();
        return true;
      }
      [[fallthrough]];
    case ArgKind::kInt: {
      int64_t number = 0;
      if (!read_int(value, &number)) return false;
      stack.emplace_back(number);
      return true;
    }
    case ArgKind::kBool:
      if (value != Py_True && value != Py_False) return false;
      stack.emplace_back(value == Py_True);
      return true;
    case ArgKind::kIntList: {
      if (!PyList_CheckExact(value) && !PyTuple_CheckExact(value)) return false;
      const Py_ssize_t size = PySequence_Fast_GET_SIZE(value);
      if (size == 0) {
        stack.emplace_back(empty_list<int64_t>());
        return true;
      }
      // Straight into the IValue's list (a std::vector would be copied into one).
      c10::List<int64_t> numbers;
      numbers.reserve(size);
      for (Py_ssize_t i = 0; i < size; ++i) {
        int64_t number = 0;
        if (!read_int(PySequence_Fast_GET_ITEM(value, i), &number)) return false;
        numbers.push_back(number);
      }
      stack.emplace_back(std::move(numbers));
      return true;
    }
    case ArgKind::kBoolList: {
      if (!PyList_CheckExact(value) && !PyTuple_CheckExact(value)) return false;
      const Py_ssize_t size = PySequence_Fast_GET_SIZE(value);
      if (size == 0) {
        stack.emplace_back(empty_list<bool>());
        return true;
      }
      c10::List<bool> flags;
      flags.reserve(size);
      for (Py_ssize_t i = 0; i < size; ++i) {
        PyObject* item = PySequence_Fast_GET_ITEM(value, i);
        if (item != Py_True && item != Py_False) return false;
        flags.push_back(item == Py_True);
      }
      stack.emplace_back(std::move(flags));
      return true;
    }
  }
  return false;
}

// A tensor argument is a tensor by its type (is_tensor): a value that only claims to be one is a
// ValueError naming the argument, as anything else that is no tensor.
void reject_unusable(PyObject* value, ArgKind kind, const std::string& name) {
  auto reject = [&](const std::string& argument, const char* expected, PyObject* item) {
    const std::string described = item == Py_None ? "None" : type_name(item) + " " + py::repr(item).cast<std::string>();
    throw py::value_error(argument + " must be " + expected + ", got " + described);
  };
  switch (kind) {
    case ArgKind::kTensor:
      if (!is_tensor(value)) reject(name, "a tensor", value);
      break;
    case ArgKind::kOptionalTensor:
      if (value != Py_None && !is_tensor(value)) reject(name, "a tensor or None", value);
      break;
    case ArgKind::kInt:
      if (!is_int_like(value)) reject(name, "an int", value);
      break;
    case ArgKind::kOptionalInt:
      // Named as an int argument is (None is the default the wrapper documents).
      if (value != Py_None && !is_int_like(value)) reject(name, "an int", value);
      break;
    case ArgKind::kBool:
      if (!is_boolean(value)) reject(name, "a bool (True, False, a NumPy bool or a one-element bool tensor)", value);
      break;
    case ArgKind::kBoolList: {
      if (!PyList_Check(value) && !PyTuple_Check(value)) reject(name, "a list of bools", value);
      const py::tuple items = held_items(value);
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items.ptr()); ++i) {
        PyObject* item = PyTuple_GET_ITEM(items.ptr(), i);
        if (item != Py_True && item != Py_False && !is_boolean(item)) {
          reject(name + "[" + std::to_string(i) + "]",
                 "a bool (True, False, a NumPy bool or a one-element bool tensor)", item);
        }
      }
      break;
    }
    case ArgKind::kTensorList:
    case ArgKind::kIntList: {
      const bool tensors = kind == ArgKind::kTensorList;
      if (!PyList_Check(value) && !PyTuple_Check(value)) reject(name, tensors ? "a list of tensors" : "a list of ints", value);
      const py::tuple items = held_items(value);
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items.ptr()); ++i) {
        PyObject* item = PyTuple_GET_ITEM(items.ptr(), i);
        if (tensors ? !is_tensor(item) : !is_int_like(item)) {
          reject(name + "[" + std::to_string(i) + "]", tensors ? "a tensor" : "an int", item);
        }
      }
      break;
    }
  }
}

py::object returned_values(const std::vector<c10::IValue>& stack, const std::vector<ArgKind>& kinds) {
  auto convert = [](const c10::IValue& value, ArgKind kind) -> py::object {
    if (kind == ArgKind::kInt) return py::int_(value.toInt());
    if (kind == ArgKind::kTensorList) {
      py::list tensors;
      for (const at::Tensor& tensor : value.toTensorList()) {
        tensors.append(py::reinterpret_steal<py::object>(THPVariable_Wrap(tensor)));
      }
      return std::move(tensors);
    }
    py::list numbers;
    for (const int64_t number : value.toIntList()) numbers.append(number);
    return std::move(numbers);
  };
  if (kinds.empty()) return py::none();
  if (kinds.size() == 1) return convert(stack[0], kinds[0]);
  py::tuple values(kinds.size());
  for (size_t i = 0; i < kinds.size(); ++i) values[i] = convert(stack[i], kinds[i]);
  return std::move(values);
}

}  // namespace specops
