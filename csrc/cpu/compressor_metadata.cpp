// CPU op for compressor_metadata: shape and argument checks, then the rows; nothing is written
// before every check passed.
#include <torch/library.h>

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "cpu/checks.h"
#include "kernels/compressor_metadata.h"

namespace specops::cpu {
namespace {

namespace cm = kernels::compressor;

void compressor_metadata(const at::Tensor& rope_cos, const at::Tensor& rope_sin, const at::Tensor& cu_seqlens,
                         const at::Tensor& start_pos, const at::Tensor& kv_block_table, int64_t kv_block_size,
                         int64_t slot_mapping_format, int64_t compress_ratio, int64_t num_reqs_actual,
                         const at::Tensor& compress_cos, const at::Tensor& compress_sin,
                         const at::Tensor& slot_mapping) {
  check_tensor(rope_cos, "rope_cos", {c10::kFloat, c10::kBFloat16, c10::kHalf}, 2);
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"rope_sin", &rope_sin},
                                {"compress_cos", &compress_cos}, {"compress_sin", &compress_sin}}) {
    TORCH_CHECK_VALUE(!t->defined() || t->scalar_type() == rope_cos.scalar_type(), name, " must have rope_cos's dtype ",
                      dtype_name(rope_cos.scalar_type()), ", got ", dtype_name(t->scalar_type()));
  }
  check_tensor(rope_sin, "rope_sin", {rope_cos.scalar_type()}, 2);
  TORCH_CHECK_VALUE(rope_sin.sizes() == rope_cos.sizes(), "rope_sin must have rope_cos's shape ", rope_cos.sizes(),
                    ", got ", rope_sin.sizes());
  TORCH_CHECK_VALUE(rope_sin.stride(0) == rope_cos.stride(0), "rope_sin must have rope_cos's row stride ",
                    rope_cos.stride(0), ", got ", rope_sin.stride(0));
  check_tensor(cu_seqlens, "cu_seqlens", {c10::kInt}, 1);
  check_tensor(start_pos, "start_pos", {c10::kInt}, 1);
  check_tensor(kv_block_table, "kv_block_table", {c10::kInt}, 2);
  check_tensor(compress_cos, "compress_cos", {rope_cos.scalar_type()}, 4);
  check_tensor(compress_sin, "compress_sin", {rope_cos.scalar_type()}, 4);
  TORCH_CHECK_VALUE(compress_cos.is_contiguous() && compress_sin.is_contiguous(),
                    "compress_cos and compress_sin must be contiguous");
  const int64_t num_rows = compress_cos.size(0);
  const int64_t rope_dim = rope_cos.size(1);
  const std::vector<int64_t> row_shape{num_rows, 1, 1, rope_dim};
  TORCH_CHECK_VALUE(compress_cos.sizes() == c10::IntArrayRef(row_shape), "compress_cos must have shape [N, 1, 1, ",
                    rope_dim, "], got ", compress_cos.sizes());
  TORCH_CHECK_VALUE(compress_sin.sizes() == compress_cos.sizes(), "compress_sin must have compress_cos's shape ",
                    compress_cos.sizes(), ", got ", compress_sin.sizes());
  TORCH_CHECK_VALUE(slot_mapping_format == cm::kFormatFlat || slot_mapping_format == cm::kFormatBlockOffset,
                    "slot_mapping_format must be 1 (flat) or 2 (block, offset), got ", slot_mapping_format);
  if (slot_mapping_format == cm::kFormatFlat) {
    check_tensor(slot_mapping, "slot_mapping", {c10::kInt}, 1);
    TORCH_CHECK_VALUE(slot_mapping.size(0) == num_rows, "slot_mapping must have N = ", num_rows, " rows, got ",
                      slot_mapping.sizes());
  } else {
    check_tensor(slot_mapping, "slot_mapping", {c10::kInt}, 2);
    TORCH_CHECK_VALUE(slot_mapping.size(0) == num_rows && slot_mapping.size(1) == 2 && slot_mapping.is_contiguous(),
                      "slot_mapping must be a contiguous [N = ", num_rows, ", 2] tensor, got ", slot_mapping.sizes());
  }
  check_positive(kv_block_size, "kv_block_size");
  TORCH_CHECK_VALUE(kv_block_size <= cm::kInt32Max, "kv_block_size must fit int32, got ", kv_block_size);
  check_positive(compress_ratio, "compress_ratio");
  TORCH_CHECK_VALUE(compress_ratio <= cm::kInt32Max, "compress_ratio must fit int32, got ", compress_ratio);
  check_non_negative(num_reqs_actual, "num_reqs_actual");
  TORCH_CHECK_VALUE(static_cast<uint64_t>(cu_seqlens.numel()) >= one_more(num_reqs_actual),
                    "cu_seqlens must have at least num_reqs_actual + 1 = ", one_more(num_reqs_actual), " entries, got ",
                    cu_seqlens.numel());
  check_entries(start_pos, "start_pos", num_reqs_actual, "num_reqs_actual");
  TORCH_CHECK_VALUE(kv_block_table.size(0) >= num_reqs_actual, "kv_block_table must have at least num_reqs_actual = ",
                    num_reqs_actual, " rows, got ", kv_block_table.size(0));
  check_outputs_alias_nothing(
      {{&compress_cos, {"compress_cos"}}, {&compress_sin, {"compress_sin"}}, {&slot_mapping, {"slot_mapping"}}},
      {{&rope_cos, {"rope_cos"}}, {&rope_sin, {"rope_sin"}}, {&cu_seqlens, {"cu_seqlens"}},
       {&start_pos, {"start_pos"}}, {&kv_block_table, {"kv_block_table"}}});

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

TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("compressor_metadata", &compressor_metadata); }

}  // namespace specops::cpu
