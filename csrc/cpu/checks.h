#pragma once
// Argument checks shared by the ops. Every message names the argument and what was expected, and
// every check runs before an output is touched, so a rejected call writes nothing.
//
// Each op's metadata checks (dtypes, ranks, layouts, devices, sizes, aliasing: nothing that reads
// a value) are one function, check_NAME in csrc/cpu/NAME.cpp, on every path: the CPU kernel runs
// it before its value checks and its body; registered for the Meta key it is the op's fake
// kernel (FakeTensor runs it under torch.compile); and called for the Meta key directly
// (specops._fastpath.check_entry) it is what the Triton launcher and the reference run first. So
// it runs on CPU, device, meta and fake tensors alike: it never asks for a CPU tensor (every
// tensor must share its anchor's device, see Anchor), and it is a template over the integer type
// of sizes, Int: int64_t on the CPU kernel, c10::SymInt for the Meta kernel, whose fake tensors
// may have symbolic sizes (a comparison then guards, as Python's does).
#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <ostream>
#include <string>

namespace specops::cpu {

// A dtype as Python names it (int32, not Int), so the messages read as Python's own.
inline std::string dtype_name(c10::ScalarType dtype) { return std::string(c10::getDtypeNames(dtype).first); }

inline std::string dtype_list(std::initializer_list<c10::ScalarType> dtypes) {
  std::string names;
  for (c10::ScalarType dtype : dtypes) {
    if (!names.empty()) names += " or ";
    names += dtype_name(dtype);
  }
  return names;
}

// An argument's name in messages: `base`, or `base[index]` for an element of a list argument.
// Formatted only when a check fails, so naming list elements costs nothing on the hot path.
struct ArgName {
  const char* base;
  int64_t index = -1;
};

inline std::ostream& operator<<(std::ostream& out, const ArgName& name) {
  out << name.base;
  if (name.index >= 0) out << "[" << name.index << "]";
  return out;
}

// A tensor's sizes as Int: int64_t (a real tensor's) or c10::SymInt (a fake tensor's, maybe symbolic).
template <typename Int>
inline Int numel_of(const at::Tensor& t);
template <>
inline int64_t numel_of<int64_t>(const at::Tensor& t) { return t.numel(); }
template <>
inline c10::SymInt numel_of<c10::SymInt>(const at::Tensor& t) { return t.sym_numel(); }
template <typename Int>
inline Int size_of(const at::Tensor& t, int64_t d);
template <>
inline int64_t size_of<int64_t>(const at::Tensor& t, int64_t d) { return t.size(d); }
template <>
inline c10::SymInt size_of<c10::SymInt>(const at::Tensor& t, int64_t d) { return t.sym_size(d); }
template <typename Int>
inline Int stride_of(const at::Tensor& t, int64_t d);
template <>
inline int64_t stride_of<int64_t>(const at::Tensor& t, int64_t d) { return t.stride(d); }
template <>
inline c10::SymInt stride_of<c10::SymInt>(const at::Tensor& t, int64_t d) { return t.sym_stride(d); }

// Whether t's sizes may be symbolic (a fake tensor under dynamic shapes): the shared checks below
// then take the SymInt path.
inline bool symbolic(const at::Tensor& t) { return t.unsafeGetTensorImpl()->has_symbolic_sizes_strides(); }

// The device every tensor of a call must be on: that of the argument `name` (checked first).
// The message names it: "positions must be on cpu like out, got meta".
struct Anchor {
  c10::Device device;
  const char* name;
};

inline Anchor anchor_of(const at::Tensor& t, const char* name) { return {t.device(), name}; }

template <typename Int, typename Name>
inline void check_last_dim_contiguous(const at::Tensor& t, const Name& name, int64_t dim) {
  // A 1-D tensor is contiguous exactly when its last dimension is: one message for every rank.
  // An empty tensor holds no element to lay out (NumPy makes [0, n] arrays with strides [0, 0]).
  TORCH_CHECK_VALUE(dim == 0 || stride_of<Int>(t, dim - 1) == 1 || size_of<Int>(t, dim - 1) <= 1 ||
                        numel_of<Int>(t) == 0,
                    name, " must be contiguous in its last dimension, got strides ", t.sym_strides());
}

// dtype, rank, layout and, given an anchor, the device. Name: a string or an ArgName.
template <typename Name>
inline void check_tensor(const at::Tensor& t, const Name& name, std::initializer_list<c10::ScalarType> dtypes,
                         int64_t dim, const Anchor* anchor = nullptr) {
  // torch.ops.specops.* takes None for an undefined tensor (the wrappers' FastOp rejects it first).
  TORCH_CHECK_VALUE(t.defined(), name, " must be a tensor, got None");
  bool dtype_ok = false;
  for (c10::ScalarType dtype : dtypes) dtype_ok = dtype_ok || t.scalar_type() == dtype;
  TORCH_CHECK_VALUE(dtype_ok, name, " must have dtype ", dtype_list(dtypes), ", got ", dtype_name(t.scalar_type()));
  TORCH_CHECK_VALUE(t.dim() == dim, name, " must be ", dim, "-D, got shape ", t.sym_sizes());
  if (C10_UNLIKELY(symbolic(t))) {
    check_last_dim_contiguous<c10::SymInt>(t, name, dim);
  } else {
    check_last_dim_contiguous<int64_t>(t, name, dim);
  }
  if (anchor != nullptr) {
    TORCH_CHECK_VALUE(t.device() == anchor->device, name, " must be on ", anchor->device, " like ", anchor->name,
                      ", got ", t.device());
  }
}

template <typename Name>
inline void check_tensor(const at::Tensor& t, const Name& name, std::initializer_list<c10::ScalarType> dtypes,
                         int64_t dim, const Anchor& anchor) {
  check_tensor(t, name, dtypes, dim, &anchor);
}

// The rows of an output buffer must not share memory (an expanded view, an as_strided one with
// a row stride below the row's extent): a kernel writes its rows independently, in parallel on a
// device, and one row's values would show up in another.
template <typename Int, typename Name>
inline void check_rows_disjoint_as(const at::Tensor& t, const Name& name) {
  if (t.dim() < 2 || size_of<Int>(t, 0) <= 1 || numel_of<Int>(t) == 0) return;
  Int row_extent = 1;
  for (int64_t d = 1; d < t.dim(); ++d) row_extent = row_extent + (size_of<Int>(t, d) - 1) * stride_of<Int>(t, d);
  TORCH_CHECK_VALUE(stride_of<Int>(t, 0) >= row_extent, name, " must not have overlapping rows: stride(0) = ",
                    stride_of<Int>(t, 0), " is below the ", row_extent, " elements a row spans");
}

template <typename Name>
inline void check_rows_disjoint(const at::Tensor& t, const Name& name) {
  if (C10_UNLIKELY(symbolic(t))) {
    check_rows_disjoint_as<c10::SymInt>(t, name);
  } else {
    check_rows_disjoint_as<int64_t>(t, name);
  }
}

inline void check_non_negative(int64_t value, const char* name) {
  TORCH_CHECK_VALUE(value >= 0, name, " must be >= 0, got ", value);
}

template <typename Name>
inline void check_positive(int64_t value, const Name& name) {
  TORCH_CHECK_VALUE(value >= 1, name, " must be >= 1, got ", value);
}

// A size that int32 index math (and int64 products of it) must hold: in [lowest, 2^31 - 1].
template <typename Name>
inline void check_int32_range(int64_t value, const Name& name, int64_t lowest) {
  TORCH_CHECK_VALUE(value >= lowest && value <= INT32_MAX, name, " must be in [", lowest, ", 2^31 - 1], got ", value);
}

// query_start_loc's metadata: int32 [R + 1], R >= 0, on the anchor's device (none: it sets the
// device). Returns R.
template <typename Int>
inline Int check_query_start_loc_meta(const at::Tensor& query_start_loc, const Anchor* anchor = nullptr) {
  check_tensor(query_start_loc, "query_start_loc", {c10::kInt}, 1, anchor);
  TORCH_CHECK_VALUE(numel_of<Int>(query_start_loc) >= 1, "query_start_loc must have R + 1 >= 1 entries, got 0");
  return numel_of<Int>(query_start_loc) - 1;
}

// query_start_loc's values, its metadata checked: starts at 0 and never decreases. Returns its
// last entry, the number of tokens of the batch.
inline int64_t check_query_start_loc_offsets(const at::Tensor& query_start_loc) {
  const int32_t* qsl = query_start_loc.data_ptr<int32_t>();
  const int64_t num_reqs = query_start_loc.numel() - 1;
  TORCH_CHECK_VALUE(qsl[0] == 0, "query_start_loc[0] must be 0, got ", qsl[0]);
  // One pass without a branch per entry (it vectorizes); the entry to name is searched for only
  // when some entry decreases.
  int32_t decreasing = 0;
  for (int64_t r = 0; r < num_reqs; ++r) decreasing |= static_cast<int32_t>(qsl[r + 1] < qsl[r]);
  for (int64_t r = 0; decreasing != 0 && r < num_reqs; ++r) {
    TORCH_CHECK_VALUE(qsl[r + 1] >= qsl[r], "query_start_loc must be non-decreasing, but query_start_loc[", r + 1,
                      "] = ", qsl[r + 1], " < query_start_loc[", r, "] = ", qsl[r]);
  }
  return qsl[num_reqs];
}

// query_start_loc's metadata and values. Returns query_start_loc[R].
inline int64_t check_query_start_loc_values(const at::Tensor& query_start_loc) {
  check_query_start_loc_meta<int64_t>(query_start_loc);
  return check_query_start_loc_offsets(query_start_loc);
}

// As above, and query_start_loc[R] must equal num_tokens, the size of the tensor `tokens_name`.
inline void check_query_start_loc(const at::Tensor& query_start_loc, int64_t num_tokens, const char* tokens_name) {
  const int64_t last = check_query_start_loc_values(query_start_loc);
  TORCH_CHECK_VALUE(last == num_tokens, "query_start_loc[R] must equal the number of tokens ", tokens_name,
                    ".numel() = ", num_tokens, ", got ", last);
}

inline void check_cp_rank(int64_t cp_size, int64_t cp_rank, const char* size_name,
                          const char* rank_name = "cp_rank") {
  check_positive(cp_size, size_name);
  TORCH_CHECK_VALUE(cp_rank >= 0 && cp_rank < cp_size, rank_name, " must be in [0, ", size_name, " = ", cp_size,
                    "), got ", cp_rank);
}

inline void check_context_parallel(int64_t cp_world_size, int64_t cp_rank, int64_t cp_interleave) {
  check_cp_rank(cp_world_size, cp_rank, "cp_world_size");
  check_positive(cp_interleave, "cp_interleave");
}

// The padded end of an output the op allocates nothing for: `padded` (-1: the buffer's end),
// in [real, out.numel()].
template <typename Int>
inline Int padded_end(const at::Tensor& out, const char* out_name, int64_t padded, const char* padded_name,
                      const Int& real, const char* real_name) {
  const Int entries = numel_of<Int>(out);
  if (padded < 0) return entries > real ? entries : real;
  TORCH_CHECK_VALUE(padded >= real && entries >= padded, padded_name, " must be in [", real_name, " = ", real, ", ",
                    out_name, ".numel() = ", entries, "], got ", padded);
  return Int(padded);
}

// An optional idx_mapping: int32 or int64 [R] on the anchor's device, request r reading row
// idx_mapping[r] of a table (its rows are checked where the table is known).
template <typename Int>
inline void check_idx_mapping(const std::optional<at::Tensor>& idx_mapping, const Int& num_reqs,
                              const Anchor* anchor = nullptr) {
  if (!idx_mapping.has_value()) return;
  check_tensor(*idx_mapping, "idx_mapping", {c10::kInt, c10::kLong}, 1, anchor);
  TORCH_CHECK_VALUE(numel_of<Int>(*idx_mapping) == num_reqs, "idx_mapping must have R = query_start_loc.numel() - 1 = ",
                    num_reqs, " entries, got ", numel_of<Int>(*idx_mapping));
}

// A token count the CP split divides: every rank's share and its padding must fit int32 (the
// bound subtracts cp_size, checked first).
inline void check_token_count(int64_t value, const char* name, int64_t cp_size) {
  TORCH_CHECK_VALUE(value >= 0 && value <= INT32_MAX - cp_size, name, " must be in [0, 2^31 - 1 - cp_size], got ", value);
}

// At least `required` entries; `what` says where the number comes from (e.g. "R"). Python checks
// a tensor no op takes with this one (specops.arguments.check_entries, csrc/checks_binding.cpp).
// count + 1 for a count already checked >= 0, in unsigned arithmetic: a count of INT64_MAX needs
// 2^63 entries (which no tensor has, and which Python's message prints) instead of overflowing.
inline uint64_t one_more(int64_t count) { return static_cast<uint64_t>(count) + 1; }

inline void check_entries(const at::Tensor& t, const char* name, int64_t required, const char* what) {
  TORCH_CHECK_VALUE(t.numel() >= required, name, " must have at least ", what, " = ", required, " entries, got ",
                    t.numel());
}

inline void check_entries(const at::Tensor& t, const char* name, const c10::SymInt& required, const char* what) {
  TORCH_CHECK_VALUE(t.sym_numel() >= required, name, " must have at least ", what, " = ", required, " entries, got ",
                    t.sym_numel());
}

// The byte range [first, last] a tensor's elements span (torch strides are never negative).
// Two tensors whose ranges meet may share memory; the test is conservative for interleaved
// strided views (two column halves of one buffer count as overlapping). Every backend runs this
// check (the Meta kernel is the Python backends' pre-check), so every backend rejects the same
// calls; Python layers reach it as specops.arguments.check_no_overlap.
struct ByteSpan {
  uintptr_t first;
  uintptr_t last;
};

inline ByteSpan byte_span(const at::Tensor& t) {
  int64_t last_element = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last_element += (t.size(d) - 1) * t.stride(d);
  const auto first = reinterpret_cast<uintptr_t>(t.data_ptr());
  return {first, first + static_cast<uintptr_t>((last_element + 1) * t.element_size()) - 1};
}

// Whether the byte ranges of two meta (or fake) tensors, which have no addresses, meet: views of
// one storage are compared by their places in it, so a compiled graph rejects what the eager op
// rejects; tensors of two storages never meet.
inline bool storage_spans_meet(const at::Tensor& a, const at::Tensor& b) {
  if (!a.has_storage() || !b.has_storage() ||
      a.storage().unsafeGetStorageImpl() != b.storage().unsafeGetStorageImpl()) {
    return false;
  }
  const auto span = [](const at::Tensor& t) {
    c10::SymInt last = 0;
    for (int64_t d = 0; d < t.dim(); ++d) last = last + (t.sym_size(d) - 1) * t.sym_stride(d);
    const int64_t size = static_cast<int64_t>(t.element_size());
    c10::SymInt start = t.sym_storage_offset() * size;
    c10::SymInt end = start + (last + 1) * size;
    return std::make_pair(std::move(start), std::move(end));
  };
  const auto x = span(a);
  const auto y = span(b);
  return x.first < y.second && y.first < x.second;
}

// For outputs that must not share memory with another output or an input. Tensors on two
// devices share nothing (the device check names the one that is wrong).
template <typename NameA, typename NameB>
inline void check_no_overlap(const at::Tensor& a, const NameA& a_name, const at::Tensor& b, const NameB& b_name) {
  if (a.device() != b.device()) return;
  if (C10_UNLIKELY(a.device().is_meta())) {
    if (a.sym_numel() == 0 || b.sym_numel() == 0) return;
    TORCH_CHECK_VALUE(!storage_spans_meet(a, b), a_name, " must not share memory with ", b_name);
    return;
  }
  if (a.numel() == 0 || b.numel() == 0) return;  // nothing is written or read there
  const ByteSpan x = byte_span(a);
  const ByteSpan y = byte_span(b);
  TORCH_CHECK_VALUE(x.last < y.first || y.last < x.first, a_name, " must not share memory with ", b_name);
}

// A tensor argument and its name in messages; a null tensor is an absent optional argument.
struct NamedTensor {
  const at::Tensor* tensor;
  ArgName name;
};

// No output may share memory with another output or with an input the op reads after its
// first write: the body would read its own stores (and a moved loop bound can take it far
// past its buffers). Inputs the op reads in full before writing are not listed by the caller.
// Outputs and Inputs: ranges of NamedTensor (an initializer list on the hot path: no heap).
template <typename Outputs, typename Inputs>
inline void check_outputs_alias_nothing(const Outputs& outputs, const Inputs& inputs) {
  for (auto a = std::begin(outputs); a != std::end(outputs); ++a) {
    if (a->tensor == nullptr) continue;
    for (auto b = std::begin(outputs); b != a; ++b) {
      if (b->tensor != nullptr) check_no_overlap(*a->tensor, a->name, *b->tensor, b->name);
    }
    for (const NamedTensor& input : inputs) {
      if (input.tensor != nullptr) check_no_overlap(*a->tensor, a->name, *input.tensor, input.name);
    }
  }
}

inline void check_outputs_alias_nothing(std::initializer_list<NamedTensor> outputs,
                                        std::initializer_list<NamedTensor> inputs) {
  check_outputs_alias_nothing<std::initializer_list<NamedTensor>, std::initializer_list<NamedTensor>>(outputs, inputs);
}

// byte_span from the tensor's sizes and strides read once (byte_span asks for each dimension's
// size and stride apart, each a policy test and a bounds check).
inline ByteSpan byte_span_once(const at::Tensor& t) {
  const c10::IntArrayRef sizes = t.sizes();
  const c10::IntArrayRef strides = t.strides();
  int64_t last_element = 0;
  for (size_t d = 0; d < sizes.size(); ++d) last_element += (sizes[d] - 1) * strides[d];
  const auto first = reinterpret_cast<uintptr_t>(t.data_ptr());
  return {first, first + static_cast<uintptr_t>((last_element + 1) * t.element_size()) - 1};
}

// The same check as check_outputs_alias_nothing for ops with many outputs and inputs: every
// tensor's span is computed once and the pairs compared from them without a branch each (the
// pairwise check recomputes two spans a pair, ~20 pairs a call for the fused spec-decode op);
// only when some pair meets does the pairwise check run, for its message naming the first.
template <typename Outputs, typename Inputs>
inline void check_outputs_alias_nothing_once(const Outputs& outputs, const Inputs& inputs) {
  constexpr size_t kMaxSpans = 32;
  ByteSpan output_spans[kMaxSpans];
  ByteSpan input_spans[kMaxSpans];
  size_t num_outputs = 0, num_inputs = 0;
  const auto add = [](const NamedTensor& named, ByteSpan* spans, size_t& count) {
    if (named.tensor == nullptr) return true;
    // A meta or fake tensor (no address, maybe symbolic sizes): the pairwise check decides (as
    // it does where spans of tensors on two devices meet).
    if (named.tensor->device().is_meta()) return false;
    if (named.tensor->numel() == 0) return true;  // nothing written or read there
    if (count == kMaxSpans) return false;
    spans[count++] = byte_span_once(*named.tensor);
    return true;
  };
  bool meet = false;
  for (const NamedTensor& output : outputs) meet = meet || !add(output, output_spans, num_outputs);
  for (const NamedTensor& input : inputs) meet = meet || !add(input, input_spans, num_inputs);
  for (size_t a = 0; a < num_outputs && !meet; ++a) {
    const ByteSpan x = output_spans[a];
    bool any = false;
    for (size_t b = 0; b < a; ++b) any |= !(x.last < output_spans[b].first || output_spans[b].last < x.first);
    for (size_t b = 0; b < num_inputs; ++b) any |= !(x.last < input_spans[b].first || input_spans[b].last < x.first);
    meet = any;
  }
  if (meet) check_outputs_alias_nothing(outputs, inputs);  // raises where a pair meets, naming it
}

}  // namespace specops::cpu
