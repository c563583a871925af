// compressor_metadata: its metadata checks (the Meta kernel, and every backend's first step), then
// the CPU op: the checks, then the rows; nothing is written before every check passed.
#include <torch/library.h>

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "cpu/compressor_checks.h"
#include "kernels/compressor_metadata.h"

namespace specops::cpu {
namespace {

namespace cm = kernels::compressor;

template <typename Int>
void check_compressor_metadata(const at::Tensor& rope_cos, const at::Tensor& rope_sin, const at::Tensor& cu_seqlens,
                               const at::Tensor& start_pos, const at::Tensor& kv_block_table, int64_t kv_block_size,
                               int64_t slot_mapping_format, int64_t compress_ratio, int64_t num_reqs_actual,
                               const at::Tensor& compress_cos, const at::Tensor& compress_sin,
                               const at::Tensor& slot_mapping) {
  check_compressor_group<Int>(rope_cos, rope_sin, kv_block_table, kv_block_size, slot_mapping_format, compress_ratio,
                              compress_cos, compress_sin, slot_mapping, CompressorNames{}, std::nullopt, std::nullopt,
                              nullptr);
  const Anchor anchor = anchor_of(rope_cos, "rope_cos");
  check_tensor(cu_seqlens, "cu_seqlens", {c10::kInt}, 1, anchor);
  check_tensor(start_pos, "start_pos", {c10::kInt}, 1, anchor);
  check_compressor_requests<Int>(cu_seqlens, start_pos, num_reqs_actual);
  check_compressor_table_rows<Int>(kv_block_table, "kv_block_table", num_reqs_actual);
  check_outputs_alias_nothing(
      {{&compress_cos, {"compress_cos"}}, {&compress_sin, {"compress_sin"}}, {&slot_mapping, {"slot_mapping"}}},
      {{&rope_cos, {"rope_cos"}}, {&rope_sin, {"rope_sin"}}, {&cu_seqlens, {"cu_seqlens"}},
       {&start_pos, {"start_pos"}}, {&kv_block_table, {"kv_block_table"}}});
}

void compressor_metadata(const at::Tensor& rope_cos, const at::Tensor& rope_sin, const at::Tensor& cu_seqlens,
                         const at::Tensor& start_pos, const at::Tensor& kv_block_table, int64_t kv_block_size,
                         int64_t slot_mapping_format, int64_t compress_ratio, int64_t num_reqs_actual,
                         const at::Tensor& compress_cos, const at::Tensor& compress_sin,
                         const at::Tensor& slot_mapping) {
  check_compressor_metadata<int64_t>(rope_cos, rope_sin, cu_seqlens, start_pos, kv_block_table, kv_block_size,
                                     slot_mapping_format, compress_ratio, num_reqs_actual, compress_cos, compress_sin,
                                     slot_mapping);
  const int64_t num_rows = compress_cos.size(0);
  const int64_t rope_dim = rope_cos.size(1);
  const cm::Inputs inputs{cu_seqlens.data_ptr<int32_t>(), start_pos.data_ptr<int32_t>(),
                          kv_block_table.data_ptr<int32_t>(), kv_block_table.stride(0), kv_block_table.size(1),
                          kv_block_size, compress_ratio, num_reqs_actual, rope_cos.size(0), slot_mapping_format};
  // The fill rows, 1 and 0 in the tables' dtype (float32, bfloat16 or float16 bit patterns).
  const int64_t element = static_cast<int64_t>(rope_cos.element_size());
  const uint32_t one_bits = rope_cos.scalar_type() == c10::kFloat      ? 0x3f800000u
                            : rope_cos.scalar_type() == c10::kBFloat16 ? 0x3f80u
                                                                       : 0x3c00u;
  std::vector<unsigned char> one(static_cast<size_t>(rope_dim * element));
  std::vector<unsigned char> zero(one.size(), 0);
  for (int64_t d = 0; d < rope_dim; ++d) std::memcpy(one.data() + d * element, &one_bits, static_cast<size_t>(element));
  cm::compressor_metadata(inputs, static_cast<const unsigned char*>(rope_cos.data_ptr()),
                          static_cast<const unsigned char*>(rope_sin.data_ptr()), rope_cos.stride(0) * element,
                          rope_dim * element, one.data(), zero.data(), num_rows,
                          static_cast<unsigned char*>(compress_cos.data_ptr()),
                          static_cast<unsigned char*>(compress_sin.data_ptr()), slot_mapping.data_ptr<int32_t>());
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  // N = compress_cos.size(0) rows; slot_mapping [N] (format 1, flat) or [N, 2] (format 2).
  m.def(
      "compressor_metadata(Tensor rope_cos, Tensor rope_sin, Tensor cu_seqlens, Tensor start_pos, "
      "Tensor kv_block_table, int kv_block_size, int slot_mapping_format, int compress_ratio, int num_reqs_actual, "
      "Tensor(a!) compress_cos, Tensor(b!) compress_sin, Tensor(c!) slot_mapping) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("compressor_metadata", &compressor_metadata); }
TORCH_LIBRARY_IMPL(specops, Meta, m) { m.impl("compressor_metadata", &check_compressor_metadata<c10::SymInt>); }

}  // namespace specops::cpu
