// cp_local_metadata (docs/context_parallel.md): its metadata checks (the Meta kernel, and every
// backend's first step), then the CPU op: the checks, the values, the kernel body. The second op,
// cp_local_max_lens, gives the host ints of CPLocalMetadata from host copies of the inputs, so
// the Python wrapper never reads a device tensor. The wrapper runs it before the main op (its
// inputs are then read before any output can have changed them). It checks shapes but not
// values: on a device the main op does not read values either, so both accept the same calls,
// and its arithmetic stays in bounds whatever the values are.
#include <torch/library.h>

#include <vector>

#include "cpu/checks.h"
#include "kernels/cp_local_metadata.h"

namespace specops::cpu {
namespace {

// Checks the inputs shared by both ops (their values too with check_values) and returns the
// shape of the split (output lengths unset).
kernels::CPLocalShape check_inputs(const at::Tensor& query_start_loc, const at::Tensor* seq_lens,
                                   int64_t num_input_tokens, int64_t cp_size, int64_t cp_rank, bool causal,
                                   bool check_values) {
  check_tensor(query_start_loc, "query_start_loc", {c10::kInt}, 1);
  TORCH_CHECK_VALUE(query_start_loc.numel() >= 1, "query_start_loc must have R + 1 >= 1 entries, got 0");
  const int64_t num_reqs = query_start_loc.numel() - 1;
  check_cp_rank(cp_size, cp_rank, "cp_size");
  check_token_count(num_input_tokens, "num_input_tokens", cp_size);
  if (check_values) {
    const int64_t num_tokens = check_query_start_loc_values(query_start_loc);
    TORCH_CHECK_VALUE(num_input_tokens >= num_tokens, "num_input_tokens must be >= query_start_loc[R] = ", num_tokens,
                      ", got ", num_input_tokens);
  }
  if (seq_lens != nullptr) {
    // The values are checked only where they are the op's int32 device input; the host maxima
    // also take a runner's int64 host copy.
    // The Python wrapper checks a host copy (seq_lens_cpu) first, so here a dtype neither int32
    // nor int64 is the op's own seq_lens, reported as the op's check reports it.
    if (check_values || seq_lens->scalar_type() != c10::kLong) {
      check_tensor(*seq_lens, "seq_lens", {c10::kInt}, 1);
    } else {
      check_tensor(*seq_lens, "seq_lens", {c10::kInt, c10::kLong}, 1);
    }
    TORCH_CHECK_VALUE(seq_lens->numel() == num_reqs, "seq_lens must have R = query_start_loc.numel() - 1 = ", num_reqs,
                      " entries, got ", seq_lens->numel());
    for (int64_t r = 0; check_values && r < num_reqs; ++r) {
      const int32_t* lens = seq_lens->data_ptr<int32_t>();
      TORCH_CHECK_VALUE(lens[r] >= 0, "seq_lens must be >= 0, but seq_lens[", r, "] = ", lens[r]);
    }
  }
  const kernels::CPTokenSplit split = kernels::cp_token_split(num_input_tokens, cp_size, cp_rank);
  kernels::CPLocalShape shape;
  shape.num_reqs = num_reqs;
  shape.local_start = split.local_start;
  shape.local_end = split.local_end;
  shape.causal = causal;
  return shape;
}

template <typename Int>
void check_entries_of(const at::Tensor& out, const char* name, const Int& min_entries, const Anchor& anchor) {
  check_tensor(out, name, {c10::kInt}, 1, anchor);
  TORCH_CHECK_VALUE(numel_of<Int>(out) >= min_entries, name, " must have at least ", min_entries, " entries, got ",
                    numel_of<Int>(out));
}

template <typename Int>
void check_cp_local_metadata(const at::Tensor& query_start_loc, const at::Tensor& seq_lens, int64_t num_input_tokens,
                             int64_t cp_size, int64_t cp_rank, bool causal, const at::Tensor& local_query_start_loc,
                             const at::Tensor& local_seq_lens, const at::Tensor& start_pos) {
  check_tensor(local_query_start_loc, "local_query_start_loc", {c10::kInt}, 1);
  const Anchor anchor = anchor_of(local_query_start_loc, "local_query_start_loc");
  const Int num_reqs = check_query_start_loc_meta<Int>(query_start_loc, &anchor);
  check_tensor(seq_lens, "seq_lens", {c10::kInt}, 1, anchor);
  TORCH_CHECK_VALUE(numel_of<Int>(seq_lens) == num_reqs, "seq_lens must have R = query_start_loc.numel() - 1 = ",
                    num_reqs, " entries, got ", numel_of<Int>(seq_lens));
  check_cp_rank(cp_size, cp_rank, "cp_size");
  check_token_count(num_input_tokens, "num_input_tokens", cp_size);
  check_entries_of(local_query_start_loc, "local_query_start_loc", num_reqs + 1, anchor);
  check_entries_of(local_seq_lens, "local_seq_lens", num_reqs, anchor);
  check_entries_of(start_pos, "start_pos", num_reqs, anchor);
  check_outputs_alias_nothing(
      {{&local_query_start_loc, {"local_query_start_loc"}}, {&local_seq_lens, {"local_seq_lens"}},
       {&start_pos, {"start_pos"}}},
      {{&query_start_loc, {"query_start_loc"}}, {&seq_lens, {"seq_lens"}}});
}

void cp_local_metadata(const at::Tensor& query_start_loc, const at::Tensor& seq_lens, int64_t num_input_tokens,
                       int64_t cp_size, int64_t cp_rank, bool causal, const at::Tensor& local_query_start_loc,
                       const at::Tensor& local_seq_lens, const at::Tensor& start_pos) {
  check_cp_local_metadata<int64_t>(query_start_loc, seq_lens, num_input_tokens, cp_size, cp_rank, causal,
                                   local_query_start_loc, local_seq_lens, start_pos);
  kernels::CPLocalShape shape =
      check_inputs(query_start_loc, &seq_lens, num_input_tokens, cp_size, cp_rank, causal, /*check_values=*/true);
  shape.local_query_start_loc_len = local_query_start_loc.numel();
  shape.local_seq_lens_len = local_seq_lens.numel();
  shape.start_pos_len = start_pos.numel();
  kernels::cp_local_metadata(query_start_loc.data_ptr<int32_t>(), seq_lens.data_ptr<int32_t>(),
                             local_query_start_loc.data_ptr<int32_t>(), local_seq_lens.data_ptr<int32_t>(),
                             start_pos.data_ptr<int32_t>(), shape);
}

std::vector<int64_t> cp_local_max_lens(const at::Tensor& query_start_loc, const std::optional<at::Tensor>& seq_lens,
                                       int64_t num_input_tokens, int64_t cp_size, int64_t cp_rank, bool causal) {
  const at::Tensor* lens = seq_lens.has_value() ? &*seq_lens : nullptr;
  const kernels::CPLocalShape shape =
      check_inputs(query_start_loc, lens, num_input_tokens, cp_size, cp_rank, causal, /*check_values=*/false);
  const int32_t* qsl = query_start_loc.data_ptr<int32_t>();
  const kernels::CPLocalMaxima maxima =
      lens != nullptr && lens->scalar_type() == c10::kLong
          ? kernels::cp_local_max_lens(qsl, lens->data_ptr<int64_t>(), shape)
          : kernels::cp_local_max_lens(qsl, lens != nullptr ? lens->data_ptr<int32_t>() : nullptr, shape);
  return {maxima.max_local_query_len, maxima.max_local_seq_len};
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  // docs/context_parallel.md
  m.def(
      "cp_local_metadata(Tensor query_start_loc, Tensor seq_lens, int num_input_tokens, int cp_size, int cp_rank, "
      "bool causal, Tensor(a!) local_query_start_loc, Tensor(b!) local_seq_lens, Tensor(c!) start_pos) -> ()");
  // Host-only: the host ints of CPLocalMetadata from host copies of the inputs.
  m.def(
      "cp_local_max_lens(Tensor query_start_loc, Tensor? seq_lens, int num_input_tokens, int cp_size, int cp_rank, "
      "bool causal) -> int[]");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) {
  m.impl("cp_local_metadata", &cp_local_metadata);
  m.impl("cp_local_max_lens", &cp_local_max_lens);
}
TORCH_LIBRARY_IMPL(specops, Meta, m) { m.impl("cp_local_metadata", &check_cp_local_metadata<c10::SymInt>); }

}  // namespace specops::cpu
