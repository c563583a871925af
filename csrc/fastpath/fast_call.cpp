#include "fastpath/fast_call.h"

#include "fastpath/boxing.h"

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
    const std::optional<ArgKind> kind = argument_kind(argument.type());
    if (!kind.has_value()) {
      throw std::invalid_argument("FastOp: " + qualified_name + " has an argument of type " + argument.type()->str() +
                                  ", which the fast path does not box");
    }
    kinds_.push_back(*kind);
  }
  // An argument added to a schema with a default (compute_slot_mapping's num_blocks) keeps the
  // calls written before it on the fast path.
  num_required_ = schema.arguments().size();
  while (num_required_ > 0 && schema.arguments()[num_required_ - 1].default_value().has_value()) --num_required_;
  for (const c10::Argument& value : schema.returns()) {
    // Ints and lists of ints or of tensors (pcp_partition's host layout).
    const std::optional<ArgKind> kind = argument_kind(value.type());
    if (kind != ArgKind::kInt && kind != ArgKind::kIntList && kind != ArgKind::kTensorList) {
      throw std::invalid_argument("FastOp: " + qualified_name + " returns a " + value.type()->str() +
                                  ", which the fast path does not convert");
    }
    return_kinds_.push_back(*kind);
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
    if (!box_argument(values[i], kinds_[i], stack)) {
      try {
        reject_unusable(values[i], kinds_[i], names_[i]);
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
  return returned_values(stack, return_kinds_).release().ptr();
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
