#include "fastpath/fast_call.h"

#include "fastpath/py_values.h"

#if PY_VERSION_HEX < 0x030B0000
#include <longintrepr.h>  // PyLongObject's digits (Python.h includes it from 3.11 on)
#endif

#include <ATen/PythonTorchFunctionTLS.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>

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

// The boxed stacks of this thread's calls in flight. The outermost call takes the first one, call
// after call, with the capacity its last call left (so boxing allocates nothing); a call made
// from inside another (a dispatch mode's or a fake kernel's Python calling a wrapper) takes the
// next, and past kPooled nested calls one of its own.
class PooledStack {
 public:
  PooledStack() : pool_(pool()) {
    stack_ = pool_.depth < kPooled ? &pool_.stacks[pool_.depth] : &own_;
    ++pool_.depth;
  }
  // Runs with the GIL held (after the release scope): the tensors it drops may be tied to Python
  // objects.
  ~PooledStack() {
    stack_->clear();
    --pool_.depth;
  }
  PooledStack(const PooledStack&) = delete;
  PooledStack& operator=(const PooledStack&) = delete;

  std::vector<c10::IValue>& get() { return *stack_; }

 private:
  static constexpr size_t kPooled = 4;
  struct Pool {
    std::vector<c10::IValue> stacks[kPooled];
    size_t depth = 0;
  };
  static Pool& pool() {
    static thread_local Pool pool;
    return pool;
  }

  Pool& pool_;
  std::vector<c10::IValue>* stack_;
  std::vector<c10::IValue> own_;
};

}  // namespace

FastOp::FastOp(const std::string& qualified_name, py::object generic_entry,
               std::optional<c10::DispatchKey> dispatch_key)
    : op_(c10::Dispatcher::singleton().findSchemaOrThrow(qualified_name.c_str(), "")),
      dispatch_key_(dispatch_key),
      generic_entry_(std::move(generic_entry)) {
  const c10::FunctionSchema& schema = op_.schema();
  for (const c10::Argument& argument : schema.arguments()) {
    names_.push_back(argument.name());
    defaults_.push_back(argument.default_value());
    const c10::TypePtr& type = argument.type();
    if (type->kind() == c10::TypeKind::TensorType) {
      kinds_.push_back(ArgKind::kTensor);
    } else if (type->kind() == c10::TypeKind::OptionalType &&
               type->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::TensorType) {
      kinds_.push_back(ArgKind::kOptionalTensor);
    } else if (is_list_of(type, c10::TypeKind::TensorType)) {
      kinds_.push_back(ArgKind::kTensorList);
    } else if (type->kind() == c10::TypeKind::IntType) {
      kinds_.push_back(ArgKind::kInt);
    } else if (type->kind() == c10::TypeKind::OptionalType &&
               type->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::IntType) {
      kinds_.push_back(ArgKind::kOptionalInt);
    } else if (type->kind() == c10::TypeKind::BoolType) {
      kinds_.push_back(ArgKind::kBool);
    } else if (is_list_of(type, c10::TypeKind::IntType)) {
      kinds_.push_back(ArgKind::kIntList);
    } else if (is_list_of(type, c10::TypeKind::BoolType)) {
      kinds_.push_back(ArgKind::kBoolList);
    } else {
      throw std::invalid_argument("FastOp: " + qualified_name + " has an argument of type " + type->str() +
                                  ", which the fast path does not box");
    }
  }
  // An argument added to a schema with a default (compute_slot_mapping's num_blocks) keeps the
  // calls written before it on the fast path.
  num_required_ = schema.arguments().size();
  while (num_required_ > 0 && schema.arguments()[num_required_ - 1].default_value().has_value()) --num_required_;
  for (const c10::Argument& value : schema.returns()) {
    const c10::TypePtr& type = value.type();
    if (type->kind() == c10::TypeKind::IntType) {
      return_kinds_.push_back(ArgKind::kInt);
    } else if (is_list_of(type, c10::TypeKind::IntType)) {
      return_kinds_.push_back(ArgKind::kIntList);
    } else if (is_list_of(type, c10::TypeKind::TensorType)) {
      return_kinds_.push_back(ArgKind::kTensorList);  // pcp_partition's host layout
    } else {
      throw std::invalid_argument("FastOp: " + qualified_name + " returns a " + type->str() +
                                  ", which the fast path does not convert");
    }
  }
  // Keywords written in code are interned strings: matched by address first.
  for (const std::string& name : names_) {
    PyObject* interned = PyUnicode_InternFromString(name.c_str());
    if (interned == nullptr) throw py::error_already_set();
    interned_names_.push_back(interned);
  }
}

FastOp::~FastOp() {
  for (PyObject* name : interned_names_) Py_DECREF(name);
}

size_t FastOp::position_of(PyObject* name, size_t hint) const {
  const size_t count = interned_names_.size();
  if (hint < count && interned_names_[hint] == name) return hint;  // keywords in the schema's order
  for (size_t i = 0; i < count; ++i) {
    if (interned_names_[i] == name) return i;
  }
  for (size_t i = 0; i < count; ++i) {
    const int equal = PyUnicode_Compare(interned_names_[i], name);
    if (equal == -1 && PyErr_Occurred()) {
      PyErr_Clear();  // not a string: torch's entry names the error
      return count;
    }
    if (equal == 0) return i;
  }
  return count;
}

namespace {

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

bool FastOp::push_argument(PyObject* value, ArgKind kind, std::vector<c10::IValue>& stack) const {
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
void FastOp::reject_unusable(PyObject* value, size_t position) const {
  const std::string& name = names_[position];
  auto reject = [&](const std::string& argument, const char* expected, PyObject* item) {
    const std::string described = item == Py_None ? "None" : type_name(item) + " " + py::repr(item).cast<std::string>();
    throw py::value_error(argument + " must be " + expected + ", got " + described);
  };
  switch (kinds_[position]) {
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
      const bool tensors = kinds_[position] == ArgKind::kTensorList;
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

py::object FastOp::returned(const std::vector<c10::IValue>& stack) const {
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
  if (return_kinds_.empty()) return py::none();
  if (return_kinds_.size() == 1) return convert(stack[0], return_kinds_[0]);
  py::tuple values(return_kinds_.size());
  for (size_t i = 0; i < return_kinds_.size(); ++i) values[i] = convert(stack[i], return_kinds_[i]);
  return std::move(values);
}

PyObject* FastOp::generic_call(PyObject* const* args, size_t nargs, PyObject* kwnames) const {
  return PyObject_Vectorcall(generic_entry_.ptr(), args, nargs, kwnames);
}

PyObject* FastOp::call(PyObject* const* args, size_t nargs, PyObject* kwnames) const {
  const size_t num_keywords = kwnames == nullptr ? 0 : static_cast<size_t>(PyTuple_GET_SIZE(kwnames));
  const size_t num_arguments = kinds_.size();
  if (nargs + num_keywords > num_arguments || (num_keywords == 0 && nargs < num_required_) ||
      at::impl::torch_function_mode_enabled()) {
    return generic_call(args, nargs, kwnames);
  }
  // The arguments in the schema's order: the positional ones, then each keyword at its name's
  // place; null where the schema's default stands in.
  c10::SmallVector<PyObject*, 40> ordered;
  PyObject* const* values = args;
  size_t num_values = nargs;
  if (num_keywords > 0) {
    ordered.assign(num_arguments, nullptr);
    std::copy(args, args + nargs, ordered.begin());
    for (size_t k = 0; k < num_keywords; ++k) {
      const size_t position = position_of(PyTuple_GET_ITEM(kwnames, k), nargs + k);
      // A name the schema lacks, or an argument given twice: torch's own TypeError.
      if (position == num_arguments || ordered[position] != nullptr) return generic_call(args, nargs, kwnames);
      ordered[position] = args[nargs + k];
    }
    for (size_t i = nargs; i < num_arguments; ++i) {
      if (ordered[i] == nullptr && !defaults_[i].has_value()) return generic_call(args, nargs, kwnames);
    }
    values = ordered.data();
    num_values = num_arguments;
  }
  HANDLE_TH_ERRORS
  PooledStack pooled;
  std::vector<c10::IValue>& stack = pooled.get();
  stack.reserve(num_arguments);
  for (size_t i = 0; i < num_values; ++i) {
    if (values[i] == nullptr) {
      stack.push_back(*defaults_[i]);
      continue;
    }
    if (!push_argument(values[i], kinds_[i], stack)) {
      try {
        reject_unusable(values[i], i);
      } catch (const py::builtin_exception& error) {
        error.set_error();
        return nullptr;
      }
      return generic_call(args, nargs, kwnames);
    }
  }
  for (size_t i = num_values; i < num_arguments; ++i) stack.push_back(*defaults_[i]);
  {
    // A second reference to every tensor argument, dropped only once the GIL is held again. A
    // tensor that Python also holds has its Python object tied to its C++ references: the
    // stack's copy is the second reference, and dropping a second-to-last reference releases
    // that tie, which takes the GIL. The op drops the stack's copies while the GIL is released,
    // so without these each tensor argument cost a GIL round trip (docs/changelog.md has the
    // count).
    c10::SmallVector<c10::IValue, 16> held;
    for (const c10::IValue& value : stack) {
      if (value.isTensor() || value.isTensorList()) held.push_back(value);
    }
    {
      // As torch's own entry does: other Python threads run while the op does.
      py::gil_scoped_release no_gil;
      if (dispatch_key_.has_value()) {
        op_.callBoxedForDispatchKey(*dispatch_key_, stack);
      } else {
        op_.callBoxed(stack);
      }
    }
  }
  if (return_kinds_.empty()) Py_RETURN_NONE;
  return returned(stack).release().ptr();
  END_HANDLE_TH_ERRORS
}

namespace {

// The Python object: a FastOp behind the vectorcall protocol.
struct FastOpObject {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  FastOp* op;
};

PyObject* fast_op_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  return reinterpret_cast<FastOpObject*>(self)->op->call(args, PyVectorcall_NARGS(nargsf), kwnames);
}

PyObject* fast_op_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* keywords[] = {"qualified_name", "generic_entry", "dispatch_key", nullptr};
  const char* qualified_name = nullptr;
  PyObject* generic_entry = nullptr;
  const char* dispatch_key = nullptr;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sO|z:FastOp", const_cast<char**>(keywords), &qualified_name,
                                   &generic_entry, &dispatch_key)) {
    return nullptr;
  }
  try {
    std::optional<c10::DispatchKey> key;
    if (dispatch_key != nullptr) key = c10::parseDispatchKey(dispatch_key);
    auto op = std::make_unique<FastOp>(qualified_name, py::reinterpret_borrow<py::object>(generic_entry), key);
    PyObject* self = type->tp_alloc(type, 0);
    if (self == nullptr) return nullptr;
    auto* object = reinterpret_cast<FastOpObject*>(self);
    object->vectorcall = fast_op_vectorcall;
    object->op = op.release();
    return self;
  } catch (const std::invalid_argument& error) {
    PyErr_SetString(PyExc_ValueError, error.what());
  } catch (const std::exception&) {
    torch::translate_exception_to_python(std::current_exception());
  }
  return nullptr;
}

void fast_op_dealloc(PyObject* self) {
  delete reinterpret_cast<FastOpObject*>(self)->op;
  Py_TYPE(self)->tp_free(self);
}

PyTypeObject fast_op_type = {PyVarObject_HEAD_INIT(nullptr, 0)};

}  // namespace

void bind_fast_call(py::module_& module) {
  fast_op_type.tp_name = "specops._C.FastOp";
  fast_op_type.tp_doc =
      "FastOp(qualified_name, generic_entry, dispatch_key=None): calls one specops op through the dispatcher (or "
      "the kernel of dispatch_key alone), boxing its arguments without torch's generic parser; takes the schema's "
      "arguments by position or by name";
  fast_op_type.tp_basicsize = sizeof(FastOpObject);
  fast_op_type.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
  fast_op_type.tp_new = fast_op_new;
  fast_op_type.tp_dealloc = fast_op_dealloc;
  fast_op_type.tp_call = PyVectorcall_Call;
  fast_op_type.tp_vectorcall_offset = offsetof(FastOpObject, vectorcall);
  if (PyType_Ready(&fast_op_type) < 0) throw py::error_already_set();
  Py_INCREF(&fast_op_type);
  module.add_object("FastOp", reinterpret_cast<PyObject*>(&fast_op_type));
}

}  // namespace specops
