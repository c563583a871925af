// CPU op for compressor_metadata_multi: validates the steps and every group (compressor_metadata's
// checks, naming the group's entry), then writes every group's rows of every step; nothing is
// written before every check passed.
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu/checks.h"
#include "kernels/compressor_metadata_multi.h"

namespace specops::cpu {
namespace {

namespace cm = kernels::compressor;

// One row of `value` (1 or 0) in a float dtype: float32, bfloat16 or float16 bit patterns.
std::vector<unsigned char> fill_row(c10::ScalarType dtype, int64_t rope_dim, bool one) {
  const int64_t element = static_cast<int64_t>(c10::elementSize(dtype));
  const uint32_t bits = !one ? 0u : dtype == c10::kFloat ? 0x3f800000u : dtype == c10::kBFloat16 ? 0x3f80u : 0x3c00u;
  std::vector<unsigned char> row(static_cast<size_t>(rope_dim * element));
  for (int64_t d = 0; d < rope_dim; ++d) std::memcpy(row.data() + d * element, &bits, static_cast<size_t>(element));
  return row;
}

// compressor_metadata's checks of group g (python/specops/ops/compressor_metadata.py, check_group).
void check_group(const at::Tensor& rope_cos, const at::Tensor& rope_sin, const at::Tensor& table, int64_t block_size,
                 int64_t format, int64_t ratio, int64_t num_reqs, const at::Tensor& out_cos, const at::Tensor& out_sin,
                 const at::Tensor& slots, int64_t g, int64_t num_steps, c10::ScalarType dtype) {
  const ArgName cos_name{"rope_cos", g}, sin_name{"rope_sin", g}, table_name{"kv_block_tables", g};
  const ArgName out_cos_name{"compress_cos", g}, out_sin_name{"compress_sin", g}, slots_name{"slot_mappings", g};
  if (g == 0) {
    check_tensor(rope_cos, cos_name, {c10::kFloat, c10::kBFloat16, c10::kHalf}, 2);
  } else {
    check_tensor(rope_cos, cos_name, {dtype}, 2);
  }
  for (const auto& [name, t] : {std::pair{sin_name, &rope_sin}, std::pair{out_cos_name, &out_cos},
                                std::pair{out_sin_name, &out_sin}}) {
    TORCH_CHECK_VALUE(!t->defined() || t->scalar_type() == rope_cos.scalar_type(), name, " must have ", cos_name,
                      "'s dtype ", dtype_name(rope_cos.scalar_type()), ", got ", dtype_name(t->scalar_type()));
  }
  check_tensor(rope_sin, sin_name, {rope_cos.scalar_type()}, 2);
  TORCH_CHECK_VALUE(rope_sin.sizes() == rope_cos.sizes(), sin_name, " must have ", cos_name, "'s shape ",
                    rope_cos.sizes(), ", got ", rope_sin.sizes());
  TORCH_CHECK_VALUE(rope_sin.stride(0) == rope_cos.stride(0), sin_name, " must have ", cos_name, "'s row stride ",
                    rope_cos.stride(0), ", got ", rope_sin.stride(0));
  check_tensor(table, table_name, {c10::kInt}, 2);
  check_tensor(out_cos, out_cos_name, {rope_cos.scalar_type()}, 5);
  check_tensor(out_sin, out_sin_name, {rope_cos.scalar_type()}, 5);
  TORCH_CHECK_VALUE(out_cos.is_contiguous() && out_sin.is_contiguous(), out_cos_name, " and ", out_sin_name,
                    " must be contiguous");
  const int64_t num_rows = out_cos.size(1);
  const int64_t rope_dim = rope_cos.size(1);
  const std::vector<int64_t> row_shape{num_steps, num_rows, 1, 1, rope_dim};
  TORCH_CHECK_VALUE(out_cos.sizes() == c10::IntArrayRef(row_shape), out_cos_name, " must have shape [S = ", num_steps,
                    ", N, 1, 1, ", rope_dim, "], got ", out_cos.sizes());
  TORCH_CHECK_VALUE(out_sin.sizes() == out_cos.sizes(), out_sin_name, " must have ", out_cos_name, "'s shape ",
                    out_cos.sizes(), ", got ", out_sin.sizes());
  TORCH_CHECK_VALUE(format == cm::kFormatFlat || format == cm::kFormatBlockOffset, ArgName{"slot_mapping_formats", g},
                    " must be 1 (flat) or 2 (block, offset), got ", format);
  if (format == cm::kFormatFlat) {
    check_tensor(slots, slots_name, {c10::kInt}, 2);
    TORCH_CHECK_VALUE(slots.size(0) == num_steps && slots.size(1) == num_rows && slots.is_contiguous(), slots_name,
                      " must be a contiguous [S = ", num_steps, ", N = ", num_rows, "] tensor, got ", slots.sizes());
  } else {
    check_tensor(slots, slots_name, {c10::kInt}, 3);
    TORCH_CHECK_VALUE(slots.size(0) == num_steps && slots.size(1) == num_rows && slots.size(2) == 2 &&
                          slots.is_contiguous(),
                      slots_name, " must be a contiguous [S = ", num_steps, ", N = ", num_rows, ", 2] tensor, got ",
                      slots.sizes());
  }
  for (const auto& [name, value] : {std::pair{ArgName{"kv_block_sizes", g}, block_size},
                                    std::pair{ArgName{"compress_ratios", g}, ratio}}) {
    check_positive(value, name);
    TORCH_CHECK_VALUE(value <= cm::kInt32Max, name, " must fit int32, got ", value);
  }
  TORCH_CHECK_VALUE(table.size(0) >= num_reqs, table_name, " must have at least num_reqs_actual = ", num_reqs,
                    " rows, got ", table.size(0));
}

void compressor_metadata_multi(at::TensorList rope_cos, at::TensorList rope_sin, const at::Tensor& cu_seqlens,
                               const at::Tensor& start_pos, at::TensorList kv_block_tables,
                               c10::IntArrayRef kv_block_sizes, c10::IntArrayRef slot_mapping_formats,
                               c10::IntArrayRef compress_ratios, int64_t num_reqs_actual, at::TensorList compress_cos,
                               at::TensorList compress_sin, at::TensorList slot_mappings) {
  const size_t num_groups = rope_cos.size();
  for (const auto& [values, name] :
       {std::pair{rope_sin.size(), "rope_sin"}, std::pair{kv_block_tables.size(), "kv_block_tables"},
        std::pair{kv_block_sizes.size(), "kv_block_sizes"},
        std::pair{slot_mapping_formats.size(), "slot_mapping_formats"},
        std::pair{compress_ratios.size(), "compress_ratios"}, std::pair{compress_cos.size(), "compress_cos"},
        std::pair{compress_sin.size(), "compress_sin"}, std::pair{slot_mappings.size(), "slot_mappings"}}) {
    TORCH_CHECK_VALUE(values == num_groups, name, " must have one entry per group (len(rope_cos) = ", num_groups,
                      "), got ", values);
  }
  check_tensor(cu_seqlens, "cu_seqlens", {c10::kInt}, 2);
  check_tensor(start_pos, "start_pos", {c10::kInt}, 2);
  const int64_t num_steps = cu_seqlens.size(0);
  TORCH_CHECK_VALUE(start_pos.size(0) == num_steps, "start_pos must have cu_seqlens's S = ", num_steps, " rows, got ",
                    start_pos.size(0));
  check_non_negative(num_reqs_actual, "num_reqs_actual");
  TORCH_CHECK_VALUE(static_cast<uint64_t>(cu_seqlens.size(1)) >= one_more(num_reqs_actual),
                    "cu_seqlens must have at least num_reqs_actual + 1 = ", one_more(num_reqs_actual),
                    " entries, got ", cu_seqlens.size(1));
  TORCH_CHECK_VALUE(start_pos.size(1) >= num_reqs_actual, "start_pos must have at least num_reqs_actual = ",
                    num_reqs_actual, " entries, got ", start_pos.size(1));
  for (size_t g = 0; g < num_groups; ++g) {
    check_group(rope_cos[g], rope_sin[g], kv_block_tables[g], kv_block_sizes[g], slot_mapping_formats[g],
                compress_ratios[g], num_reqs_actual, compress_cos[g], compress_sin[g], slot_mappings[g],
                static_cast<int64_t>(g), num_steps, rope_cos[0].scalar_type());
  }
  // Every output is written once, and every input is read while outputs are written.
  std::vector<NamedTensor> outputs, inputs{{&cu_seqlens, {"cu_seqlens"}}, {&start_pos, {"start_pos"}}};
  for (size_t g = 0; g < num_groups; ++g) {
    const auto index = static_cast<int64_t>(g);
    outputs.push_back({&compress_cos[g], {"compress_cos", index}});
    outputs.push_back({&compress_sin[g], {"compress_sin", index}});
    outputs.push_back({&slot_mappings[g], {"slot_mappings", index}});
    inputs.push_back({&rope_cos[g], {"rope_cos", index}});
    inputs.push_back({&rope_sin[g], {"rope_sin", index}});
    inputs.push_back({&kv_block_tables[g], {"kv_block_tables", index}});
  }
  check_outputs_alias_nothing(outputs, inputs);

  std::vector<std::vector<unsigned char>> fills;
  c10::SmallVector<cm::Group, 4> groups(num_groups);
  for (size_t g = 0; g < num_groups; ++g) {
    const at::Tensor& cos = rope_cos[g];
    const at::Tensor& table = kv_block_tables[g];
    const int64_t element = static_cast<int64_t>(cos.element_size());
    fills.push_back(fill_row(cos.scalar_type(), cos.size(1), true));
    fills.push_back(fill_row(cos.scalar_type(), cos.size(1), false));
    groups[g] = cm::Group{
        cm::Inputs{nullptr, nullptr, table.data_ptr<int32_t>(), table.stride(0), table.size(1), kv_block_sizes[g],
                   compress_ratios[g], num_reqs_actual, cos.size(0), slot_mapping_formats[g]},
        static_cast<const unsigned char*>(cos.data_ptr()), static_cast<const unsigned char*>(rope_sin[g].data_ptr()),
        cos.stride(0) * element, cos.size(1) * element, nullptr, nullptr, compress_cos[g].size(1),
        static_cast<unsigned char*>(compress_cos[g].data_ptr()),
        static_cast<unsigned char*>(compress_sin[g].data_ptr()),
        slot_mappings[g].data_ptr<int32_t>()};
  }
  for (size_t g = 0; g < num_groups; ++g) {  // the fills no longer move
    groups[g].cos_one = fills[2 * g].data();
    groups[g].sin_zero = fills[2 * g + 1].data();
  }
  cm::compressor_metadata_multi(groups.data(), static_cast<int64_t>(num_groups), cu_seqlens.data_ptr<int32_t>(),
                                cu_seqlens.stride(0), start_pos.data_ptr<int32_t>(), start_pos.stride(0), num_steps);
}

}  // namespace

TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("compressor_metadata_multi", &compressor_metadata_multi); }

}  // namespace specops::cpu
