#pragma once
// The KV slots of the PCP-gathered stream for one KV-cache group: the global batch's slot
// mapping permuted into the gathered order, every copy that does not write its KV masked.
//
//   out[j] = slots[gather[j]] if write_mask[j] else PAD      j < J = P L
//   out[j] = PAD                                             J <= j < num_out
//
// A masked-in gather index outside `slots` (the host op rejects it) writes PAD.
#include <algorithm>
#include <cstdint>

namespace specops::kernels {

template <typename SlotT>
void pcp_gathered_slot_mapping(const SlotT* slots, int64_t num_slots, const int64_t* gather, const bool* write_mask,
                               int64_t num_gathered, SlotT* out, int64_t num_out) {
  constexpr SlotT kPad = -1;
  const int64_t real = std::min(num_gathered, num_out);
  for (int64_t j = 0; j < real; ++j) {
    const int64_t index = gather[j];
    out[j] = write_mask[j] && index >= 0 && index < num_slots ? slots[index] : kPad;
  }
  std::fill(out + real, out + num_out, kPad);
}

}  // namespace specops::kernels
