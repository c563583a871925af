#pragma once
// Correction of the device's token counts under async spec-decode scheduling (docs/async_accounting.md).
//
// With async scheduling, step N+1 is scheduled before step N's acceptance is known, so the
// scheduler's counts assume every draft was accepted. The device count is authoritative: row i
// of the new batch continues row p = prev_positions[i] of the previous batch, whose count was
// kept in the same buffer in the previous layout.
//
// Rows move between layouts (row i reads row p, which another row may overwrite), so the
// correction runs in two passes: gather every new value into scratch, then store. Every read
// therefore sees the values from before the call, whatever the permutation and whichever
// input aliases an output.
#include <cstdint>

namespace specops::kernels {

struct CountCorrectionShape {
  int64_t num_rows = 0;           // n = prev_positions.numel()
  int64_t num_previous_rows = 0;  // min of the lengths a previous row indexes (see continued_row)
};

// The previous row whose device count row i continues, or -1 when row i takes the host value:
// the request is new, resumed, was a partial prefill, ran without drafts (the scheduler's count
// is then exact), or names a row past the previous buffers. Out-of-range rows are never read.
template <typename PrevT>
inline int64_t continued_row(PrevT prev_position, int64_t num_previous_rows, const int32_t* prev_num_draft_tokens) {
  const int64_t row = static_cast<int64_t>(prev_position);
  if (row < 0 || row >= num_previous_rows) return -1;
  return prev_num_draft_tokens[row] > 0 ? row : -1;
}

// A count as the int32 the correction computes with: an int64 count (vllm-ascend's valid counts
// are int64, a runner may keep int64 host counts) by its low 32 bits, as the peer's `.int()` and
// its copy into the int32 outputs take it.
template <typename CountT>
inline int32_t as_int32_count(CountT count) {
  return static_cast<int32_t>(static_cast<uint32_t>(count));
}

// int32 arithmetic that wraps like torch's and Triton's int32 ops, without signed overflow.
inline int32_t wrapping_add(int32_t a, int32_t b) {
  return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
}
inline int32_t wrapping_sub(int32_t a, int32_t b) {
  return static_cast<int32_t>(static_cast<uint32_t>(a) - static_cast<uint32_t>(b));
}

// Pass 1: the new count and accepted count of every row i < n, read-only on every buffer.
// valid_sampled_token_count and cpu_num_computed_tokens are int32 or int64 (ValidT, HostT).
template <typename PrevT, typename ValidT, typename HostT>
void gather_corrected_counts(const int32_t* num_computed_tokens, const int32_t* num_accepted_tokens,
                             const PrevT* prev_positions, const ValidT* valid_sampled_token_count,
                             const int32_t* prev_num_draft_tokens, const HostT* cpu_num_computed_tokens,
                             int32_t* new_computed, int32_t* new_accepted, const CountCorrectionShape& s) {
  for (int64_t i = 0; i < s.num_rows; ++i) {
    const int64_t row = continued_row(prev_positions[i], s.num_previous_rows, prev_num_draft_tokens);
    if (row >= 0) {
      const int32_t valid = as_int32_count(valid_sampled_token_count[row]);
      new_computed[i] = wrapping_add(num_computed_tokens[row], valid);
      new_accepted[i] = valid;
    } else {
      new_computed[i] = as_int32_count(cpu_num_computed_tokens[i]);
      new_accepted[i] = num_accepted_tokens[i];  // unchanged
    }
  }
}

// Pass 2: the stores, after every read of pass 1.
inline void store_corrected_counts(const int32_t* new_computed, const int32_t* new_accepted,
                                   int32_t* num_computed_tokens, int32_t* num_accepted_tokens, int64_t num_rows) {
  for (int64_t i = 0; i < num_rows; ++i) num_computed_tokens[i] = new_computed[i];
  for (int64_t i = 0; i < num_rows; ++i) num_accepted_tokens[i] = new_accepted[i];
}

// scratch holds 2 * num_rows int32.
template <typename PrevT, typename ValidT, typename HostT>
void correct_num_computed_tokens(int32_t* num_computed_tokens, int32_t* num_accepted_tokens, const PrevT* prev_positions,
                                 const ValidT* valid_sampled_token_count, const int32_t* prev_num_draft_tokens,
                                 const HostT* cpu_num_computed_tokens, int32_t* scratch,
                                 const CountCorrectionShape& s) {
  int32_t* new_computed = scratch;
  int32_t* new_accepted = scratch + s.num_rows;
  gather_corrected_counts(num_computed_tokens, num_accepted_tokens, prev_positions, valid_sampled_token_count,
                          prev_num_draft_tokens, cpu_num_computed_tokens, new_computed, new_accepted, s);
  store_corrected_counts(new_computed, new_accepted, num_computed_tokens, num_accepted_tokens, s.num_rows);
}

}  // namespace specops::kernels
