// CPU op for sas_metadata: the AI-CPU kernel's checks (and refusals where its behaviour would be
// undefined), then the schedule; nothing is written before every check passed.
#include <torch/library.h>

#include <optional>

#include "cpu/checks.h"
#include "cpu/sas_inputs.h"
#include "cpu/scratch.h"
#include "kernels/sas_metadata.h"

namespace specops::cpu {
namespace {

namespace sas = kernels::sas;

// Layout codes as the wrapper resolves the strings (python/specops/sas_layout.py).
constexpr int64_t kLayoutQBsnd = 0;
constexpr int64_t kLayoutQTnd = 1;
constexpr int64_t kLayoutKvPaNd = 0;
constexpr int64_t kLayoutKvTnd = 1;
constexpr int64_t kLayoutKvBsnd = 2;

using sas_inputs::check_int32_attribute;
using sas_inputs::check_length_tensor;
using sas_inputs::constant_source;
using sas_inputs::is_given;
using sas_inputs::tensor_source;

const sas_inputs::SourceNames kQueryNames{"max_seqlen_q", "seqused_q", "cu_seqlens_q"};
const sas_inputs::SourceNames kKvNames{"max_seqlen_kv", "seqused_kv", "cu_seqlens_ori_kv"};

void sas_metadata(int64_t num_heads_q, int64_t num_heads_kv, int64_t head_dim,
                  const std::optional<at::Tensor>& cu_seqlens_q, const std::optional<at::Tensor>& cu_seqlens_ori_kv,
                  const std::optional<at::Tensor>& cu_seqlens_cmp_kv, const std::optional<at::Tensor>& seqused_q,
                  const std::optional<at::Tensor>& seqused_kv, int64_t batch_size, int64_t max_seqlen_q,
                  int64_t max_seqlen_kv, int64_t ori_topk, int64_t cmp_topk, int64_t cmp_ratio, int64_t ori_mask_mode,
                  int64_t cmp_mask_mode, int64_t ori_win_left, int64_t ori_win_right, int64_t layout_q,
                  int64_t layout_kv, bool has_ori_kv, bool has_cmp_kv, int64_t num_cube_cores,
                  int64_t num_vector_cores, bool ascend950, const at::Tensor& out) {
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
  check_int32_attribute(batch_size, "batch_size");
  check_int32_attribute(max_seqlen_q, "max_seqlen_q");
  check_int32_attribute(max_seqlen_kv, "max_seqlen_kv");
  check_int32_attribute(ori_topk, "ori_topk");
  check_int32_attribute(cmp_topk, "cmp_topk");
  check_int32_attribute(cmp_ratio, "cmp_ratio");
  check_int32_attribute(ori_mask_mode, "ori_mask_mode");
  check_int32_attribute(cmp_mask_mode, "cmp_mask_mode");

  // The kernel's own checks, in its order.
  TORCH_CHECK_VALUE(num_cube_cores >= 1 && num_cube_cores <= sas::kMaxCubeCores, "num_cube_cores (AIC num) must be in [1, ",
                    sas::kMaxCubeCores, "], got ", num_cube_cores);
  TORCH_CHECK_VALUE(num_vector_cores >= 1 && num_vector_cores <= sas::kMaxVectorCores,
                    "num_vector_cores (AIV num) must be in [1, ", sas::kMaxVectorCores, "], got ", num_vector_cores);
  TORCH_CHECK_VALUE(batch_size >= 0, "batch_size should not be negative, but got ", batch_size);
  TORCH_CHECK_VALUE(max_seqlen_q >= 0, "max_seqlen_q should not be negative, but got ", max_seqlen_q);
  TORCH_CHECK_VALUE(layout_kv != kLayoutKvBsnd || num_heads_q == 64 || num_heads_q == 32,
                    "num_heads_q should only be 64 or 32 when layout_kv is BSND, but got ", num_heads_q);
  TORCH_CHECK_VALUE(num_heads_kv == 1, "num_heads_kv should only be 1, but got ", num_heads_kv);
  TORCH_CHECK_VALUE(
      ori_mask_mode == sas::kMaskNone || ori_mask_mode == sas::kMaskCausal || ori_mask_mode == sas::kMaskBand,
      "ori_mask_mode should be 0, 3 or 4, but got ", ori_mask_mode);
  TORCH_CHECK_VALUE(ori_win_left >= 0, "ori_win_left should be non-negative, but got ", ori_win_left);
  TORCH_CHECK_VALUE(ori_win_left <= sas::kMaxWindow,
                    "ori_win_left must be at most 2^62 (a wider window sees every KV token; near 2^63 the kernel's int64 window sums overflow), got ",
                    ori_win_left);
  TORCH_CHECK_VALUE(ori_win_right >= 0, "ori_win_right should be non-negative, but got ", ori_win_right);
  TORCH_CHECK_VALUE(ori_win_right <= sas::kMaxWindow,
                    "ori_win_right must be at most 2^62 (a wider window sees every KV token; near 2^63 the kernel's int64 window sums overflow), got ",
                    ori_win_right);
  TORCH_CHECK_VALUE(layout_q == kLayoutQBsnd || layout_q == kLayoutQTnd, "layout_q must be TND or BSND, got code ",
                    layout_q);
  TORCH_CHECK_VALUE(layout_kv == kLayoutKvPaNd || layout_kv == kLayoutKvTnd || layout_kv == kLayoutKvBsnd,
                    "layout_kv must be TND, BSND or PA_ND, got code ", layout_kv);
  TORCH_CHECK_VALUE(layout_q != kLayoutQTnd || layout_kv != kLayoutKvBsnd,
                    "layout_kv must be PA_ND or TND when layout_q is TND, got BSND");
  TORCH_CHECK_VALUE(layout_q != kLayoutQTnd || is_given(cu_seqlens_q), "cu_seqlens_q must be provided for layout_q TND");
  TORCH_CHECK_VALUE(layout_kv != kLayoutKvPaNd || is_given(seqused_kv),
                    "seqused_kv must be provided when layout_kv is PA_ND");
  if (has_cmp_kv) {
    TORCH_CHECK_VALUE(cmp_topk == 0 || cmp_topk == 512 || cmp_topk == 1024,
                      "cmp_topk should be 0, 512 or 1024 when has_cmp_kv, but got ", cmp_topk);
    TORCH_CHECK_VALUE(cmp_ratio == 4 || cmp_ratio == 128, "cmp_ratio should only be 4 or 128 when has_cmp_kv, but got ",
                      cmp_ratio);
  }

  // Inputs on which the kernel's behaviour is undefined.
  TORCH_CHECK_VALUE(num_heads_q >= 1, "num_heads_q must be >= 1 (the kernel divides by it), got ", num_heads_q);
  TORCH_CHECK_VALUE(max_seqlen_kv >= 0, "max_seqlen_kv should not be negative, but got ", max_seqlen_kv);
  // B, and where each batch's lengths come from, as the kernel picks them.
  int64_t num_batches = batch_size;
  const char* batch_source = "batch_size";
  sas::LengthSource query = constant_source(max_seqlen_q);
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
  sas::LengthSource kv = constant_source(max_seqlen_kv);
  if (is_given(seqused_kv)) {
    TORCH_CHECK_VALUE(seqused_kv->numel() >= num_batches, "seqused_kv must have at least B = ", num_batches,
                      " entries (the batches of ", batch_source, "), got ", seqused_kv->numel());
    kv = tensor_source(*seqused_kv, sas::LengthSource::kPerBatch);
  } else if (layout_kv == kLayoutKvTnd && is_given(cu_seqlens_ori_kv)) {
    TORCH_CHECK_VALUE(cu_seqlens_ori_kv->numel() >= num_batches + 1, "cu_seqlens_ori_kv must have at least B + 1 = ",
                      num_batches + 1, " entries (the batches of ", batch_source, "), got ",
                      cu_seqlens_ori_kv->numel());
    kv = tensor_source(*cu_seqlens_ori_kv, sas::LengthSource::kCumulative);
  }
  // The lengths are read while the schedule is written: out shares memory with none of them.
  const auto given = [](const std::optional<at::Tensor>& t) { return is_given(t) ? &*t : nullptr; };
  check_outputs_alias_nothing({{&out, {"out"}}}, {{given(cu_seqlens_q), {"cu_seqlens_q"}},
                                                  {given(cu_seqlens_ori_kv), {"cu_seqlens_ori_kv"}},
                                                  {given(cu_seqlens_cmp_kv), {"cu_seqlens_cmp_kv"}},
                                                  {given(seqused_q), {"seqused_q"}},
                                                  {given(seqused_kv), {"seqused_kv"}}});

  const sas::SASShape shape =
      sas::make_sas_shape(num_batches, num_heads_q, ori_mask_mode, ori_win_left, ori_win_right, has_cmp_kv, cmp_ratio,
                          cmp_topk, num_cube_cores, ascend950, query, kv);
  sas_inputs::BatchTableStorage storage(shape, batch_source);
  sas::with_tile_coster(shape, [&](const auto& coster) {
    sas_inputs::write_checked_schedule(shape, coster, storage.table(), kQueryNames, kKvNames, out.data_ptr<int32_t>());
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("sas_metadata", &sas_metadata); }

}  // namespace specops::cpu
