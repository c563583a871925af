#pragma once
// The inputs of the sas family's CPU ops (sas_metadata, kv_quant_sas_metadata,
// lightning_indexer_metadata): their optional length tensors, int32 attributes, where each
// batch's lengths come from, and the messages for lengths the schedule refuses.
#include <torch/library.h>

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
inline bool is_given(const std::optional<at::Tensor>& t) { return t.has_value() && t->numel() > 0; }

inline const at::Tensor* given_ptr(const std::optional<at::Tensor>& t) { return t.has_value() ? &*t : nullptr; }

// An empty tensor is not provided whatever its dtype and shape (vllm-ascend's DSA builders pass
// empty float32 placeholders), so the dtype and rank are checked only when it holds values. Its
// device is checked always: a tensor on another device selects another kernel.
inline void check_length_tensor(const std::optional<at::Tensor>& t, const char* name, const at::Tensor& out) {
  if (!t.has_value()) return;
  TORCH_CHECK_VALUE(t->defined(), name, " must be a tensor, got None");
  TORCH_CHECK_VALUE(t->device() == out.device(), name, " must be on ", out.device(), " like out, got ", t->device());
  if (t->numel() == 0) return;
  check_tensor(*t, name, {c10::kInt, c10::kLong}, 1);
}

inline void check_int32_attribute(int64_t value, const char* name) {
  TORCH_CHECK_VALUE(value >= sas::kInt32Min && value <= sas::kInt32Max, name,
                    " must fit int32 (the kernel's attribute type), got ", value);
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
