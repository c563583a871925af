#pragma once
// compressor_metadata's metadata checks of one group, shared with compressor_metadata_multi,
// which checks every group so (naming the group's entries: kv_block_tables[1]) with the steps'
// leading dimension S on every output.
#include <optional>
#include <sstream>
#include <string>

#include "cpu/checks.h"
#include "kernels/compressor_metadata.h"

namespace specops::cpu {

// How the messages name one group's arguments: the single op's names, or group g's list entries.
struct CompressorNames {
  ArgName rope_cos{"rope_cos"}, rope_sin{"rope_sin"}, kv_block_table{"kv_block_table"},
      kv_block_size{"kv_block_size"}, slot_mapping_format{"slot_mapping_format"}, compress_ratio{"compress_ratio"},
      compress_cos{"compress_cos"}, compress_sin{"compress_sin"}, slot_mapping{"slot_mapping"};

  static CompressorNames of_group(int64_t g) {
    return {{"rope_cos", g},           {"rope_sin", g},        {"kv_block_tables", g},
            {"kv_block_sizes", g},     {"slot_mapping_formats", g}, {"compress_ratios", g},
            {"compress_cos", g},       {"compress_sin", g},    {"slot_mappings", g}};
  }
};

// A shape as the messages print it: [a, b].
inline std::string shape_text(const at::Tensor& t) {
  std::ostringstream text;
  text << t.sym_sizes();
  return text.str();
}

// One group's metadata but its table's rows (checked after num_reqs_actual's own checks).
// steps: S, the leading dimension of every output (compressor_metadata_multi), or none; dtype:
// the dtype rope_cos must have (compressor_metadata_multi's later groups: rope_cos[0]'s), or any
// float; anchor: the call's device, or none (rope_cos sets it).
template <typename Int>
void check_compressor_group(const at::Tensor& rope_cos, const at::Tensor& rope_sin, const at::Tensor& kv_block_table,
                            int64_t kv_block_size, int64_t slot_mapping_format, int64_t compress_ratio,
                            const at::Tensor& compress_cos, const at::Tensor& compress_sin,
                            const at::Tensor& slot_mapping, const CompressorNames& n,
                            const std::optional<Int>& steps, std::optional<c10::ScalarType> dtype,
                            const Anchor* anchor) {
  namespace cm = kernels::compressor;
  if (dtype.has_value()) {
    check_tensor(rope_cos, n.rope_cos, {*dtype}, 2, anchor);
  } else {
    check_tensor(rope_cos, n.rope_cos, {c10::kFloat, c10::kBFloat16, c10::kHalf}, 2, anchor);
  }
  const Anchor device = anchor != nullptr ? *anchor : anchor_of(rope_cos, "rope_cos");
  const c10::ScalarType floats = rope_cos.scalar_type();
  for (const auto& [name, t] : {std::pair{n.rope_sin, &rope_sin}, std::pair{n.compress_cos, &compress_cos},
                                std::pair{n.compress_sin, &compress_sin}}) {
    TORCH_CHECK_VALUE(!t->defined() || t->scalar_type() == floats, name, " must have ", n.rope_cos, "'s dtype ",
                      dtype_name(floats), ", got ", dtype_name(t->scalar_type()));
  }
  const int64_t lead = steps.has_value() ? 1 : 0;
  check_tensor(rope_sin, n.rope_sin, {floats}, 2, device);
  TORCH_CHECK_VALUE(rope_sin.sym_sizes() == rope_cos.sym_sizes(), n.rope_sin, " must have ", n.rope_cos, "'s shape ",
                    rope_cos.sym_sizes(), ", got ", rope_sin.sym_sizes());
  TORCH_CHECK_VALUE(stride_of<Int>(rope_sin, 0) == stride_of<Int>(rope_cos, 0), n.rope_sin, " must have ", n.rope_cos,
                    "'s row stride ", stride_of<Int>(rope_cos, 0), ", got ", stride_of<Int>(rope_sin, 0));
  check_tensor(kv_block_table, n.kv_block_table, {c10::kInt}, 2, device);
  check_tensor(compress_cos, n.compress_cos, {floats}, 4 + lead, device);
  check_tensor(compress_sin, n.compress_sin, {floats}, 4 + lead, device);
  TORCH_CHECK_VALUE(compress_cos.is_contiguous() && compress_sin.is_contiguous(), n.compress_cos, " and ",
                    n.compress_sin, " must be contiguous");
  std::ostringstream steps_text;
  if (steps.has_value()) steps_text << "S = " << *steps << ", ";
  const Int num_rows = size_of<Int>(compress_cos, lead);
  const Int rope_dim = size_of<Int>(rope_cos, 1);
  TORCH_CHECK_VALUE((!steps.has_value() || size_of<Int>(compress_cos, 0) == *steps) &&
                        size_of<Int>(compress_cos, lead + 1) == 1 && size_of<Int>(compress_cos, lead + 2) == 1 &&
                        size_of<Int>(compress_cos, lead + 3) == rope_dim,
                    n.compress_cos, " must have shape [", steps_text.str(), "N, 1, 1, ", rope_dim, "], got ",
                    compress_cos.sym_sizes());
  TORCH_CHECK_VALUE(compress_sin.sym_sizes() == compress_cos.sym_sizes(), n.compress_sin, " must have ",
                    n.compress_cos, "'s shape ", compress_cos.sym_sizes(), ", got ", compress_sin.sym_sizes());
  TORCH_CHECK_VALUE(slot_mapping_format == cm::kFormatFlat || slot_mapping_format == cm::kFormatBlockOffset,
                    n.slot_mapping_format, " must be 1 (flat) or 2 (block, offset), got ", slot_mapping_format);
  const bool flat = slot_mapping_format == cm::kFormatFlat;
  check_tensor(slot_mapping, n.slot_mapping, {c10::kInt}, (flat ? 1 : 2) + lead, device);
  const bool rows_match = (!steps.has_value() || size_of<Int>(slot_mapping, 0) == *steps) &&
                          size_of<Int>(slot_mapping, lead) == num_rows &&
                          (flat || size_of<Int>(slot_mapping, lead + 1) == 2) && slot_mapping.is_contiguous();
  if (flat && !steps.has_value()) {
    TORCH_CHECK_VALUE(rows_match, n.slot_mapping, " must have N = ", num_rows, " rows, got ", shape_text(slot_mapping));
  } else {
    TORCH_CHECK_VALUE(rows_match, n.slot_mapping, " must be a contiguous [", steps_text.str(), "N = ", num_rows,
                      flat ? "" : ", 2", "] tensor, got ", shape_text(slot_mapping));
  }
  for (const auto& [name, value] : {std::pair{n.kv_block_size, kv_block_size}, std::pair{n.compress_ratio, compress_ratio}}) {
    check_positive(value, name);
    TORCH_CHECK_VALUE(value <= cm::kInt32Max, name, " must fit int32, got ", value);
  }
}

// num_reqs_actual against the entries (the columns, for compressor_metadata_multi's rows of
// steps) of cu_seqlens and start_pos.
template <typename Int>
void check_compressor_requests(const at::Tensor& cu_seqlens, const at::Tensor& start_pos, int64_t num_reqs_actual) {
  check_non_negative(num_reqs_actual, "num_reqs_actual");
  const Int cu_entries = size_of<Int>(cu_seqlens, cu_seqlens.dim() - 1);
  const Int start_entries = size_of<Int>(start_pos, start_pos.dim() - 1);
  // num_reqs_actual + 1 without overflow: a count of INT64_MAX needs 2^63 entries.
  TORCH_CHECK_VALUE(num_reqs_actual < INT64_MAX && cu_entries >= num_reqs_actual + 1,
                    "cu_seqlens must have at least num_reqs_actual + 1 = ", one_more(num_reqs_actual),
                    " entries, got ", cu_entries);
  TORCH_CHECK_VALUE(start_entries >= num_reqs_actual, "start_pos must have at least num_reqs_actual = ",
                    num_reqs_actual, " entries, got ", start_entries);
}

// A group's table holds a row for every request.
template <typename Int, typename Name>
void check_compressor_table_rows(const at::Tensor& kv_block_table, const Name& name, int64_t num_reqs_actual) {
  TORCH_CHECK_VALUE(size_of<Int>(kv_block_table, 0) >= num_reqs_actual, name, " must have at least num_reqs_actual = ",
                    num_reqs_actual, " rows, got ", size_of<Int>(kv_block_table, 0));
}

}  // namespace specops::cpu
