// How FastOp (fast_call.h) moves values across: a Python argument into the IValue its schema
// kind takes, the ValueError for an argument of the wrong kind, and an op's results back into
// Python values.
//
// The kinds are the few the specops schemas use. An argument is boxed here only when the boxing
// is exactly what torch's generic parser would make of it (a plain int that fits int64, True or
// False, an exact tensor, a list or tuple of those); anything else either is refused by name
// (reject_unusable: None or a float for an int, a string, a value that only claims to be a
// tensor) or goes to torch's own path, which converts it (a NumPy integer, a SymInt, a tensor
// subclass).
#pragma once

#include <ATen/core/ivalue.h>
#include <Python.h>
#include <pybind11/pybind11.h>

#include <optional>
#include <string>
#include <vector>

namespace specops {

enum class ArgKind { kTensor, kOptionalTensor, kTensorList, kInt, kOptionalInt, kBool, kIntList, kBoolList };

// The kind of a schema argument's type, or nullopt for a type the fast path does not box.
std::optional<ArgKind> argument_kind(const c10::TypePtr& type);

// Pushes `value` as an argument of `kind` onto `stack`; false (nothing pushed) for a value the
// fast path does not box. Runs no Python: a list's items stay as they are while it is walked.
bool box_argument(PyObject* value, ArgKind kind, std::vector<c10::IValue>& stack);

// Throws a ValueError naming `name` (or its entry, name[i]) for an argument of the wrong kind;
// returns for one the generic path converts. A list whose check runs Python is walked through
// a tuple of its items.
void reject_unusable(PyObject* value, ArgKind kind, const std::string& name);

// The op's results (`kinds`: kInt, kIntList or kTensorList each) from the stack the call left:
// None, the one result, or a tuple of them.
pybind11::object returned_values(const std::vector<c10::IValue>& stack, const std::vector<ArgKind>& kinds);

}  // namespace specops
