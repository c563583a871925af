#pragma once
// Host mirror of correct_num_computed_tokens (docs/async_accounting.md).
//
// The scheduler's seq_lens assume the previous step accepted every draft; a row that continues
// a drafting row of the previous step gives back the drafts that were rejected:
// prev_num_draft_tokens[p] + 1 - valid_sampled_token_count[p]. Two passes like the device
// correction, so every read sees the values from before the call even if buffers alias.
#include <cstdint>
#include <type_traits>

#include "kernels/correct_num_computed_tokens.h"

namespace specops::kernels {

// The drafts given back, prev_drafts + 1 - valid, as the peer's numpy computes it: prev_drafts + 1
// in int32 (an int32 array plus a Python int stays int32), the difference in the width of the
// valid counts (int32 or int64: vllm-ascend's host copy is int64), both wrapping.
template <typename ValidT>
inline ValidT rejected_drafts(int32_t prev_drafts, ValidT valid) {
  using Unsigned = std::make_unsigned_t<ValidT>;
  const int32_t scheduled = wrapping_add(prev_drafts, 1);
  return static_cast<ValidT>(static_cast<Unsigned>(static_cast<ValidT>(scheduled)) - static_cast<Unsigned>(valid));
}

// seq_len - rejected, in the width of SeqT (int32 or int64: runners keep int64 host copies),
// wrapping as the device kernels, torch and numpy do: the rejected count is first cast to
// SeqT (its low bits, or sign-extended), as the peer's astype(seq_lens.dtype).
template <typename SeqT, typename RejectedT>
inline SeqT wrapping_seq_sub(SeqT seq_len, RejectedT rejected) {
  using Unsigned = std::make_unsigned_t<SeqT>;
  return static_cast<SeqT>(static_cast<Unsigned>(seq_len) - static_cast<Unsigned>(static_cast<SeqT>(rejected)));
}

// scratch holds num_rows SeqT; num_previous_rows = min(len(valid), len(prev_num_draft_tokens)).
template <typename PrevT, typename ValidT, typename SeqT>
void correct_optimistic_seq_lens(SeqT* seq_lens, const PrevT* prev_positions, const ValidT* valid_sampled_token_count,
                                 const int32_t* prev_num_draft_tokens, SeqT* scratch, const CountCorrectionShape& s) {
  for (int64_t i = 0; i < s.num_rows; ++i) {
    const int64_t row = continued_row(prev_positions[i], s.num_previous_rows, prev_num_draft_tokens);
    SeqT seq_len = seq_lens[i];
    if (row >= 0) {
      seq_len = wrapping_seq_sub(seq_len, rejected_drafts(prev_num_draft_tokens[row], valid_sampled_token_count[row]));
    }
    scratch[i] = seq_len;
  }
  for (int64_t i = 0; i < s.num_rows; ++i) seq_lens[i] = scratch[i];
}

}  // namespace specops::kernels
