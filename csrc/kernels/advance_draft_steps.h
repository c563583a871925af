#pragma once
// Every draft pass of a chain-drafting step (MTP, Eagle: one draft per pass), in one call. Pass 1
// runs on the target step's layout (its query starts, positions, seq_lens and slots); passes
// k = 2..K have one token per request, whose position and seq_len follow advance_draft_step's rule
// applied k - 1 times (the first time with the gather at token_indices and the rejected tokens),
// so none of them depends on a draft token. Per pass k, in row k - 1 of each output:
//
//   positions   the pass's tokens' positions, 0 for the padding up to the padded stream's end
//   cos_sin     rope_cos_sin_cache[position] per stream row (a row of zeros past the cache)
//   local rows  this split rank's rows [local_start, local_end) of cos_sin, zero past the real tokens
//   seq_lens, query_start_loc (pass 1's, or min(i, R)), the split rank's local query starts and
//   local seq_lens (causal), start_pos = seq_len - query length; zero (or the last start) past R
//   slots       per group: pass 1 the target slots, later passes the slot of the new position
//               (advance_draft_step's: PAD for a reset request, another rank's position, a
//               disabled group); PAD past the real tokens up to the pass's padded token count
//   slot pairs  per group: (slot // storage block, slot % storage block), floor division (PAD's
//               pair is (-1, storage block - 1))
//
// The padded stream of a pass of N input tokens is ceil(N / split_size) * split_size rows,
// each rank taking pad / split_size of them (cp_token_split): N = N1 for pass 1, num_reqs_padded
// for the others.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/advance_draft_step.h"

namespace specops::kernels {

struct DraftStepsGroup {
  DraftStepGroup step;    // the table, the slot output's row 0, the slot layout, enabled
  const int64_t* target64;  // pass 1's slots (int64 or int32)
  const int32_t* target32;
  int64_t slot_stride;    // elements between two passes' slot rows
  int64_t* pairs64;       // the pairs' row 0 (int64 or int32)
  int32_t* pairs32;
  int64_t pair_stride;    // elements between two passes' pair rows
  int64_t storage_block_size;

  int64_t target(int64_t t) const { return target64 != nullptr ? target64[t] : static_cast<int64_t>(target32[t]); }

  // The slot stored for token t of pass k (narrowed as the output holds it), and its pair.
  void store(int64_t k, int64_t t, int64_t slot) const {
    int64_t kept = slot;
    if (step.wide) {
      step.out64[k * slot_stride + t] = slot;
    } else {
      kept = slot <= INT32_MAX ? slot : kPadSlotId;
      step.out32[k * slot_stride + t] = static_cast<int32_t>(kept);
    }
    int64_t block = kept / storage_block_size;
    if (kept % storage_block_size != 0 && kept < 0) --block;
    const int64_t offset = kept - block * storage_block_size;
    const int64_t at = k * pair_stride + 2 * t;
    if (pairs64 != nullptr) {
      pairs64[at] = block;
      pairs64[at + 1] = offset;
    } else {
      pairs32[at] = static_cast<int32_t>(block);
      pairs32[at + 1] = static_cast<int32_t>(offset);
    }
  }
};

struct DraftStepsShape {
  int64_t num_steps = 1;         // K
  int64_t num_reqs = 0;          // R
  int64_t num_tokens = 0;        // pass 1's real tokens (T1 = query_start_loc[R])
  int64_t num_input_tokens = 0;  // pass 1's padded token count (N1)
  int64_t num_reqs_padded = 0;   // later passes' padded token count
  int64_t num_positions = 0;     // entries of positions (token_indices index into it)
  int64_t max_model_len = 1;
  bool clamp = false;
  int64_t split_size = 1;
  int64_t split_rank = 0;
  int64_t reqs_end = 0;  // per-request rows are written in [0, reqs_end), query starts in [0, reqs_end]
  // Elements between two passes' rows of each output.
  int64_t positions_stride = 0, seq_lens_stride = 0, query_start_loc_stride = 0, local_query_start_loc_stride = 0,
          local_seq_lens_stride = 0, start_pos_stride = 0;
  // The RoPE rows, as bytes (a row is copied whole, whatever its dtype).
  const uint8_t* rope = nullptr;
  int64_t rope_rows = 0;
  int64_t row_bytes = 0;
  uint8_t* cos_sin = nullptr;
  int64_t cos_sin_stride = 0;  // bytes between two passes
  uint8_t* local_cos_sin = nullptr;
  int64_t local_cos_sin_stride = 0;
};

// The padded stream of a pass with `input_tokens` tokens: (per_rank, pad).
inline void split_of(int64_t input_tokens, int64_t split_size, int64_t* per_rank, int64_t* pad) {
  *per_rank = (input_tokens + split_size - 1) / split_size;
  *pad = *per_rank * split_size;
}

template <typename OutPosT>
void write_rope_rows(const DraftStepsShape& s, int64_t k, const OutPosT* positions, int64_t tokens,
                     int64_t input_tokens) {
  int64_t per_rank = 0, pad = 0;
  split_of(input_tokens, s.split_size, &per_rank, &pad);
  uint8_t* rows = s.cos_sin + k * s.cos_sin_stride;
  for (int64_t t = 0; t < pad; ++t) {
    const int64_t position = static_cast<int64_t>(positions[t]);
    if (position >= 0 && position < s.rope_rows) {
      std::memcpy(rows + t * s.row_bytes, s.rope + position * s.row_bytes, s.row_bytes);
    } else {
      std::memset(rows + t * s.row_bytes, 0, s.row_bytes);
    }
  }
  const int64_t local_start = s.split_rank * per_rank;
  uint8_t* local = s.local_cos_sin + k * s.local_cos_sin_stride;
  for (int64_t i = 0; i < per_rank; ++i) {
    if (local_start + i < tokens) {
      std::memcpy(local + i * s.row_bytes, rows + (local_start + i) * s.row_bytes, s.row_bytes);
    } else {
      std::memset(local + i * s.row_bytes, 0, s.row_bytes);
    }
  }
}

// The per-request rows of pass k from its query starts (qsl(i), i <= R) and seq_lens.
template <typename QslFn, typename SeqFn>
void write_request_rows(const DraftStepsShape& s, int64_t k, int64_t input_tokens, QslFn qsl, SeqFn seq,
                        int32_t* out_qsl, int32_t* local_qsl, int32_t* local_seq, int32_t* start_pos) {
  int64_t per_rank = 0, pad = 0;
  split_of(input_tokens, s.split_size, &per_rank, &pad);
  const int64_t local_start = s.split_rank * per_rank, local_end = local_start + per_rank;
  auto clamped = [&](int64_t v) { return std::min(std::max(v, local_start), local_end); };
  const int64_t first = clamped(qsl(0));
  for (int64_t i = 0; i <= s.reqs_end; ++i) {
    const int64_t start = qsl(std::min(i, s.num_reqs));
    out_qsl[i] = static_cast<int32_t>(start);
    local_qsl[i] = static_cast<int32_t>(clamped(start) - first);
  }
  for (int64_t r = 0; r < s.reqs_end; ++r) {
    if (r >= s.num_reqs) {
      local_seq[r] = 0;
      start_pos[r] = 0;
      continue;
    }
    const int64_t begin = qsl(r), end = qsl(r + 1), len = seq(r);
    const int64_t local_len = clamped(end) - clamped(begin);
    const int64_t beyond = end - clamped(end);  // the request's tokens on later ranks
    local_seq[r] = static_cast<int32_t>(local_len > 0 && len > 0 ? std::max<int64_t>(len - beyond, 0) : 0);
    start_pos[r] = static_cast<int32_t>(len - (end - begin));
  }
}

template <typename PosT, typename TokT, typename IdxT>
void advance_draft_steps(const int32_t* query_start_loc, const PosT* positions, const int32_t* seq_lens,
                         const TokT* token_indices, const int32_t* num_rejected, const IdxT* idx_mapping,
                         int64_t* out_positions, int32_t* out_seq_lens, int32_t* out_query_start_loc,
                         int32_t* out_local_query_start_loc, int32_t* out_local_seq_lens, int32_t* out_start_pos,
                         const DraftStepsGroup* groups, int64_t num_groups, const DraftStepsShape& s) {
  const int64_t R = s.num_reqs;
  // Pass 1: the target step's layout.
  {
    int64_t per_rank = 0, pad = 0;
    split_of(s.num_input_tokens, s.split_size, &per_rank, &pad);
    for (int64_t t = 0; t < pad; ++t) out_positions[t] = t < s.num_tokens ? static_cast<int64_t>(positions[t]) : 0;
    write_rope_rows(s, 0, out_positions, s.num_tokens, s.num_input_tokens);
    for (int64_t r = 0; r < s.reqs_end; ++r) out_seq_lens[r] = r < R ? seq_lens[r] : 0;
    write_request_rows(
        s, 0, s.num_input_tokens, [&](int64_t i) { return static_cast<int64_t>(query_start_loc[i]); },
        [&](int64_t r) { return static_cast<int64_t>(seq_lens[r]); }, out_query_start_loc,
        out_local_query_start_loc, out_local_seq_lens, out_start_pos);
    for (int64_t g = 0; g < num_groups; ++g) {
      for (int64_t t = 0; t < s.num_input_tokens; ++t) {
        groups[g].store(0, t, t < s.num_tokens ? groups[g].target(t) : kPadSlotId);
      }
    }
  }
  if (s.num_steps < 2) return;
  // Passes 2..K, request by request: the rule applied pass after pass, in registers. A token
  // index outside positions (PAD on the device paths; the host op rejects it) leaves the
  // request at position 0 without slots in every pass.
  DraftStepShape rule;
  rule.num_reqs = R;
  rule.num_positions = s.num_positions;
  rule.max_model_len = s.max_model_len;
  rule.clamp = s.clamp;
  const int64_t limit = s.max_model_len;
  for (int64_t r = 0; r < R; ++r) {
    const int64_t row = draft_row(idx_mapping, r);
    const int64_t index = static_cast<int64_t>(token_indices[r]);
    const bool ok = index >= 0 && index < s.num_positions;
    DraftPosition d = draft_position(positions, token_indices, seq_lens, num_rejected, r, rule);
    for (int64_t k = 1; k < s.num_steps; ++k) {
      if (k > 1) {
        const int64_t p = ok ? d.position + 1 : 0;
        if (s.clamp) {
          d = {std::min(p, limit - 1), std::min(d.seq_len + 1, limit), ok};
        } else {
          const bool over = p >= limit;
          d = {over ? 0 : p, std::min(over ? int64_t{1} : d.seq_len + 1, limit), ok && !over};
        }
      }
      out_positions[k * s.positions_stride + r] = d.position;
      out_seq_lens[k * s.seq_lens_stride + r] = static_cast<int32_t>(d.seq_len);
      for (int64_t g = 0; g < num_groups; ++g) {
        groups[g].store(k, r, draft_slot(groups[g].step, row, d.position, d.mapped));
      }
    }
  }
  int64_t per_rank = 0, pad = 0;
  split_of(s.num_reqs_padded, s.split_size, &per_rank, &pad);
  for (int64_t k = 1; k < s.num_steps; ++k) {
    int64_t* positions_k = out_positions + k * s.positions_stride;
    for (int64_t t = R; t < pad; ++t) positions_k[t] = 0;
    write_rope_rows(s, k, positions_k, R, s.num_reqs_padded);
    int32_t* seq_k = out_seq_lens + k * s.seq_lens_stride;
    for (int64_t r = R; r < s.reqs_end; ++r) seq_k[r] = 0;
    write_request_rows(
        s, k, s.num_reqs_padded, [&](int64_t i) { return std::min(i, R); },
        [&](int64_t r) { return static_cast<int64_t>(seq_k[r]); }, out_query_start_loc + k * s.query_start_loc_stride,
        out_local_query_start_loc + k * s.local_query_start_loc_stride,
        out_local_seq_lens + k * s.local_seq_lens_stride, out_start_pos + k * s.start_pos_stride);
    for (int64_t g = 0; g < num_groups; ++g) {
      for (int64_t t = R; t < s.num_reqs_padded; ++t) groups[g].store(k, t, kPadSlotId);
    }
  }
}

}  // namespace specops::kernels
