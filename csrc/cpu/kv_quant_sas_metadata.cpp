// kv_quant_sas_metadata: its metadata checks (the A5 kernel's, and refusals where its behaviour would
// be undefined; the Meta kernel, and every backend's first step), then the CPU op: the checks, then
// the sas schedule with the A5 variant (kernels/sas_metadata.h Variant); nothing is written before
// every check passed.
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
using namespace sas_inputs;  // NOLINT: the family's shared checks and layout codes

const SourceNames kQueryNames{"max_seqlen_q", "seqused_q", "cu_seqlens_q"};
const SourceNames kKvNames{"max_seqlen_kv", "seqused_kv", "cu_seqlens_ori_kv"};

template <typename Int>
void check_kv_quant_sas_metadata(int64_t num_heads_q, int64_t num_heads_kv, int64_t head_dim, int64_t kv_quant_mode,
                                 const std::optional<at::Tensor>& cu_seqlens_q,
                                 const std::optional<at::Tensor>& cu_seqlens_ori_kv,
                                 const std::optional<at::Tensor>& cu_seqlens_cmp_kv,
                                 const std::optional<at::Tensor>& seqused_q, const std::optional<at::Tensor>& seqused_kv,
                                 int64_t batch_size, int64_t max_seqlen_q, int64_t max_seqlen_kv, int64_t ori_topk,
                                 int64_t cmp_topk, int64_t tile_size, int64_t rope_head_dim, int64_t cmp_ratio,
                                 int64_t ori_mask_mode, int64_t cmp_mask_mode, int64_t ori_win_left, int64_t ori_win_right,
                                 int64_t layout_q, int64_t layout_kv, bool has_ori_kv, bool has_cmp_kv,
                                 int64_t num_cube_cores, int64_t num_vector_cores, bool ascend950, const at::Tensor& out) {
  check_schedule_inputs<Int>(out,
                        {{cu_seqlens_q, "cu_seqlens_q"}, {cu_seqlens_ori_kv, "cu_seqlens_ori_kv"},
                         {cu_seqlens_cmp_kv, "cu_seqlens_cmp_kv"}, {seqused_q, "seqused_q"}, {seqused_kv, "seqused_kv"}},
                        {{num_heads_q, "num_heads_q"}, {num_heads_kv, "num_heads_kv"}, {head_dim, "head_dim"},
                         {kv_quant_mode, "kv_quant_mode"}, {batch_size, "batch_size"}, {max_seqlen_q, "max_seqlen_q"},
                         {max_seqlen_kv, "max_seqlen_kv"}, {ori_topk, "ori_topk"}, {cmp_topk, "cmp_topk"},
                         {tile_size, "tile_size"}, {rope_head_dim, "rope_head_dim"}, {cmp_ratio, "cmp_ratio"},
                         {ori_mask_mode, "ori_mask_mode"}, {cmp_mask_mode, "cmp_mask_mode"}});

  // The kernel's own checks, in its order.
  TORCH_CHECK_VALUE(num_cube_cores != 0, "num_cube_cores (AIC num) should not be 0");
  TORCH_CHECK_VALUE(num_vector_cores != 0, "num_vector_cores (AIV num) should not be 0");
  check_nonnegative(batch_size, "batch_size");
  check_nonnegative(max_seqlen_q, "max_seqlen_q");
  TORCH_CHECK_VALUE(num_heads_q == 64 || num_heads_q == 128, "num_heads_q should be 64 or 128, but got ", num_heads_q);
  check_kv_heads_and_mask(num_heads_kv, ori_mask_mode);
  check_window_sign(ori_win_left, "ori_win_left");
  check_sas_layouts(layout_q, layout_kv);
  TORCH_CHECK_VALUE(layout_q != kLayoutQBsnd || layout_kv != kLayoutKvTnd,
                    "layout_kv must be PA_ND or BSND when layout_q is BSND, got TND");
  check_cu_seqlens_q(layout_q, cu_seqlens_q);
  TORCH_CHECK_VALUE(is_given(seqused_kv), "seqused_kv must be provided (the only KV length the kernel reads)");
  if (has_cmp_kv) {
    check_cmp_ratio(cmp_ratio);
    check_cmp_topk(cmp_topk);
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
  check_window_bound(ori_win_left, "ori_win_left");
  const BatchCount<Int> batches = checked_batches<Int>(layout_q, cu_seqlens_q, seqused_q, batch_size);
  TORCH_CHECK_VALUE(numel_of<Int>(*seqused_kv) >= batches.num_batches, "seqused_kv must have at least B = ",
                    batches.num_batches, " entries (the batches of ", batches.source, "), got ",
                    numel_of<Int>(*seqused_kv));
  check_lengths_alias_nothing(out, {{cu_seqlens_q, "cu_seqlens_q"}, {cu_seqlens_ori_kv, "cu_seqlens_ori_kv"},
                                    {cu_seqlens_cmp_kv, "cu_seqlens_cmp_kv"}, {seqused_q, "seqused_q"},
                                    {seqused_kv, "seqused_kv"}});

}

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
  check_kv_quant_sas_metadata<int64_t>(
      num_heads_q, num_heads_kv, head_dim, kv_quant_mode, cu_seqlens_q, cu_seqlens_ori_kv, cu_seqlens_cmp_kv, seqused_q,
      seqused_kv, batch_size, max_seqlen_q, max_seqlen_kv, ori_topk, cmp_topk, tile_size, rope_head_dim, cmp_ratio,
      ori_mask_mode, cmp_mask_mode, ori_win_left, ori_win_right, layout_q, layout_kv, has_ori_kv, has_cmp_kv,
      num_cube_cores, num_vector_cores, ascend950, out);
  const kvq::Plan plan = kvq::plan(num_heads_q, has_cmp_kv && cmp_topk > 0, ascend950, num_cube_cores,
                                   num_vector_cores);
  const QueryBatches batches = query_batches(layout_q, cu_seqlens_q, seqused_q, batch_size, max_seqlen_q);
  const sas::LengthSource kv = tensor_source(*seqused_kv, sas::LengthSource::kPerBatch);

  // ori_win_right is ignored by the kernel: the band ends at each token's own position.
  const sas::SASShape shape =
      sas::make_shape(batches.num_batches, num_heads_q, ori_mask_mode, ori_win_left, 0, has_cmp_kv, cmp_ratio,
                      cmp_topk, plan.planned_cores, plan.variant, batches.lengths, kv);
  const BatchTableStorage storage(shape, batches.source);
  sas::with_tile_coster(shape, [&](const auto& coster) {
    write_checked_schedule(shape, coster, storage.table(), kQueryNames, kKvNames, out.data_ptr<int32_t>());
  });
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  // docs/dsa_metadata_family.md: the rest of the DSA metadata family (string arguments as codes,
  // as for sas_metadata; layout_query 0 BSND / 1 TND, layout_key 0 PA_BSND / 1 TND / 2 BSND).
  m.def(
      "kv_quant_sas_metadata(int num_heads_q, int num_heads_kv, int head_dim, int kv_quant_mode, Tensor? cu_seqlens_q, "
      "Tensor? cu_seqlens_ori_kv, Tensor? cu_seqlens_cmp_kv, Tensor? seqused_q, Tensor? seqused_kv, int batch_size, "
      "int max_seqlen_q, int max_seqlen_kv, int ori_topk, int cmp_topk, int tile_size, int rope_head_dim, "
      "int cmp_ratio, int ori_mask_mode, int cmp_mask_mode, int ori_win_left, int ori_win_right, int layout_q, "
      "int layout_kv, bool has_ori_kv, bool has_cmp_kv, int num_cube_cores, int num_vector_cores, bool ascend950, "
      "Tensor(a!) out) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("kv_quant_sas_metadata", &kv_quant_sas_metadata); }
TORCH_LIBRARY_IMPL(specops, Meta, m) { m.impl("kv_quant_sas_metadata", &check_kv_quant_sas_metadata<c10::SymInt>); }

}  // namespace specops::cpu
