// CPU op for kv_quant_sas_metadata: the A5 kernel's checks (and refusals where its behaviour
// would be undefined), then the sas schedule with the A5 variant (kernels/sas_metadata.h
// Variant); nothing is written before every check passed.
#include <torch/library.h>

#include <optional>

#include "cpu/checks.h"
#include "cpu/sas_inputs.h"
#include "cpu/scratch.h"
#include "kernels/kv_quant_sas_metadata.h"

namespace specops::cpu {
namespace {

namespace sas = kernels::sas;
namespace kvq = kernels::kv_quant_sas;
using sas_inputs::check_int32_attribute;
using sas_inputs::check_length_tensor;
using sas_inputs::given_ptr;
using sas_inputs::is_given;
using sas_inputs::tensor_source;

// Layout codes as the wrapper resolves the strings (python/specops/sas_layout.py).
constexpr int64_t kLayoutQBsnd = 0;
constexpr int64_t kLayoutQTnd = 1;
constexpr int64_t kLayoutKvPaNd = 0;
constexpr int64_t kLayoutKvTnd = 1;
constexpr int64_t kLayoutKvBsnd = 2;

const sas_inputs::SourceNames kQueryNames{"max_seqlen_q", "seqused_q", "cu_seqlens_q"};
const sas_inputs::SourceNames kKvNames{"max_seqlen_kv", "seqused_kv", "cu_seqlens_ori_kv"};

void kv_quant_sas_metadata(int64_t num_heads_q, int64_t num_heads_kv, int64_t head_dim, int64_t kv_quant_mode,
                           const std::optional<at::Tensor>& cu_seqlens_q,
                           const std::optional<at::Tensor>& cu_seqlens_ori_kv,
                           const std::optional<at::Tensor>& cu_seqlens_cmp_kv,
                           const std::optional<at::Tensor>& seqused_q, const std::optional<at::Tensor>& seqused_kv,
                           int64_t batch_size, int64_t max_seqlen_q, int64_t max_seqlen_kv, int64_t ori_topk,
                           int64_t cmp_topk, int64_t tile_size, int64_t rope_head_dim, int64_t cmp_ratio,
                           int64_t ori_mask_mode, int64_t cmp_mask_mode, int64_t ori_win_left, int64_t ori_win_right,
                           int64_t layout_q, int64_t layout_kv, bool has_ori_kv, bool has_cmp_kv,
                           int64_t num_cube_cores, int64_t num_vector_cores, bool ascend950, const at::Tensor& out) {
  check_tensor(out, "out", {c10::kInt}, 1);
  TORCH_CHECK_VALUE(out.numel() == sas::kNumWords, "out must have exactly ", sas::kNumWords, " int32 words, got ",
                    out.numel());
  check_length_tensor(cu_seqlens_q, "cu_seqlens_q", out);
  check_length_tensor(cu_seqlens_ori_kv, "cu_seqlens_ori_kv", out);
  check_length_tensor(cu_seqlens_cmp_kv, "cu_seqlens_cmp_kv", out);
  check_length_tensor(seqused_q, "seqused_q", out);
  check_length_tensor(seqused_kv, "seqused_kv", out);
  check_int32_attribute(num_heads_q, "num_heads_q");
  check_int32_attribute(num_heads_kv, "num_heads_kv");
  check_int32_attribute(head_dim, "head_dim");
  check_int32_attribute(kv_quant_mode, "kv_quant_mode");
  check_int32_attribute(batch_size, "batch_size");
  check_int32_attribute(max_seqlen_q, "max_seqlen_q");
  check_int32_attribute(max_seqlen_kv, "max_seqlen_kv");
  check_int32_attribute(ori_topk, "ori_topk");
  check_int32_attribute(cmp_topk, "cmp_topk");
  check_int32_attribute(tile_size, "tile_size");
  check_int32_attribute(rope_head_dim, "rope_head_dim");
  check_int32_attribute(cmp_ratio, "cmp_ratio");
  check_int32_attribute(ori_mask_mode, "ori_mask_mode");
  check_int32_attribute(cmp_mask_mode, "cmp_mask_mode");

  // The kernel's own checks, in its order.
  TORCH_CHECK_VALUE(num_cube_cores != 0, "num_cube_cores (AIC num) should not be 0");
  TORCH_CHECK_VALUE(num_vector_cores != 0, "num_vector_cores (AIV num) should not be 0");
  TORCH_CHECK_VALUE(batch_size >= 0, "batch_size should not be negative, but got ", batch_size);
  TORCH_CHECK_VALUE(max_seqlen_q >= 0, "max_seqlen_q should not be negative, but got ", max_seqlen_q);
  TORCH_CHECK_VALUE(num_heads_q == 64 || num_heads_q == 128, "num_heads_q should be 64 or 128, but got ", num_heads_q);
  TORCH_CHECK_VALUE(num_heads_kv == 1, "num_heads_kv should only be 1, but got ", num_heads_kv);
  TORCH_CHECK_VALUE(
      ori_mask_mode == sas::kMaskNone || ori_mask_mode == sas::kMaskCausal || ori_mask_mode == sas::kMaskBand,
      "ori_mask_mode should be 0, 3 or 4, but got ", ori_mask_mode);
  TORCH_CHECK_VALUE(ori_win_left >= 0, "ori_win_left should be non-negative, but got ", ori_win_left);
  TORCH_CHECK_VALUE(layout_q == kLayoutQBsnd || layout_q == kLayoutQTnd, "layout_q must be TND or BSND, got code ",
                    layout_q);
  TORCH_CHECK_VALUE(layout_kv == kLayoutKvPaNd || layout_kv == kLayoutKvTnd || layout_kv == kLayoutKvBsnd,
                    "layout_kv must be TND, BSND or PA_ND, got code ", layout_kv);
  TORCH_CHECK_VALUE(layout_q != kLayoutQTnd || layout_kv != kLayoutKvBsnd,
                    "layout_kv must be PA_ND or TND when layout_q is TND, got BSND");
  TORCH_CHECK_VALUE(layout_q != kLayoutQBsnd || layout_kv != kLayoutKvTnd,
                    "layout_kv must be PA_ND or BSND when layout_q is BSND, got TND");
  TORCH_CHECK_VALUE(layout_q != kLayoutQTnd || is_given(cu_seqlens_q), "cu_seqlens_q must be provided for layout_q TND");
  TORCH_CHECK_VALUE(is_given(seqused_kv), "seqused_kv must be provided (the only KV length the kernel reads)");
  if (has_cmp_kv) {
    TORCH_CHECK_VALUE(cmp_ratio == 4 || cmp_ratio == 128, "cmp_ratio should only be 4 or 128 when has_cmp_kv, but got ",
                      cmp_ratio);
    TORCH_CHECK_VALUE(cmp_topk == 0 || cmp_topk == 512 || cmp_topk == 1024,
                      "cmp_topk should be 0, 512 or 1024 when has_cmp_kv, but got ", cmp_topk);
  }

  // Inputs on which the kernel's behaviour is undefined.
  const kvq::Plan plan = kvq::plan(num_heads_q, has_cmp_kv && cmp_topk > 0, ascend950, num_cube_cores,
                                   num_vector_cores);
  TORCH_CHECK_VALUE(num_cube_cores >= 1 && plan.fa_entries <= sas::kMaxCubeCores && plan.planned_cores >= 1,
                    "num_cube_cores (AIC num) must give 1 to ", sas::kMaxCubeCores, " FA entries",
                    plan.variant.paired ? " (128 heads: two per planned core; on Ascend950 aic / 2 planned cores)" : "",
                    ", got ", num_cube_cores);
  TORCH_CHECK_VALUE(num_vector_cores >= 1 && plan.fd_entries <= sas::kMaxVectorCores,
                    "num_vector_cores (AIV num) must give at most ", sas::kMaxVectorCores, " FD entries, got ",
                    num_vector_cores);
  TORCH_CHECK_VALUE(ori_win_left <= sas::kMaxWindow,
                    "ori_win_left must be at most 2^62 (a wider window sees every KV token; near 2^63 the kernel's int64 window sums overflow), got ",
                    ori_win_left);
  int64_t num_batches = batch_size;
  const char* batch_source = "batch_size";
  sas::LengthSource query = sas_inputs::constant_source(max_seqlen_q);
  if (is_given(seqused_q)) {
    num_batches = seqused_q->numel();
    batch_source = "seqused_q";
    query = tensor_source(*seqused_q, sas::LengthSource::kPerBatch);
  } else if (layout_q == kLayoutQTnd) {
    num_batches = cu_seqlens_q->numel() - 1;
    batch_source = "cu_seqlens_q";
    query = tensor_source(*cu_seqlens_q, sas::LengthSource::kCumulative);
  }
  TORCH_CHECK_VALUE(num_batches <= sas::kInt32Max, batch_source, " describes ", num_batches,
                    " batches, more than 2^31 - 1");
  TORCH_CHECK_VALUE(seqused_kv->numel() >= num_batches, "seqused_kv must have at least B = ", num_batches,
                    " entries (the batches of ", batch_source, "), got ", seqused_kv->numel());
  const sas::LengthSource kv = tensor_source(*seqused_kv, sas::LengthSource::kPerBatch);
  check_outputs_alias_nothing({{&out, {"out"}}}, {{given_ptr(cu_seqlens_q), {"cu_seqlens_q"}},
                                                  {given_ptr(cu_seqlens_ori_kv), {"cu_seqlens_ori_kv"}},
                                                  {given_ptr(cu_seqlens_cmp_kv), {"cu_seqlens_cmp_kv"}},
                                                  {given_ptr(seqused_q), {"seqused_q"}},
                                                  {given_ptr(seqused_kv), {"seqused_kv"}}});

  // ori_win_right is ignored by the kernel: the band ends at each token's own position.
  const sas::SASShape shape = sas::make_shape(num_batches, num_heads_q, ori_mask_mode, ori_win_left, 0, has_cmp_kv,
                                              cmp_ratio, cmp_topk, plan.planned_cores, plan.variant, query, kv);
  const sas_inputs::BatchTableStorage storage(shape, batch_source);
  sas::with_tile_coster(shape, [&](const auto& coster) {
    sas_inputs::write_checked_schedule(shape, coster, storage.table(), kQueryNames, kKvNames, out.data_ptr<int32_t>());
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("kv_quant_sas_metadata", &kv_quant_sas_metadata); }

}  // namespace specops::cpu
