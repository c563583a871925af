// A faster way into the dispatcher for the Python wrappers.
//
// Calling `torch.ops.specops.<op>.default` from Python runs torch's generic argument parser,
// which matches every Python argument against the schema through the JIT type system: for an
// eleven-argument op that is most of the cost of a small call (docs/changelog.md has the
// figures). FastOp boxes the arguments itself, knowing the schema's few argument kinds, then
// makes the same boxed dispatcher call: every registered kernel, fake tensor, dispatch mode and
// autograd fallback sees exactly what the generic path gives it, and like torch's entry it
// releases the GIL while the op runs.
// Arguments come by position or by keyword (the schema's names; the layers call ops by keyword):
// FastOp puts each keyword at its name's place and fills what is left out from the schema's
// defaults. Any argument it does not recognise exactly but torch converts (a tensor subclass, a
// SymInt, a NumPy integer), an active torch-function mode, or a call torch refuses (a keyword the
// schema lacks, an argument given twice or left out without a default) sends the call down the
// generic path, which answers as torch does. An argument of the wrong kind (None or a float for an int, None for a tensor, a
// string) is a ValueError naming the argument, as on the Python backends: torch would take None
// for an undefined tensor and fail later with "tensor does not have a device", and a float for a
// bool. A tensor is one by its type: torch.Tensor and torch.nn.Parameter are boxed (the exact
// types, THPVariable_CheckExact), a real subclass goes down the generic path, as torch's parser
// takes it; a value that only claims to be a tensor (its __class__ says so: a
// unittest.mock.MagicMock(spec=torch.Tensor)) is no tensor and no int, and is a ValueError in
// every argument, never read as a tensor (py_values.h). A list argument whose check runs Python
// is walked through a tuple of its items. The messages name a type by its __name__. How each
// argument kind is boxed or refused, and the results converted back: boxing.h.
//
// The Python object is a plain CPython type with the vectorcall protocol, not a pybind11 class:
// pybind11's call of a method taking `py::args` built an argument tuple and two heap vectors per
// call. The boxed stack is reused from call to call (a
// per-thread pool, so a call made from inside another, as a dispatch mode's Python may, gets
// its own), so a call allocates only what an IValue needs (int and tensor lists).
//
// Given a dispatch key (Meta), FastOp calls the op's kernel for that key directly, whatever the
// tensors' devices: an op's Meta kernel is its metadata checks (csrc/cpu/NAME.cpp), and this is how
// the Triton launcher and the reference run them before they touch anything (ops/_op.py).
//
// Its plain twin, specops._fastpath.PlainOp, refuses the same arguments with the same errors and
// calls the generic entry; SPECOPS_FASTPATH=0 selects it (docs/conventions.md).
#pragma once

#include "fastpath/boxing.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <Python.h>
#include <pybind11/pybind11.h>

#include <optional>
#include <string>
#include <vector>

namespace specops {

class FastOp {
 public:
  // `generic_entry` is the overload's own C++ entry (OpOverload._op, or its _op_dk for the key),
  // used for every call the fast path does not take. The op may return nothing, ints and lists
  // of ints or tensors. `dispatch_key`: call that key's kernel alone (Meta: the op's checks).
  FastOp(const std::string& qualified_name, pybind11::object generic_entry,
         std::optional<c10::DispatchKey> dispatch_key = std::nullopt);
  ~FastOp();
  FastOp(const FastOp&) = delete;
  FastOp& operator=(const FastOp&) = delete;

  // The vectorcall: a new reference, or nullptr with the Python error set.
  PyObject* call(PyObject* const* args, size_t nargs, PyObject* kwnames) const;

 private:
  PyObject* generic_call(PyObject* const* args, size_t nargs, PyObject* kwnames) const;
  // The schema position of keyword `name` (expected first at `hint`), or kinds_.size() if none.
  size_t position_of(PyObject* name, size_t hint) const;

  c10::OperatorHandle op_;
  std::optional<c10::DispatchKey> dispatch_key_;
  std::vector<ArgKind> kinds_;
  std::vector<std::string> names_;
  std::vector<PyObject*> interned_names_;  // names_ as interned Python strings (owned references)
  size_t num_required_ = 0;  // arguments before the trailing ones with a schema default
  std::vector<std::optional<c10::IValue>> defaults_;  // each argument's schema default, if it has one
  std::vector<ArgKind> return_kinds_;  // kInt, kIntList or kTensorList
  pybind11::object generic_entry_;
};

// Adds the FastOp type to the module.
void bind_fast_call(pybind11::module_& module);

}  // namespace specops
