// pcp_gathered_slot_mappings: its metadata checks (the Meta kernel, and every backend's first step),
// then the CPU op: the checks and every group's values before the first write, then the body once
// per group.
#include <torch/library.h>

#include <vector>

#include "cpu/checks.h"
#include "kernels/pcp_gathered_slot_mappings.h"

namespace specops::cpu {
namespace {

template <typename SlotT>
void run(const at::Tensor& slots, const at::Tensor& gather, const at::Tensor& mask, const at::Tensor& out,
         int64_t num_out) {
  kernels::pcp_gathered_slot_mapping<SlotT>(slots.data_ptr<SlotT>(), slots.numel(), gather.data_ptr<int64_t>(),
                                            mask.data_ptr<bool>(), gather.numel(), out.data_ptr<SlotT>(), num_out);
}

template <typename Int>
void check_pcp_gathered_slot_mappings(at::TensorList slot_mappings, const at::Tensor& padded_gather_idx,
                                      const at::Tensor& gathered_kv_write_mask, at::TensorList out,
                                      int64_t num_tokens_padded) {
  check_tensor(padded_gather_idx, "padded_gather_idx", {c10::kLong}, 1);
  const Anchor anchor = anchor_of(padded_gather_idx, "padded_gather_idx");
  check_tensor(gathered_kv_write_mask, "gathered_kv_write_mask", {c10::kBool}, 1, anchor);
  const Int J = numel_of<Int>(padded_gather_idx);
  TORCH_CHECK_VALUE(numel_of<Int>(gathered_kv_write_mask) == J, "gathered_kv_write_mask must have as many entries as ",
                    "padded_gather_idx (", J, "), got ", numel_of<Int>(gathered_kv_write_mask));
  const int64_t G = static_cast<int64_t>(slot_mappings.size());
  TORCH_CHECK_VALUE(static_cast<int64_t>(out.size()) == G, "out must have one buffer per tensor of slot_mappings (", G,
                    "), got ", out.size());
  TORCH_CHECK_VALUE(num_tokens_padded >= -1, "num_tokens_padded must be >= 0 (or None), got ", num_tokens_padded);
  std::vector<NamedTensor> outputs;
  std::vector<NamedTensor> inputs = {{&padded_gather_idx, {"padded_gather_idx"}},
                                     {&gathered_kv_write_mask, {"gathered_kv_write_mask"}}};
  for (int64_t g = 0; g < G; ++g) {
    const ArgName slots_name{"slot_mappings", g};
    const ArgName out_name{"out", g};
    check_tensor(slot_mappings[g], slots_name, {c10::kLong, c10::kInt}, 1, anchor);
    check_tensor(out[g], out_name, {c10::kLong, c10::kInt}, 1, anchor);
    TORCH_CHECK_VALUE(out[g].scalar_type() == slot_mappings[g].scalar_type(), out_name, " must have the dtype of ",
                      slots_name, " (", dtype_name(slot_mappings[g].scalar_type()), "), got ",
                      dtype_name(out[g].scalar_type()));
    TORCH_CHECK_VALUE(numel_of<Int>(out[g]) >= J, out_name, " must have at least P L = padded_gather_idx.numel() = ", J,
                      " entries, got ", numel_of<Int>(out[g]));
    if (num_tokens_padded >= 0) {
      TORCH_CHECK_VALUE(num_tokens_padded >= J && numel_of<Int>(out[g]) >= num_tokens_padded,
                        "num_tokens_padded must be in [P L = padded_gather_idx.numel() = ", J, ", ", out_name,
                        ".numel() = ", numel_of<Int>(out[g]), "], got ", num_tokens_padded);
    }
    outputs.push_back({&out[g], out_name});
    inputs.push_back({&slot_mappings[g], slots_name});
  }
  check_outputs_alias_nothing(outputs, inputs);
}

void pcp_gathered_slot_mappings(at::TensorList slot_mappings, const at::Tensor& padded_gather_idx,
                                const at::Tensor& gathered_kv_write_mask, at::TensorList out,
                                int64_t num_tokens_padded) {
  check_pcp_gathered_slot_mappings<int64_t>(slot_mappings, padded_gather_idx, gathered_kv_write_mask, out,
                                            num_tokens_padded);
  const int64_t J = padded_gather_idx.numel();
  const int64_t G = static_cast<int64_t>(slot_mappings.size());
  const int64_t* gather = padded_gather_idx.data_ptr<int64_t>();
  const bool* mask = gathered_kv_write_mask.data_ptr<bool>();
  for (int64_t j = 0; j < J; ++j) {
    if (!mask[j]) continue;
    TORCH_CHECK_VALUE(gather[j] >= 0, "padded_gather_idx[", j, "] = ", gather[j], " must be >= 0 where it writes");
    for (int64_t g = 0; g < G; ++g) {
      TORCH_CHECK_VALUE(gather[j] < slot_mappings[g].numel(), "padded_gather_idx[", j, "] = ", gather[j],
                        " is past slot_mappings[", g, "] (", slot_mappings[g].numel(), " entries)");
    }
  }
  for (int64_t g = 0; g < G; ++g) {
    const int64_t num_out = num_tokens_padded >= 0 ? num_tokens_padded : out[g].numel();
    if (out[g].scalar_type() == c10::kLong) {
      run<int64_t>(slot_mappings[g], padded_gather_idx, gathered_kv_write_mask, out[g], num_out);
    } else {
      run<int32_t>(slot_mappings[g], padded_gather_idx, gathered_kv_write_mask, out[g], num_out);
    }
  }
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  // num_tokens_padded -1: every buffer padded to its own end.
  m.def(
      "pcp_gathered_slot_mappings(Tensor[] slot_mappings, Tensor padded_gather_idx, Tensor gathered_kv_write_mask, "
      "Tensor(a!)[] out, int num_tokens_padded) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("pcp_gathered_slot_mappings", &pcp_gathered_slot_mappings); }
TORCH_LIBRARY_IMPL(specops, Meta, m) {
  m.impl("pcp_gathered_slot_mappings", &check_pcp_gathered_slot_mappings<c10::SymInt>);
}

}  // namespace specops::cpu
