#pragma once
// The draft model's prefill inputs after a target step (vLLM model runner V2's speculator,
// `prepare_prefill_inputs`): every request's target tokens shifted left by one with the next
// token appended, the kept positions, the draft's query layout and, fused in, the drafter's copy
// of the request mapping.
//
//   s = qsl[r], qlen = max(qsl[r+1] - s, 0), q = clamp(qlen - num_rejected[r], 0, qlen)
//   next            = last_sampled[row] if num_sampled[r] > 0 else next_prefill[row]  (row = idx_mapping[r];
//                     -1 for a row outside [0, num_rows))
//   input_ids[s + j - 1] = target_input_ids[s + j]      1 <= j < q
//   input_ids[s + q - 1] = next                         q >= 1
//   positions[s + j]     = target_positions[s + j]      0 <= j < q
//   last_token_indices[r] = s + q - 1, out_qsl[r] = s, out_seq_lens[r] = seq_lens[r]
//   past R: out_qsl = qsl[R], out_seq_lens = 0, last_token_indices = 0, request_idx_mapping = -1
//
// On valid input (q >= 1, rows in range, qsl from 0 non-decreasing, T inside every token
// buffer) this is vLLM's result exactly; the clamps and the token bounds below are what the
// device kernels do with values the host op rejects, so every token access stays inside its
// buffer whatever the values. Tokens of a request past q (the rejected ones) and past T are not
// written.
#include <algorithm>
#include <cstdint>

namespace specops::kernels {

// A 1-D int32 or int64 tensor's elements (the op takes either dtype for several arguments).
struct IntSpan {
  void* data = nullptr;
  bool wide = false;  // int64 elements
  int64_t size = 0;

  int64_t get(int64_t i) const {
    return wide ? static_cast<const int64_t*>(data)[i] : static_cast<const int32_t*>(data)[i];
  }
  // An int32 span keeps the low 32 bits, as a device store of the cast does.
  void set(int64_t i, int64_t value) const {
    if (wide) {
      static_cast<int64_t*>(data)[i] = value;
    } else {
      static_cast<int32_t*>(data)[i] = static_cast<int32_t>(static_cast<uint32_t>(value));
    }
  }
};

struct DraftPrefillShape {
  int64_t num_reqs = 0;
  int64_t num_rows = 0;             // request rows readable in both next-token sources
  int64_t last_sampled_stride = 1;  // stride(0) of last_sampled_tokens ([M] or [M, 1])
};

// The first-pass quantities of request r (int64, clamped as above).
struct DraftPrefillRequest {
  int64_t start = 0;
  int64_t kept = 0;  // q
};

inline DraftPrefillRequest draft_prefill_request(const int32_t* query_start_loc, const int32_t* num_rejected,
                                                 int64_t r) {
  DraftPrefillRequest req;
  req.start = query_start_loc[r];
  const int64_t query_len = std::max<int64_t>(static_cast<int64_t>(query_start_loc[r + 1]) - req.start, 0);
  req.kept = std::clamp<int64_t>(query_len - num_rejected[r], 0, query_len);
  return req;
}

inline void prepare_draft_prefill_inputs(const IntSpan& target_input_ids, const IntSpan& target_positions,
                                         const IntSpan& idx_mapping, const int32_t* query_start_loc,
                                         const int32_t* seq_lens, const int32_t* num_sampled,
                                         const int32_t* num_rejected, const IntSpan& last_sampled_tokens,
                                         const int32_t* next_prefill_tokens, const IntSpan& input_ids,
                                         const IntSpan& positions, int32_t* out_query_start_loc,
                                         int64_t out_query_start_loc_size, int32_t* out_seq_lens,
                                         int64_t out_seq_lens_size, const IntSpan& last_token_indices,
                                         const IntSpan* current_draft_step, const IntSpan* request_idx_mapping,
                                         const DraftPrefillShape& s) {
  const int64_t position_end = std::min(target_positions.size, positions.size);
  for (int64_t r = 0; r < s.num_reqs; ++r) {
    const DraftPrefillRequest req = draft_prefill_request(query_start_loc, num_rejected, r);
    const int64_t row = idx_mapping.get(r);
    // vLLM casts the sampled token to int32 (the input ids' type); an int64 input_ids gets that too.
    int64_t next = -1;
    if (row >= 0 && row < s.num_rows) {
      next = num_sampled[r] > 0 ? last_sampled_tokens.get(row * s.last_sampled_stride)
                                : next_prefill_tokens[row];  // row 0 of [L, M]: contiguous
    }
    // Shift left by one: id j of the target goes to j - 1 (both inside their buffers).
    for (int64_t j = 1; j < req.kept; ++j) {
      const int64_t t = req.start + j;
      if (t - 1 >= 0 && t < target_input_ids.size && t - 1 < input_ids.size) input_ids.set(t - 1, target_input_ids.get(t));
    }
    const int64_t last = req.start + req.kept - 1;
    if (req.kept >= 1 && last >= 0 && last < input_ids.size) input_ids.set(last, static_cast<int32_t>(static_cast<uint32_t>(next)));
    for (int64_t j = 0; j < req.kept; ++j) {
      const int64_t t = req.start + j;
      if (t >= 0 && t < position_end) positions.set(t, target_positions.get(t));
    }
    last_token_indices.set(r, last);
    out_query_start_loc[r] = query_start_loc[r];
    out_seq_lens[r] = seq_lens[r];
    if (request_idx_mapping != nullptr) request_idx_mapping->set(r, row);
  }
  std::fill(out_query_start_loc + s.num_reqs, out_query_start_loc + out_query_start_loc_size,
            query_start_loc[s.num_reqs]);
  std::fill(out_seq_lens + s.num_reqs, out_seq_lens + out_seq_lens_size, 0);
  for (int64_t r = s.num_reqs; r < last_token_indices.size; ++r) last_token_indices.set(r, 0);
  if (request_idx_mapping != nullptr) {
    for (int64_t r = s.num_reqs; r < request_idx_mapping->size; ++r) request_idx_mapping->set(r, -1);
  }
  if (current_draft_step != nullptr) current_draft_step->set(0, 0);
}

}  // namespace specops::kernels
