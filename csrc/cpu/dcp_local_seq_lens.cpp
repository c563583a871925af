// dcp_local_seq_lens: its metadata checks (the Meta kernel, and every backend's first step), then
// the CPU op: the checks, the value checks, the kernel body.
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include "cpu/checks.h"
#include "kernels/dcp_local_seq_lens.h"

namespace specops::cpu {
namespace {

template <typename SeqT>
void run(const at::Tensor& seq_lens, const at::Tensor& out, const kernels::DcpLocalSeqLensShape& shape) {
  const SeqT* lengths = seq_lens.data_ptr<SeqT>();
  for (int64_t r = 0; r < shape.num_reqs; ++r) {
    TORCH_CHECK_VALUE(lengths[r] >= 0, "seq_lens[", r, "] = ", static_cast<int64_t>(lengths[r]), " must be >= 0");
  }
  kernels::dcp_local_seq_lens<SeqT>(lengths, out.data_ptr<SeqT>(), shape);
}

template <typename Int>
void check_dcp_local_seq_lens(const at::Tensor& seq_lens, int64_t cp_world_size, int64_t cp_rank,
                              int64_t cp_interleave, const at::Tensor& out) {
  check_tensor(seq_lens, "seq_lens", {c10::kInt, c10::kLong}, 1);
  const Anchor anchor = anchor_of(seq_lens, "seq_lens");
  check_tensor(out, "out", {c10::kInt, c10::kLong}, 1, anchor);
  TORCH_CHECK_VALUE(out.scalar_type() == seq_lens.scalar_type(), "out must have the dtype of seq_lens (",
                    dtype_name(seq_lens.scalar_type()), "), got ", dtype_name(out.scalar_type()));
  check_entries(out, "out", numel_of<Int>(seq_lens), "R = seq_lens.numel()");
  check_no_overlap(out, "out", seq_lens, "seq_lens");
  check_cp_rank(cp_world_size, cp_rank, "cp_world_size");
  check_positive(cp_interleave, "cp_interleave");
  // A round of W * I tokens is the kernels' divisor: it must fit their int32 size arguments.
  TORCH_CHECK_VALUE(cp_world_size <= INT32_MAX / cp_interleave, "cp_world_size * cp_interleave must be <= 2^31 - 1, got ",
                    cp_world_size, " * ", cp_interleave);
}

void dcp_local_seq_lens(const at::Tensor& seq_lens, int64_t cp_world_size, int64_t cp_rank, int64_t cp_interleave,
                        const at::Tensor& out) {
  check_dcp_local_seq_lens<int64_t>(seq_lens, cp_world_size, cp_rank, cp_interleave, out);

  kernels::DcpLocalSeqLensShape shape;
  shape.num_reqs = seq_lens.numel();
  shape.num_out = out.numel();
  shape.world_size = cp_world_size;
  shape.rank = cp_rank;
  shape.interleave = cp_interleave;
  if (seq_lens.scalar_type() == c10::kInt) {
    run<int32_t>(seq_lens, out, shape);
  } else {
    run<int64_t>(seq_lens, out, shape);
  }
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  // The KV length each decode-context-parallel rank stores (vllm-ascend get_dcp_local_seq_lens).
  m.def(
      "dcp_local_seq_lens(Tensor seq_lens, int cp_world_size, int cp_rank, int cp_interleave, Tensor(a!) out) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("dcp_local_seq_lens", &dcp_local_seq_lens); }
TORCH_LIBRARY_IMPL(specops, Meta, m) { m.impl("dcp_local_seq_lens", &check_dcp_local_seq_lens<c10::SymInt>); }

}  // namespace specops::cpu
