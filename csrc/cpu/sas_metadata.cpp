// CPU op for sas_metadata: the AI-CPU kernel's checks (and refusals where its behaviour would be
// undefined), then the schedule; nothing is written before every check passed.
#include <torch/library.h>

#include <memory>
#include <new>
#include <optional>
#include <sstream>
#include <string>

#include "cpu/checks.h"
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

// Batches whose cost table the per-thread scratch keeps between calls (2 MiB).
constexpr int64_t kKeptTableRows = int64_t{1} << 16;

// The kernel's "provided": None and an empty tensor both mean not provided.
bool is_given(const std::optional<at::Tensor>& t) { return t.has_value() && t->numel() > 0; }

// An empty tensor is not provided whatever its dtype and shape (vllm-ascend's DSA builders pass
// empty float32 placeholders), so the dtype and rank are checked only when it holds values. Its
// device is checked always: a tensor on another device selects another kernel.
void check_length_tensor(const std::optional<at::Tensor>& t, const char* name, const at::Tensor& out) {
  if (!t.has_value()) return;
  TORCH_CHECK_VALUE(t->defined(), name, " must be a tensor, got None");
  TORCH_CHECK_VALUE(t->device() == out.device(), name, " must be on ", out.device(), " like out, got ", t->device());
  if (t->numel() == 0) return;
  check_tensor(*t, name, {c10::kInt, c10::kLong}, 1);
}

void check_int32_attribute(int64_t value, const char* name) {
  TORCH_CHECK_VALUE(value >= sas::kInt32Min && value <= sas::kInt32Max, name,
                    " must fit int32 (the kernel's attribute type), got ", value);
}

sas::LengthSource tensor_source(const at::Tensor& t, sas::LengthSource::Kind kind) {
  sas::LengthSource source;
  source.kind = kind;
  if (t.scalar_type() == c10::kInt) {
    source.values32 = t.data_ptr<int32_t>();
  } else {
    source.values64 = t.data_ptr<int64_t>();
  }
  return source;
}

sas::LengthSource constant_source(int64_t value) {
  sas::LengthSource source;
  source.constant = value;
  return source;
}

// The argument a length comes from, for messages.
const char* source_name(const sas::LengthSource& source, bool query_side) {
  if (query_side) {
    switch (source.kind) {
      case sas::LengthSource::kConstant:
        return "max_seqlen_q";
      case sas::LengthSource::kPerBatch:
        return "seqused_q";
      case sas::LengthSource::kCumulative:
        return "cu_seqlens_q";
    }
  }
  switch (source.kind) {
    case sas::LengthSource::kConstant:
      return "max_seqlen_kv";
    case sas::LengthSource::kPerBatch:
      return "seqused_kv";
    case sas::LengthSource::kCumulative:
      return "cu_seqlens_ori_kv";
  }
  return "";
}

std::string describe(const sas::SASStatus& status, const sas::SASShape& shape) {
  const sas::LengthSource& source = status.query_side ? shape.query : shape.kv;
  const char* name = source_name(source, status.query_side);
  const char* what = status.query_side ? "query" : "KV";
  std::ostringstream message;
  switch (status.error) {
    case sas::SASError::kNone:
      break;
    case sas::SASError::kOutsideInt32:
      message << name << " must hold int32 values (the kernel reads int32), but the " << what << " length of batch "
              << status.batch << " reads a value outside int32";
      break;
    case sas::SASError::kNegativeLength:
      if (source.kind == sas::LengthSource::kCumulative) {
        message << name << " must be non-decreasing, but " << name << "[" << status.batch + 1 << "] < " << name << "["
                << status.batch << "] (" << what << " length " << status.value << ")";
      } else {
        message << name << " must be >= 0, got " << status.value << " for batch " << status.batch;
      }
      break;
    case sas::SASError::kTooManyRows:
      message << name << ": batch " << status.batch << " has " << status.value
              << " query rows (query length * num_heads_q), more than 2^31 - 1";
      break;
    case sas::SASError::kTooManyTiles:
      message << name << " and num_heads_q describe more than 2^31 - 1 M tiles in all";
      break;
    case sas::SASError::kCostOverflow:
      message << source_name(shape.query, true) << " and " << source_name(shape.kv, false)
              << " describe a schedule whose total cost passes 2^56 (a real batch costs below 2^40)";
      break;
  }
  return message.str();
}

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
  // The table (32 bytes a batch) comes from the per-thread scratch up to kKeptTableRows batches;
  // a larger one is this call's alone, so that one large call does not keep its memory, and an
  // allocation that fails names where B came from.
  const int64_t rows = sas::batch_table_rows(shape);
  std::unique_ptr<int64_t[]> large;
  int64_t* scratch = nullptr;
  if (rows <= kKeptTableRows) {
    scratch = int64_scratch(4 * rows);
  } else {
    large.reset(new (std::nothrow) int64_t[static_cast<size_t>(4 * rows)]);
    TORCH_CHECK_VALUE(large != nullptr, batch_source, " describes ", num_batches, " batches: their cost table (",
                      32 * rows, " bytes) could not be allocated");
    scratch = large.get();
  }
  const sas::BatchTable table = sas::make_batch_table(scratch, shape);
  sas::SASStatus status = sas::check_lengths(shape, table);
  TORCH_CHECK_VALUE(status.error == sas::SASError::kNone, describe(status, shape));
  sas::CostSummary summary;
  status = sas::fill_costs(shape, table, &summary);
  TORCH_CHECK_VALUE(status.error == sas::SASError::kNone, describe(status, shape));
  sas::write_schedule(shape, table, summary, out.data_ptr<int32_t>());
}

}  // namespace

TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("sas_metadata", &sas_metadata); }

}  // namespace specops::cpu
