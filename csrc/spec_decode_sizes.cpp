#include "spec_decode_sizes.h"

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/frontend/tracer.h>

#include <exception>
#include <optional>

namespace specops {

namespace {

// The arguments, in the order the wrapper passes them.
enum Argument : Py_ssize_t {
  kBlockTables,
  kSlotMappings,
  kPositions,
  kSeqLens,
  kNumTokensPadded,  // read from positions when None
  kNumReqsPadded,    // read from seq_lens when None
  kCpWorldSize,
  kCpRank,
  kCpInterleave,
  kBlockSizes,
  kBlocksPerKvBlock,
  kCpSharded,
  kSlotMappingEnabled,
  kNumArguments,
};
constexpr Py_ssize_t kNumScalars = 5;
constexpr Py_ssize_t kPerGroup = 4;

// torch.Tensor itself, as the wrapper's `type(x) is torch.Tensor` (THPVariable_CheckExact also
// takes nn.Parameter, which the wrapper's checks see as another type).
bool exact_tensor(PyObject* value) { return Py_TYPE(value) == reinterpret_cast<PyTypeObject*>(THPVariableClass); }

bool tensor_list(PyObject* value) {
  if (!PyList_CheckExact(value)) return false;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(value); ++i) {
    if (!exact_tensor(PyList_GET_ITEM(value, i))) return false;
  }
  return true;
}

// An int (not a bool, not an int subclass or a NumPy integer) that fits int64.
bool exact_int64(PyObject* value) {
  if (!PyLong_CheckExact(value)) return false;
  int overflow = 0;
  PyLong_AsLongLongAndOverflow(value, &overflow);  // sets no error for an int
  return overflow == 0;
}

// tensor.numel() as Python's Tensor.numel() returns it, when that is a plain int read without
// Python: false under a torch-function mode (which sees the call) or the JIT tracer (which
// records it as a traced value), for symbolic sizes, and where numel() raises (Python then
// raises it as before).
bool read_numel(PyObject* tensor, int64_t* numel) {
  if (at::impl::torch_function_mode_enabled() || torch::jit::tracer::isTracing()) return false;
  try {
    const std::optional<int64_t> value = THPVariable_Unpack(tensor).sym_numel().maybe_as_int();
    if (!value) return false;
    *numel = *value;
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// One entry per group: the items of a list of len(block_tables) entries, or one value for all
// (itself in the usual form even with no group: the wrapper's Python judges a tuple's length).
class PerGroup {
 public:
  PyObject* operator[](Py_ssize_t group) const { return items_ != nullptr ? items_[group] : one_; }

  // One exact int for every group, or a list of them, one per group.
  bool read_ints(PyObject* value, Py_ssize_t num_groups) { return read(value, num_groups, exact_int64); }

  // True or False for every group, or a list of them, one per group.
  bool read_bools(PyObject* value, Py_ssize_t num_groups) { return read(value, num_groups, true_or_false); }

 private:
  static bool true_or_false(PyObject* value) { return value == Py_True || value == Py_False; }

  bool read(PyObject* value, Py_ssize_t num_groups, bool (*usual)(PyObject*)) {
    if (!PyList_CheckExact(value)) {
      one_ = value;
      return usual(value);
    }
    if (PyList_GET_SIZE(value) != num_groups) return false;
    items_ = reinterpret_cast<PyListObject*>(value)->ob_item;
    for (Py_ssize_t g = 0; g < num_groups; ++g) {
      if (!usual(items_[g])) return false;
    }
    return true;
  }

  PyObject* const* items_ = nullptr;
  PyObject* one_ = nullptr;
};

// The packed sizes, or None where an argument is not in its usual form (see the header).
PyObject* spec_decode_sizes(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != kNumArguments) {
    PyErr_Format(PyExc_TypeError,
                 "spec_decode_sizes takes %zd positional arguments (block_tables, slot_mappings, positions, "
                 "seq_lens, num_tokens_padded, num_reqs_padded, cp_world_size, cp_rank, cp_interleave, "
                 "block_sizes, blocks_per_kv_block, cp_sharded, slot_mapping_enabled), got %zd",
                 static_cast<Py_ssize_t>(kNumArguments), nargs);
    return nullptr;
  }
  // Without outputs the wrapper allocates them, sized by a host read: its own path.
  if (!tensor_list(args[kBlockTables]) || !tensor_list(args[kSlotMappings]) || !exact_tensor(args[kPositions]) ||
      !exact_tensor(args[kSeqLens])) {
    Py_RETURN_NONE;
  }
  const Py_ssize_t num_groups = PyList_GET_SIZE(args[kBlockTables]);
  // num_tokens_padded and num_reqs_padded: given, or the numel of positions and seq_lens.
  int64_t padded[2] = {0, 0};
  bool read_padded[2] = {false, false};
  for (int k = 0; k < 2; ++k) {
    PyObject* given = args[kNumTokensPadded + k];
    if (given == Py_None) {
      if (!read_numel(args[kPositions + k], &padded[k])) Py_RETURN_NONE;
      read_padded[k] = true;
    } else if (!exact_int64(given)) {
      Py_RETURN_NONE;
    }
  }
  for (Py_ssize_t i = kCpWorldSize; i <= kCpInterleave; ++i) {
    if (!exact_int64(args[i])) Py_RETURN_NONE;
  }
  // Allocated before the per-group lists are read: a list's allocation may collect garbage, and
  // a finalizer could change them. Nothing after it runs Python code.
  PyObject* sizes = PyList_New(kNumScalars + kPerGroup * num_groups);
  if (sizes == nullptr) return nullptr;
  PerGroup block_sizes, blocks_per_kv_block, cp_sharded, enabled;
  if (!block_sizes.read_ints(args[kBlockSizes], num_groups) ||
      !blocks_per_kv_block.read_ints(args[kBlocksPerKvBlock], num_groups) ||
      !cp_sharded.read_bools(args[kCpSharded], num_groups) ||
      !enabled.read_bools(args[kSlotMappingEnabled], num_groups)) {
    Py_DECREF(sizes);  // its unset items are NULL, which a list's dealloc skips
    Py_RETURN_NONE;
  }
  for (int k = 0; k < 2; ++k) {
    PyObject* value = read_padded[k] ? PyLong_FromLongLong(padded[k]) : Py_NewRef(args[kNumTokensPadded + k]);
    if (value == nullptr) {
      Py_DECREF(sizes);
      return nullptr;
    }
    PyList_SET_ITEM(sizes, k, value);
  }
  for (Py_ssize_t i = kCpWorldSize; i <= kCpInterleave; ++i) {
    PyList_SET_ITEM(sizes, i - kNumTokensPadded, Py_NewRef(args[i]));
  }
  // The bools packed as 0 and 1 (small ints: no allocation).
  PyObject* const flag[2] = {PyLong_FromLong(0), PyLong_FromLong(1)};
  for (Py_ssize_t g = 0; g < num_groups; ++g) {
    const Py_ssize_t at = kNumScalars + kPerGroup * g;
    PyList_SET_ITEM(sizes, at, Py_NewRef(block_sizes[g]));
    PyList_SET_ITEM(sizes, at + 1, Py_NewRef(blocks_per_kv_block[g]));
    PyList_SET_ITEM(sizes, at + 2, Py_NewRef(flag[cp_sharded[g] == Py_True]));
    PyList_SET_ITEM(sizes, at + 3, Py_NewRef(flag[enabled[g] == Py_True]));
  }
  Py_DECREF(flag[0]);
  Py_DECREF(flag[1]);
  return sizes;
}

PyMethodDef spec_decode_sizes_def = {
    "spec_decode_sizes", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(spec_decode_sizes)),
    METH_FASTCALL,
    "spec_decode_sizes(block_tables, slot_mappings, positions, seq_lens, num_tokens_padded, num_reqs_padded, "
    "cp_world_size, cp_rank, cp_interleave, block_sizes, blocks_per_kv_block, cp_sharded, slot_mapping_enabled, /)"
    "\n\nThe sizes list prepare_spec_decode_inputs packs from these arguments in their usual forms, or None "
    "for any other form (which the wrapper's Python then takes as always); no value is checked"};

}  // namespace

void bind_spec_decode_sizes(pybind11::module_& module) {
  PyObject* function = PyCFunction_NewEx(&spec_decode_sizes_def, nullptr, module.attr("__name__").ptr());
  if (function == nullptr) throw pybind11::error_already_set();
  module.add_object(spec_decode_sizes_def.ml_name, pybind11::reinterpret_steal<pybind11::object>(function));
}

}  // namespace specops
