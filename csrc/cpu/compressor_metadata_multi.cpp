// compressor_metadata_multi: its metadata checks (the steps and every group, compressor_metadata's
// checks naming the group's entry; the Meta kernel, and every backend's first step), then the CPU
// op: the checks, then every group's rows of every step; nothing is written before every check passed.
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu/compressor_checks.h"
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

template <typename Int>
void check_compressor_metadata_multi(at::TensorList rope_cos, at::TensorList rope_sin, const at::Tensor& cu_seqlens,
                                     const at::Tensor& start_pos, at::TensorList kv_block_tables,
                                     c10::IntArrayRef kv_block_sizes, c10::IntArrayRef slot_mapping_formats,
                                     c10::IntArrayRef compress_ratios, int64_t num_reqs_actual,
                                     at::TensorList compress_cos, at::TensorList compress_sin,
                                     at::TensorList slot_mappings) {
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
  const Anchor anchor = anchor_of(cu_seqlens, "cu_seqlens");
  check_tensor(start_pos, "start_pos", {c10::kInt}, 2, anchor);
  const Int num_steps = size_of<Int>(cu_seqlens, 0);
  TORCH_CHECK_VALUE(size_of<Int>(start_pos, 0) == num_steps, "start_pos must have cu_seqlens's S = ", num_steps,
                    " rows, got ", size_of<Int>(start_pos, 0));
  check_compressor_requests<Int>(cu_seqlens, start_pos, num_reqs_actual);
  for (size_t g = 0; g < num_groups; ++g) {
    const auto index = static_cast<int64_t>(g);
    check_compressor_group<Int>(rope_cos[g], rope_sin[g], kv_block_tables[g], kv_block_sizes[g],
                                slot_mapping_formats[g], compress_ratios[g], compress_cos[g], compress_sin[g],
                                slot_mappings[g], CompressorNames::of_group(index), std::optional<Int>(num_steps),
                                g == 0 ? std::nullopt : std::optional<c10::ScalarType>(rope_cos[0].scalar_type()),
                                &anchor);
    check_compressor_table_rows<Int>(kv_block_tables[g], ArgName{"kv_block_tables", index}, num_reqs_actual);
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
}

void compressor_metadata_multi(at::TensorList rope_cos, at::TensorList rope_sin, const at::Tensor& cu_seqlens,
                               const at::Tensor& start_pos, at::TensorList kv_block_tables,
                               c10::IntArrayRef kv_block_sizes, c10::IntArrayRef slot_mapping_formats,
                               c10::IntArrayRef compress_ratios, int64_t num_reqs_actual, at::TensorList compress_cos,
                               at::TensorList compress_sin, at::TensorList slot_mappings) {
  check_compressor_metadata_multi<int64_t>(rope_cos, rope_sin, cu_seqlens, start_pos, kv_block_tables, kv_block_sizes,
                                           slot_mapping_formats, compress_ratios, num_reqs_actual, compress_cos,
                                           compress_sin, slot_mappings);
  const size_t num_groups = rope_cos.size();
  const int64_t num_steps = cu_seqlens.size(0);
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

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  // compressor_metadata for every group g and step s at once (one launch): group g's RoPE tables,
  // block table, block size, format and ratio; step s's row of cu_seqlens [S, >= R + 1] and
  // start_pos [S, >= R]; into step s of compress_cos[g] / compress_sin[g] [S, N_g, 1, 1, D_g] and
  // slot_mappings[g] [S, N_g] (format 1) or [S, N_g, 2] (format 2).
  m.def(
      "compressor_metadata_multi(Tensor[] rope_cos, Tensor[] rope_sin, Tensor cu_seqlens, Tensor start_pos, "
      "Tensor[] kv_block_tables, int[] kv_block_sizes, int[] slot_mapping_formats, int[] compress_ratios, "
      "int num_reqs_actual, Tensor(a!)[] compress_cos, Tensor(b!)[] compress_sin, Tensor(c!)[] slot_mappings) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("compressor_metadata_multi", &compressor_metadata_multi); }
TORCH_LIBRARY_IMPL(specops, Meta, m) {
  m.impl("compressor_metadata_multi", &check_compressor_metadata_multi<c10::SymInt>);
}

}  // namespace specops::cpu
