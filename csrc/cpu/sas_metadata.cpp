// sas_metadata: its metadata checks (the AI-CPU kernel's, and refusals where its behaviour would be
// undefined; the Meta kernel, and every backend's first step), then the CPU op: the checks, the
// lengths' values, then the schedule; nothing is written before every check passed.
#include <torch/library.h>

#include <optional>

#include "cpu/checks.h"
#include "cpu/sas_inputs.h"
#include "cpu/scratch.h"
#include "kernels/sas_metadata.h"

namespace specops::cpu {
namespace {

namespace sas = kernels::sas;

using namespace sas_inputs;  // NOLINT: the family's shared checks and layout codes

const SourceNames kQueryNames{"max_seqlen_q", "seqused_q", "cu_seqlens_q"};
const SourceNames kKvNames{"max_seqlen_kv", "seqused_kv", "cu_seqlens_ori_kv"};

template <typename Int>
void check_sas_metadata(int64_t num_heads_q, int64_t num_heads_kv, int64_t head_dim,
                        const std::optional<at::Tensor>& cu_seqlens_q, const std::optional<at::Tensor>& cu_seqlens_ori_kv,
                        const std::optional<at::Tensor>& cu_seqlens_cmp_kv, const std::optional<at::Tensor>& seqused_q,
                        const std::optional<at::Tensor>& seqused_kv, int64_t batch_size, int64_t max_seqlen_q,
                        int64_t max_seqlen_kv, int64_t ori_topk, int64_t cmp_topk, int64_t cmp_ratio, int64_t ori_mask_mode,
                        int64_t cmp_mask_mode, int64_t ori_win_left, int64_t ori_win_right, int64_t layout_q,
                        int64_t layout_kv, bool has_ori_kv, bool has_cmp_kv, int64_t num_cube_cores,
                        int64_t num_vector_cores, bool ascend950, const at::Tensor& out) {
  check_schedule_inputs<Int>(out,
                             {{cu_seqlens_q, "cu_seqlens_q"}, {cu_seqlens_ori_kv, "cu_seqlens_ori_kv"},
                              {cu_seqlens_cmp_kv, "cu_seqlens_cmp_kv"}, {seqused_q, "seqused_q"},
                              {seqused_kv, "seqused_kv"}},
                             {{num_heads_q, "num_heads_q"}, {num_heads_kv, "num_heads_kv"}, {head_dim, "head_dim"},
                              {batch_size, "batch_size"}, {max_seqlen_q, "max_seqlen_q"},
                              {max_seqlen_kv, "max_seqlen_kv"}, {ori_topk, "ori_topk"}, {cmp_topk, "cmp_topk"},
                              {cmp_ratio, "cmp_ratio"}, {ori_mask_mode, "ori_mask_mode"},
                              {cmp_mask_mode, "cmp_mask_mode"}});

  // The kernel's own checks, in its order.
  TORCH_CHECK_VALUE(num_cube_cores >= 1 && num_cube_cores <= sas::kMaxCubeCores,
                    "num_cube_cores (AIC num) must be in [1, ", sas::kMaxCubeCores, "], got ", num_cube_cores);
  TORCH_CHECK_VALUE(num_vector_cores >= 1 && num_vector_cores <= sas::kMaxVectorCores,
                    "num_vector_cores (AIV num) must be in [1, ", sas::kMaxVectorCores, "], got ", num_vector_cores);
  check_nonnegative(batch_size, "batch_size");
  check_nonnegative(max_seqlen_q, "max_seqlen_q");
  TORCH_CHECK_VALUE(layout_kv != kLayoutKvBsnd || num_heads_q == 64 || num_heads_q == 32,
                    "num_heads_q should only be 64 or 32 when layout_kv is BSND, but got ", num_heads_q);
  check_kv_heads_and_mask(num_heads_kv, ori_mask_mode);
  check_window_sign(ori_win_left, "ori_win_left");
  check_window_bound(ori_win_left, "ori_win_left");
  check_window_sign(ori_win_right, "ori_win_right");
  check_window_bound(ori_win_right, "ori_win_right");
  check_sas_layouts(layout_q, layout_kv);
  check_cu_seqlens_q(layout_q, cu_seqlens_q);
  TORCH_CHECK_VALUE(layout_kv != kLayoutKvPaNd || is_given(seqused_kv),
                    "seqused_kv must be provided when layout_kv is PA_ND");
  if (has_cmp_kv) {
    check_cmp_topk(cmp_topk);
    check_cmp_ratio(cmp_ratio);
  }

  // Inputs on which the kernel's behaviour is undefined.
  TORCH_CHECK_VALUE(num_heads_q >= 1, "num_heads_q must be >= 1 (the kernel divides by it), got ", num_heads_q);
  check_nonnegative(max_seqlen_kv, "max_seqlen_kv");
  // B, and where each batch's lengths come from, as the kernel picks them.
  const BatchCount<Int> batches = checked_batches<Int>(layout_q, cu_seqlens_q, seqused_q, batch_size);
  if (is_given(seqused_kv)) {
    TORCH_CHECK_VALUE(numel_of<Int>(*seqused_kv) >= batches.num_batches, "seqused_kv must have at least B = ",
                      batches.num_batches, " entries (the batches of ", batches.source, "), got ",
                      numel_of<Int>(*seqused_kv));
  } else if (layout_kv == kLayoutKvTnd && is_given(cu_seqlens_ori_kv)) {
    TORCH_CHECK_VALUE(numel_of<Int>(*cu_seqlens_ori_kv) >= batches.num_batches + 1,
                      "cu_seqlens_ori_kv must have at least B + 1 = ", batches.num_batches + 1,
                      " entries (the batches of ", batches.source, "), got ", numel_of<Int>(*cu_seqlens_ori_kv));
  }
  check_lengths_alias_nothing(out, {{cu_seqlens_q, "cu_seqlens_q"}, {cu_seqlens_ori_kv, "cu_seqlens_ori_kv"},
                                    {cu_seqlens_cmp_kv, "cu_seqlens_cmp_kv"}, {seqused_q, "seqused_q"},
                                    {seqused_kv, "seqused_kv"}});
}

void sas_metadata(int64_t num_heads_q, int64_t num_heads_kv, int64_t head_dim,
                  const std::optional<at::Tensor>& cu_seqlens_q, const std::optional<at::Tensor>& cu_seqlens_ori_kv,
                  const std::optional<at::Tensor>& cu_seqlens_cmp_kv, const std::optional<at::Tensor>& seqused_q,
                  const std::optional<at::Tensor>& seqused_kv, int64_t batch_size, int64_t max_seqlen_q,
                  int64_t max_seqlen_kv, int64_t ori_topk, int64_t cmp_topk, int64_t cmp_ratio, int64_t ori_mask_mode,
                  int64_t cmp_mask_mode, int64_t ori_win_left, int64_t ori_win_right, int64_t layout_q,
                  int64_t layout_kv, bool has_ori_kv, bool has_cmp_kv, int64_t num_cube_cores,
                  int64_t num_vector_cores, bool ascend950, const at::Tensor& out) {
  check_sas_metadata<int64_t>(num_heads_q, num_heads_kv, head_dim, cu_seqlens_q, cu_seqlens_ori_kv, cu_seqlens_cmp_kv,
                              seqused_q, seqused_kv, batch_size, max_seqlen_q, max_seqlen_kv, ori_topk, cmp_topk,
                              cmp_ratio, ori_mask_mode, cmp_mask_mode, ori_win_left, ori_win_right, layout_q,
                              layout_kv, has_ori_kv, has_cmp_kv, num_cube_cores, num_vector_cores, ascend950, out);
  const QueryBatches batches = query_batches(layout_q, cu_seqlens_q, seqused_q, batch_size, max_seqlen_q);
  const int64_t num_batches = batches.num_batches;
  sas::LengthSource kv = constant_source(max_seqlen_kv);
  if (is_given(seqused_kv)) {
    kv = tensor_source(*seqused_kv, sas::LengthSource::kPerBatch);
  } else if (layout_kv == kLayoutKvTnd && is_given(cu_seqlens_ori_kv)) {
    kv = tensor_source(*cu_seqlens_ori_kv, sas::LengthSource::kCumulative);
  }

  const sas::SASShape shape =
      sas::make_sas_shape(num_batches, num_heads_q, ori_mask_mode, ori_win_left, ori_win_right, has_cmp_kv, cmp_ratio,
                          cmp_topk, num_cube_cores, ascend950, batches.lengths, kv);
  BatchTableStorage storage(shape, batches.source);
  sas::with_tile_coster(shape, [&](const auto& coster) {
    write_checked_schedule(shape, coster, storage.table(), kQueryNames, kKvNames, out.data_ptr<int32_t>());
  });
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  // docs/sas_metadata.md
  // The arguments of vllm-ascend's npu_sparse_attn_sharedkv_metadata, with the string ones as
  // the wrapper resolves them: layout_q 0 BSND / 1 TND, layout_kv 0 PA_ND / 1 TND / 2 BSND,
  // ascend950 = soc_version contains "Ascend950".
  m.def(
      "sas_metadata(int num_heads_q, int num_heads_kv, int head_dim, Tensor? cu_seqlens_q, Tensor? cu_seqlens_ori_kv, "
      "Tensor? cu_seqlens_cmp_kv, Tensor? seqused_q, Tensor? seqused_kv, int batch_size, int max_seqlen_q, "
      "int max_seqlen_kv, int ori_topk, int cmp_topk, int cmp_ratio, int ori_mask_mode, int cmp_mask_mode, "
      "int ori_win_left, int ori_win_right, int layout_q, int layout_kv, bool has_ori_kv, bool has_cmp_kv, "
      "int num_cube_cores, int num_vector_cores, bool ascend950, Tensor(a!) out) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("sas_metadata", &sas_metadata); }
TORCH_LIBRARY_IMPL(specops, Meta, m) { m.impl("sas_metadata", &check_sas_metadata<c10::SymInt>); }

}  // namespace specops::cpu
