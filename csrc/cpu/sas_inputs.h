#pragma once
// The inputs of the sas family (sas_metadata, kv_quant_sas_metadata, lightning_indexer_metadata):
// the checks the three ops' metadata checks share (their optional length tensors, int32
// attributes, layouts, windows), where each batch's lengths come from, and the messages for
// lengths the schedule refuses (the CPU ops').
#include <torch/library.h>

#include <initializer_list>
#include <memory>
#include <new>
#include <optional>
#include <sstream>
#include <string>

#include "cpu/checks.h"
#include "cpu/scratch.h"
#include "kernels/sas_metadata.h"

namespace specops::cpu::sas_inputs {

namespace sas = kernels::sas;

// The kernels' "provided": None and an empty tensor both mean not provided.
inline bool is_given(const std::optional<at::Tensor>& t) { return t.has_value() && t->sym_numel() > 0; }

inline void check_int32_attribute(int64_t value, const char* name) {
  TORCH_CHECK_VALUE(value >= sas::kInt32Min && value <= sas::kInt32Max, name,
                    " must fit int32 (the kernel's attribute type), got ", value);
}

// One length tensor or int32 attribute of a member, with its name.
struct LengthTensor {
  const std::optional<at::Tensor>& tensor;
  const char* name;
};

struct Int32Attribute {
  int64_t value;
  const char* name;
};

// What every member checks first: out (int32, the 1024 words), its length tensors and the
// attributes the kernel reads as int32. An empty length tensor is not provided whatever its dtype
// and shape (vllm-ascend's DSA builders pass empty float32 placeholders), so the dtype and rank
// are checked only when it holds values. Its device is checked always: out's, or with out on a
// device the host (the host-planned form: every length tensor that holds values on the host, or
// every one on out's device).
template <typename Int>
void check_schedule_inputs(const at::Tensor& out, std::initializer_list<LengthTensor> lengths,
                           std::initializer_list<Int32Attribute> attributes) {
  check_tensor(out, "out", {c10::kInt}, 1);
  TORCH_CHECK_VALUE(numel_of<Int>(out) == sas::kNumWords, "out must have exactly ", sas::kNumWords,
                    " int32 words, got ", numel_of<Int>(out));
  const char* host_lengths = nullptr;    // the first host tensor that holds values
  const char* device_lengths = nullptr;  // the first one on out's device (not the host)
  for (const LengthTensor& length : lengths) {
    const std::optional<at::Tensor>& t = length.tensor;
    if (!t.has_value()) continue;
    TORCH_CHECK_VALUE(t->defined(), length.name, " must be a tensor or None, got None");
    const bool on_host = t->device().is_cpu();
    TORCH_CHECK_VALUE(t->device() == out.device() || on_host, length.name, " must be on ", out.device(), " like out",
                      out.device().is_cpu() ? "" : ", or on the host", ", got ", t->device());
    if (numel_of<Int>(*t) == 0) continue;
    check_tensor(*t, length.name, {c10::kInt, c10::kLong}, 1);
    if (on_host) {
      if (host_lengths == nullptr) host_lengths = length.name;
    } else if (device_lengths == nullptr) {
      device_lengths = length.name;
    }
  }
  TORCH_CHECK_VALUE(device_lengths == nullptr || host_lengths == nullptr, device_lengths, " is on ", out.device(),
                    " but ", host_lengths,
                    " is on the host: pass every length tensor on the host (the host-planned form) or every one on "
                    "out's device");
  for (const Int32Attribute& attribute : attributes) check_int32_attribute(attribute.value, attribute.name);
}

// The kernel reads its length tensors while it writes the schedule: out shares memory with none.
inline void check_lengths_alias_nothing(const at::Tensor& out, std::initializer_list<LengthTensor> lengths) {
  for (const LengthTensor& length : lengths) {
    if (is_given(length.tensor)) check_outputs_alias_nothing({{&out, {"out"}}}, {{&*length.tensor, {length.name}}});
  }
}

inline void check_nonnegative(int64_t value, const char* name) {
  TORCH_CHECK_VALUE(value >= 0, name, " should not be negative, but got ", value);
}

// Layout codes as the wrappers resolve the strings (python/specops/sas_layout.py).
constexpr int64_t kLayoutQBsnd = 0;
constexpr int64_t kLayoutQTnd = 1;
constexpr int64_t kLayoutKvPaNd = 0;
constexpr int64_t kLayoutKvTnd = 1;
constexpr int64_t kLayoutKvBsnd = 2;

// sas_metadata's and kv_quant_sas_metadata's kernels: one KV head, a mask mode they know.
inline void check_kv_heads_and_mask(int64_t num_heads_kv, int64_t ori_mask_mode) {
  TORCH_CHECK_VALUE(num_heads_kv == 1, "num_heads_kv should only be 1, but got ", num_heads_kv);
  TORCH_CHECK_VALUE(
      ori_mask_mode == sas::kMaskNone || ori_mask_mode == sas::kMaskCausal || ori_mask_mode == sas::kMaskBand,
      "ori_mask_mode should be 0, 3 or 4, but got ", ori_mask_mode);
}

inline void check_window_sign(int64_t window, const char* name) {
  TORCH_CHECK_VALUE(window >= 0, name, " should be non-negative, but got ", window);
}

inline void check_window_bound(int64_t window, const char* name) {
  TORCH_CHECK_VALUE(window <= sas::kMaxWindow, name,
                    " must be at most 2^62 (a wider window sees every KV token; near 2^63 the kernel's int64 window "
                    "sums overflow), got ",
                    window);
}

// The layout codes of the two kernels, and no BSND KV under a TND query.
inline void check_sas_layouts(int64_t layout_q, int64_t layout_kv) {
  TORCH_CHECK_VALUE(layout_q == kLayoutQBsnd || layout_q == kLayoutQTnd, "layout_q must be TND or BSND, got code ",
                    layout_q);
  TORCH_CHECK_VALUE(layout_kv == kLayoutKvPaNd || layout_kv == kLayoutKvTnd || layout_kv == kLayoutKvBsnd,
                    "layout_kv must be TND, BSND or PA_ND, got code ", layout_kv);
  TORCH_CHECK_VALUE(layout_q != kLayoutQTnd || layout_kv != kLayoutKvBsnd,
                    "layout_kv must be PA_ND or TND when layout_q is TND, got BSND");
}

inline void check_cu_seqlens_q(int64_t layout_q, const std::optional<at::Tensor>& cu_seqlens_q) {
  TORCH_CHECK_VALUE(layout_q != kLayoutQTnd || is_given(cu_seqlens_q), "cu_seqlens_q must be provided for layout_q TND");
}

inline void check_cmp_ratio(int64_t cmp_ratio) {
  TORCH_CHECK_VALUE(cmp_ratio == 4 || cmp_ratio == 128, "cmp_ratio should only be 4 or 128 when has_cmp_kv, but got ",
                    cmp_ratio);
}

inline void check_cmp_topk(int64_t cmp_topk) {
  TORCH_CHECK_VALUE(cmp_topk == 0 || cmp_topk == 512 || cmp_topk == 1024,
                    "cmp_topk should be 0, 512 or 1024 when has_cmp_kv, but got ", cmp_topk);
}

inline sas::LengthSource tensor_source(const at::Tensor& t, sas::LengthSource::Kind kind) {
  sas::LengthSource source;
  source.kind = kind;
  if (t.scalar_type() == c10::kInt) {
    source.values32 = t.data_ptr<int32_t>();
  } else {
    source.values64 = t.data_ptr<int64_t>();
  }
  return source;
}

inline sas::LengthSource constant_source(int64_t value) {
  sas::LengthSource source;
  source.constant = value;
  return source;
}

// B and where the kernel takes it from: seqused_q, else a TND query's cu_seqlens_q (checked given
// before), else batch_size. B is bounded by the kernel's int32 loop counters.
template <typename Int>
struct BatchCount {
  Int num_batches;
  const char* source;
};

template <typename Int>
BatchCount<Int> checked_batches(int64_t layout_q, const std::optional<at::Tensor>& cu_seqlens_q,
                                const std::optional<at::Tensor>& seqused_q, int64_t batch_size) {
  BatchCount<Int> batches{Int(batch_size), "batch_size"};
  if (is_given(seqused_q)) {
    batches = {numel_of<Int>(*seqused_q), "seqused_q"};
  } else if (layout_q == kLayoutQTnd) {
    batches = {numel_of<Int>(*cu_seqlens_q) - 1, "cu_seqlens_q"};
  }
  TORCH_CHECK_VALUE(batches.num_batches <= sas::kInt32Max, batches.source, " describes ", batches.num_batches,
                    " batches, more than 2^31 - 1");
  return batches;
}

// B, where the kernel takes it from, and each batch's query length (the arguments checked).
struct QueryBatches {
  int64_t num_batches;
  const char* source;
  sas::LengthSource lengths;
};

inline QueryBatches query_batches(int64_t layout_q, const std::optional<at::Tensor>& cu_seqlens_q,
                                  const std::optional<at::Tensor>& seqused_q, int64_t batch_size,
                                  int64_t max_seqlen_q) {
  if (is_given(seqused_q)) {
    return {seqused_q->numel(), "seqused_q", tensor_source(*seqused_q, sas::LengthSource::kPerBatch)};
  }
  if (layout_q == kLayoutQTnd) {
    return {cu_seqlens_q->numel() - 1, "cu_seqlens_q", tensor_source(*cu_seqlens_q, sas::LengthSource::kCumulative)};
  }
  return {batch_size, "batch_size", constant_source(max_seqlen_q)};
}

// Batches whose cost table the per-thread scratch keeps between calls (2 MiB at 4 values a row).
constexpr int64_t kKeptTableRows = int64_t{1} << 16;

// The cost table of one call: from the per-thread scratch up to kKeptTableRows rows; a larger one
// is this call's alone, so that one large call does not keep its memory, and an allocation that
// fails names where B came from.
class BatchTableStorage {
 public:
  BatchTableStorage(const sas::SASShape& shape, const char* batch_source) : shape_(shape) {
    const int64_t size = sas::batch_table_size(shape);
    if (sas::batch_table_rows(shape) <= kKeptTableRows) {
      scratch_ = int64_scratch(size);
      return;
    }
    large_.reset(new (std::nothrow) int64_t[static_cast<size_t>(size)]);
    TORCH_CHECK_VALUE(large_ != nullptr, batch_source, " describes ", shape.num_batches,
                      " batches: their cost table (", 8 * size, " bytes) could not be allocated");
    scratch_ = large_.get();
  }

  sas::BatchTable table() const { return sas::make_batch_table(shape_, scratch_); }

 private:
  const sas::SASShape& shape_;
  std::unique_ptr<int64_t[]> large_;
  int64_t* scratch_ = nullptr;
};

// The argument each kind of length source reads, for one side (query or KV) of one op.
struct SourceNames {
  const char* constant;
  const char* per_batch;
  const char* cumulative;  // also the prefix sums without a leading 0

  const char* of(const sas::LengthSource& source) const {
    switch (source.kind) {
      case sas::LengthSource::kConstant:
        return constant;
      case sas::LengthSource::kPerBatch:
        return per_batch;
      case sas::LengthSource::kCumulative:
      case sas::LengthSource::kPrefixSums:
        return cumulative;
    }
    return "";
  }
};

inline std::string describe(const sas::SASStatus& status, const sas::SASShape& shape, const SourceNames& query_names,
                            const SourceNames& kv_names) {
  const sas::LengthSource& source = status.query_side ? shape.query : shape.kv;
  const char* name = (status.query_side ? query_names : kv_names).of(source);
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
      if (source.kind == sas::LengthSource::kCumulative || source.kind == sas::LengthSource::kPrefixSums) {
        const int64_t later = source.kind == sas::LengthSource::kCumulative ? status.batch + 1 : status.batch;
        message << name << " must be non-decreasing, but " << name << "[" << later << "] < " << name << "["
                << later - 1 << "] (" << what << " length " << status.value << ")";
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
      message << query_names.of(shape.query) << " and " << kv_names.of(shape.kv)
              << " describe a schedule whose total cost passes 2^56 (a real batch costs below 2^40)";
      break;
  }
  return message.str();
}

// The lengths checked, then costed, then the schedule written; a refusal raises before any write.
template <typename Coster>
inline void write_checked_schedule(const sas::SASShape& shape, const Coster& coster, sas::BatchTable table,
                                   const SourceNames& query_names, const SourceNames& kv_names, int32_t* out) {
  sas::SASStatus status = sas::check_lengths(shape, table);
  TORCH_CHECK_VALUE(status.error == sas::SASError::kNone, describe(status, shape, query_names, kv_names));
  sas::CostSummary summary;
  status = sas::fill_costs_with(shape, coster, table, &summary);
  TORCH_CHECK_VALUE(status.error == sas::SASError::kNone, describe(status, shape, query_names, kv_names));
  sas::write_schedule_with(shape, coster, table, summary, out);
}

}  // namespace specops::cpu::sas_inputs
