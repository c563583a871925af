// lightning_indexer_metadata: its metadata checks (the AI-CPU kernel's, and refusals where its
// behaviour would be undefined; the Meta kernel, and every backend's first step), then the CPU op:
// the checks, then the schedule; nothing is written before every check passed.
#include <torch/library.h>

#include <cstdint>
#include <optional>

#include "cpu/checks.h"
#include "cpu/sas_inputs.h"
#include "cpu/scratch.h"
#include "kernels/lightning_indexer_metadata.h"

namespace specops::cpu {
namespace {

namespace sas = kernels::sas;
namespace li = kernels::lightning_indexer;
using namespace sas_inputs;  // NOLINT: the family's shared checks

// Layout codes as the wrapper resolves the strings (python/specops/sas_family_layout.py).
constexpr int64_t kQueryBsnd = 0;
constexpr int64_t kQueryTnd = 1;
constexpr int64_t kKeyPaBsnd = 0;
constexpr int64_t kKeyTnd = 1;
constexpr int64_t kKeyBsnd = 2;

const SourceNames kQueryNames{"max_seqlen_q", "actual_seq_lengths_query", "actual_seq_lengths_query"};
const SourceNames kKeyNames{"max_seqlen_k", "actual_seq_lengths_key", "actual_seq_lengths_key"};

template <typename Int>
void check_lightning_indexer_metadata(int64_t num_heads_q, int64_t num_heads_k, int64_t head_dim, int64_t query_quant_mode,
                                      int64_t key_quant_mode, const std::optional<at::Tensor>& actual_seq_lengths_query,
                                      const std::optional<at::Tensor>& actual_seq_lengths_key, int64_t batch_size,
                                      int64_t max_seqlen_q, int64_t max_seqlen_k, int64_t layout_query, int64_t layout_key,
                                      int64_t sparse_count, int64_t sparse_mode, int64_t pre_tokens, int64_t next_tokens,
                                      int64_t cmp_ratio, int64_t num_cube_cores, int64_t num_vector_cores, bool ascend950,
                                      const at::Tensor& out) {
  check_schedule_inputs<Int>(out,
                        {{actual_seq_lengths_query, "actual_seq_lengths_query"},
                         {actual_seq_lengths_key, "actual_seq_lengths_key"}},
                        {{num_heads_q, "num_heads_q"}, {num_heads_k, "num_heads_k"}, {head_dim, "head_dim"},
                         {query_quant_mode, "query_quant_mode"}, {key_quant_mode, "key_quant_mode"},
                         {batch_size, "batch_size"}, {max_seqlen_q, "max_seqlen_q"}, {max_seqlen_k, "max_seqlen_k"},
                         {sparse_count, "sparse_count"}, {sparse_mode, "sparse_mode"}, {cmp_ratio, "cmp_ratio"}});

  // The kernel's own checks, in its order.
  TORCH_CHECK_VALUE(num_cube_cores != 0, "num_cube_cores (AIC num) should not be 0");
  TORCH_CHECK_VALUE(num_vector_cores != 0 && num_vector_cores % num_cube_cores == 0,
                    "num_vector_cores (AIV num) must be a non-zero multiple of num_cube_cores (", num_cube_cores,
                    "), got ", num_vector_cores);
  check_nonnegative(batch_size, "batch_size");
  check_nonnegative(max_seqlen_q, "max_seqlen_q");
  check_nonnegative(max_seqlen_k, "max_seqlen_k");
  TORCH_CHECK_VALUE(num_heads_q == li::kHeads, "num_heads_q should only be 64, but got ", num_heads_q);
  TORCH_CHECK_VALUE(num_heads_k == 1, "num_heads_k should only be 1, but got ", num_heads_k);
  TORCH_CHECK_VALUE(layout_query == kQueryBsnd || layout_query == kQueryTnd,
                    "layout_query must be TND or BSND, got code ", layout_query);
  TORCH_CHECK_VALUE(layout_key == kKeyPaBsnd || layout_key == kKeyTnd || layout_key == kKeyBsnd,
                    "layout_key must be PA_BSND, TND or BSND, got code ", layout_key);
  TORCH_CHECK_VALUE(layout_query != kQueryTnd || layout_key != kKeyBsnd,
                    "layout_key must be PA_BSND or TND when layout_query is TND, got BSND");
  TORCH_CHECK_VALUE(layout_query != kQueryBsnd || layout_key != kKeyTnd,
                    "layout_key must be PA_BSND or BSND when layout_query is BSND, got TND");
  TORCH_CHECK_VALUE(sparse_mode == li::kModeAll || sparse_mode == li::kModeCausal,
                    "sparse_mode should be 0 or 3, but got ", sparse_mode);
  TORCH_CHECK_VALUE(pre_tokens == INT64_MAX, "pre_tokens should only be 2^63-1, but got ", pre_tokens);
  TORCH_CHECK_VALUE(next_tokens == INT64_MAX, "next_tokens should only be 2^63-1, but got ", next_tokens);
  const bool has_query = is_given(actual_seq_lengths_query);
  const bool has_key = is_given(actual_seq_lengths_key);
  TORCH_CHECK_VALUE(layout_query != kQueryTnd || has_query,
                    "actual_seq_lengths_query must be provided (and non-empty) for layout_query TND");
  TORCH_CHECK_VALUE(layout_key == kKeyBsnd || has_key,
                    "actual_seq_lengths_key must be provided (and non-empty) for layout_key PA_BSND or TND");
  const Int query_batches = has_query ? numel_of<Int>(*actual_seq_lengths_query) : Int(batch_size);
  const Int key_batches = has_key ? numel_of<Int>(*actual_seq_lengths_key) : Int(batch_size);
  TORCH_CHECK_VALUE(!(layout_query == kQueryBsnd || layout_key == kKeyTnd) || query_batches == key_batches,
                    "actual_seq_lengths_query must have as many entries as actual_seq_lengths_key (",
                    key_batches, ") for layout_query BSND or TND/TND, got ", query_batches);
  TORCH_CHECK_VALUE(query_batches - key_batches <= 1 && key_batches - query_batches <= 1,
                    "actual_seq_lengths_query (", query_batches, " batches) and actual_seq_lengths_key (",
                    key_batches, ") may differ by at most one entry");
  TORCH_CHECK_VALUE(cmp_ratio >= 1 && cmp_ratio <= 128, "cmp_ratio should be in [1, 128], but got ", cmp_ratio);
  if (ascend950) {
    TORCH_CHECK_VALUE(cmp_ratio == 1 || cmp_ratio == 4 || cmp_ratio == 128,
                      "cmp_ratio should be 1, 4 or 128 on Ascend950, but got ", cmp_ratio);
  } else {
    TORCH_CHECK_VALUE((cmp_ratio & (cmp_ratio - 1)) == 0,
                      "cmp_ratio should be a power of two (1 .. 128) on A2/A3, but got ", cmp_ratio);
  }

  // Inputs on which the kernel's behaviour is undefined.
  TORCH_CHECK_VALUE(num_cube_cores >= 1 && num_cube_cores <= sas::kMaxCubeCores,
                    "num_cube_cores (AIC num) must be in [1, ", sas::kMaxCubeCores, "], got ", num_cube_cores);
  TORCH_CHECK_VALUE(num_vector_cores >= 1 && num_vector_cores <= sas::kMaxVectorCores,
                    "num_vector_cores (AIV num) must be in [1, ", sas::kMaxVectorCores, "], got ", num_vector_cores);
  TORCH_CHECK_VALUE(has_key || max_seqlen_k * cmp_ratio <= sas::kInt32Max, "max_seqlen_k * cmp_ratio (",
                    max_seqlen_k * cmp_ratio, ") must fit int32 (the kernel's key length without a tensor)");
  check_lengths_alias_nothing(out, {{actual_seq_lengths_query, "actual_seq_lengths_query"},
                                    {actual_seq_lengths_key, "actual_seq_lengths_key"}});
}

void lightning_indexer_metadata(int64_t num_heads_q, int64_t num_heads_k, int64_t head_dim, int64_t query_quant_mode,
                                int64_t key_quant_mode, const std::optional<at::Tensor>& actual_seq_lengths_query,
                                const std::optional<at::Tensor>& actual_seq_lengths_key, int64_t batch_size,
                                int64_t max_seqlen_q, int64_t max_seqlen_k, int64_t layout_query, int64_t layout_key,
                                int64_t sparse_count, int64_t sparse_mode, int64_t pre_tokens, int64_t next_tokens,
                                int64_t cmp_ratio, int64_t num_cube_cores, int64_t num_vector_cores, bool ascend950,
                                const at::Tensor& out) {
  check_lightning_indexer_metadata<int64_t>(
      num_heads_q, num_heads_k, head_dim, query_quant_mode, key_quant_mode, actual_seq_lengths_query,
      actual_seq_lengths_key, batch_size, max_seqlen_q, max_seqlen_k, layout_query, layout_key, sparse_count,
      sparse_mode, pre_tokens, next_tokens, cmp_ratio, num_cube_cores, num_vector_cores, ascend950, out);
  const bool has_query = is_given(actual_seq_lengths_query);
  const bool has_key = is_given(actual_seq_lengths_key);
  const int64_t query_batches = has_query ? actual_seq_lengths_query->numel() : batch_size;
  const int64_t key_batches = has_key ? actual_seq_lengths_key->numel() : batch_size;
  const int64_t num_batches = query_batches < key_batches ? query_batches : key_batches;
  sas::LengthSource query = constant_source(max_seqlen_q);
  if (has_query) {
    const bool cumulative = layout_query == kQueryTnd;
    query = tensor_source(*actual_seq_lengths_query,
                          !cumulative                       ? sas::LengthSource::kPerBatch
                          : query_batches > key_batches ? sas::LengthSource::kCumulative
                                                        : sas::LengthSource::kPrefixSums);
  }
  sas::LengthSource key = constant_source(max_seqlen_k * cmp_ratio);
  if (has_key) {
    key = tensor_source(*actual_seq_lengths_key,
                        layout_key == kKeyTnd ? sas::LengthSource::kPrefixSums : sas::LengthSource::kPerBatch);
  }

  // The mask and window arguments of make_shape are unused: the indexer's coster has its own.
  const sas::SASShape shape = sas::make_shape(num_batches, num_heads_q, sas::kMaskNone, 0, 0, false, 1, 0,
                                              num_cube_cores, li::variant(ascend950), query, key);
  const li::TileCoster coster{shape, sparse_mode == li::kModeCausal, ascend950, cmp_ratio};
  const BatchTableStorage storage(shape, "actual_seq_lengths_query");
  write_checked_schedule(shape, coster, storage.table(), kQueryNames, kKeyNames, out.data_ptr<int32_t>());
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  m.def(
      "lightning_indexer_metadata(int num_heads_q, int num_heads_k, int head_dim, int query_quant_mode, "
      "int key_quant_mode, Tensor? actual_seq_lengths_query, Tensor? actual_seq_lengths_key, int batch_size, "
      "int max_seqlen_q, int max_seqlen_k, int layout_query, int layout_key, int sparse_count, int sparse_mode, "
      "int pre_tokens, int next_tokens, int cmp_ratio, int num_cube_cores, int num_vector_cores, bool ascend950, "
      "Tensor(a!) out) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("lightning_indexer_metadata", &lightning_indexer_metadata); }
TORCH_LIBRARY_IMPL(specops, Meta, m) {
  m.impl("lightning_indexer_metadata", &check_lightning_indexer_metadata<c10::SymInt>);
}

}  // namespace specops::cpu
