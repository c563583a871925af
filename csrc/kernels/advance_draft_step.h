#pragma once
// One later draft step of every request (one token each): its position + 1, its seq_len + 1,
// and the slot of the new position in every KV-cache group, under one of the two rules for a
// request that reaches max_model_len L:
//
//   p    = positions[token_indices[r]] (or positions[r]) + 1
//   base = seq_lens[r] - num_rejected_tokens[r]   (first step only; else seq_lens[r])
//   reset (V1 Eagle, vllm-ascend): over = p >= L; position = over ? 0 : p;
//                                  seq_len = min(over ? 1 : base + 1, L); slot = over ? PAD : slot(row, position)
//   clamp (MRV2):                  position = min(p, L - 1); seq_len = min(base + 1, L); slot = slot(row, position)
//
// slot(row, position) is compute_slot_mapping's (kernels/slot_math.h) in the group's table,
// block size and CP layout; PAD for row < 0, a position another rank stores, a group whose slot
// mapping is disabled, and (as on the device paths) a position past its row's table or
// allocated blocks, a token index outside positions. Positions and seq_lens are computed once,
// for every group.
//
// The token bookkeeping a step can carry (DraftInputs: MRV2's prepare_decode_inputs and
// update_draft_inputs, fused with the advance): with step = draft_step (0 when not given),
//
//   draft_tokens[r, step] = sampled_tokens[r]                  (when sampled_tokens is given)
//   last step (step >= num_draft_steps - 1): nothing else is written
//   input_ids[r] = sampled_tokens[r], else draft_tokens[r, step]
//   sample_positions[r] += 1;  next_hidden_states[r] = hidden_states[r]
//   base = target_seq_lens[r] - num_rejected_tokens[r]        (target_seq_lens in place of seq_lens)
#include <algorithm>
#include <cstdint>

#include "kernels/slot_math.h"

namespace specops::kernels {

// An int32 or int64 tensor's entries, read as int64.
struct IntIn {
  const void* data = nullptr;
  bool wide = false;
  int64_t operator[](int64_t i) const {
    return wide ? static_cast<const int64_t*>(data)[i] : static_cast<int64_t>(static_cast<const int32_t*>(data)[i]);
  }
};

// An int32 or int64 output; an int32 store narrows.
struct IntOut {
  void* data = nullptr;
  bool wide = false;
  int64_t get(int64_t i) const {
    return wide ? static_cast<const int64_t*>(data)[i] : static_cast<int64_t>(static_cast<const int32_t*>(data)[i]);
  }
  void set(int64_t i, int64_t v) const {
    if (wide) {
      static_cast<int64_t*>(data)[i] = v;
    } else {
      static_cast<int32_t*>(data)[i] = static_cast<int32_t>(v);
    }
  }
};

// A step's token bookkeeping (the file comment); a null data pointer: that part is not done.
struct DraftInputs {
  const int32_t* target_seq_lens = nullptr;
  IntOut draft_tokens;  // [rows, columns], row stride draft_tokens_stride
  int64_t draft_tokens_stride = 0;
  int64_t draft_tokens_columns = 0;
  IntIn sampled_tokens;
  IntOut input_ids;
  IntOut sample_positions;
  const char* hidden_states = nullptr;  // rows of row_bytes, strides in bytes
  char* next_hidden_states = nullptr;
  int64_t hidden_stride = 0;
  int64_t next_hidden_stride = 0;
  int64_t row_bytes = 0;
  int64_t step = 0;
  bool last = false;  // the last draft step: only the store of the sampled tokens

  bool step_in_columns() const { return step >= 0 && step < draft_tokens_columns; }

  // The sampled tokens into their column: before anything else, the last step included.
  void store_sampled(int64_t num_reqs) const {
    if (sampled_tokens.data == nullptr || draft_tokens.data == nullptr || !step_in_columns()) return;
    for (int64_t r = 0; r < num_reqs; ++r) draft_tokens.set(r * draft_tokens_stride + step, sampled_tokens[r]);
  }

  void advance_request(int64_t r) const {
    if (input_ids.data != nullptr) {
      int64_t token = 0;
      if (sampled_tokens.data != nullptr) {
        token = sampled_tokens[r];
      } else if (step_in_columns()) {
        token = draft_tokens.get(r * draft_tokens_stride + step);
      }
      input_ids.set(r, token);
    }
    // +1 in unsigned arithmetic: it wraps at the type's end, as the device kernels' adds do.
    if (sample_positions.data != nullptr) {
      sample_positions.set(r, static_cast<int64_t>(static_cast<uint64_t>(sample_positions.get(r)) + 1));
    }
    if (next_hidden_states != nullptr) {
      std::copy_n(hidden_states + r * hidden_stride, row_bytes, next_hidden_states + r * next_hidden_stride);
    }
  }
};

struct DraftStepGroup {
  const int32_t* block_table;
  int64_t* out64;  // the output, int64 (wide) or int32
  int32_t* out32;
  bool wide;
  SlotMappingShape shape;
  SlotMappingDivisors divisors;
  bool enabled;
  int64_t slot_end;  // the slot mapping is PAD in [num_reqs, slot_end)

  DraftStepGroup(const int32_t* table, int64_t* out_wide, int32_t* out_narrow, bool is_wide,
                 const SlotMappingShape& s, bool on, int64_t end)
      : block_table(table), out64(out_wide), out32(out_narrow), wide(is_wide), shape(s), divisors(s), enabled(on),
        slot_end(end) {}

  void store(int64_t t, int64_t slot) const {
    if (wide) {
      out64[t] = slot;
    } else {
      out32[t] = slot <= INT32_MAX ? static_cast<int32_t>(slot) : static_cast<int32_t>(kPadSlotId);
    }
  }
};

struct DraftStepShape {
  int64_t num_reqs = 0;
  int64_t num_positions = 0;  // entries of positions (token_indices index into it)
  int64_t max_model_len = 1;
  bool clamp = false;
  int64_t positions_end = 0;  // out_positions is 0 in [num_reqs, positions_end)
  int64_t seq_lens_end = 0;   // seq_lens is 0 in [num_reqs, seq_lens_end)
  int64_t query_start_loc_end = 0;  // query_start_loc[i] = min(i, num_reqs) for i < this
};

// The new position of request r and whether it gets slots (false: PAD in every group).
struct DraftPosition {
  int64_t position;
  int64_t seq_len;
  bool mapped;
};

template <typename PosT, typename TokT>
inline DraftPosition draft_position(const PosT* positions, const TokT* token_indices, const int32_t* seq_lens,
                                    const int32_t* num_rejected, int64_t r, const DraftStepShape& s) {
  bool ok = true;
  int64_t current = -1;
  if (token_indices != nullptr) {
    const int64_t index = static_cast<int64_t>(token_indices[r]);
    ok = index >= 0 && index < s.num_positions;
    if (ok) current = static_cast<int64_t>(positions[index]);
  } else {
    current = static_cast<int64_t>(positions[r]);
  }
  const int64_t limit = s.max_model_len;  // >= 1
  // p = current + 1 >= L, tested on current: p itself does not exist in int64 for an accepted
  // position of 2^63 - 1, and the rules (docs/step_bookkeeping.md, "advance_draft_step") give 0
  // (reset) or L - 1 (clamp) there.
  const bool over = ok && current >= limit - 1;
  const int64_t p = ok && !over ? current + 1 : 0;
  const int64_t base = static_cast<int64_t>(seq_lens[r]) - (num_rejected != nullptr ? num_rejected[r] : 0);
  if (s.clamp) return {over ? limit - 1 : p, std::min(base + 1, limit), ok};
  return {over ? 0 : p, std::min(over ? int64_t{1} : base + 1, limit), ok && !over};
}

template <typename IdxT>
inline int64_t draft_row(const IdxT* idx_mapping, int64_t r) {
  return idx_mapping != nullptr ? static_cast<int64_t>(idx_mapping[r]) : r;
}

// The slot of (row, position) in a group, PAD where it has none (see the file comment).
inline int64_t draft_slot(const DraftStepGroup& g, int64_t row, int64_t position, bool mapped) {
  if (!mapped || !g.enabled || row < 0 || row >= g.shape.block_table_rows) return kPadSlotId;
  return slot_of_position<CpLayout::kInterleaved>(position, g.block_table + row * g.shape.block_table_stride,
                                                  usable_columns(g.shape, row), g.shape, g.divisors);
}

template <typename PosT, typename OutPosT, typename TokT, typename IdxT>
void advance_draft_step(const PosT* positions, int32_t* seq_lens, const TokT* token_indices,
                        const int32_t* num_rejected, const IdxT* idx_mapping, OutPosT* out_positions,
                        int32_t* query_start_loc, const DraftStepGroup* groups, int64_t num_groups,
                        const DraftStepShape& s, const DraftInputs& in) {
  in.store_sampled(s.num_reqs);
  if (in.last) return;
  const int32_t* base = in.target_seq_lens != nullptr ? in.target_seq_lens : seq_lens;
  for (int64_t r = 0; r < s.num_reqs; ++r) {
    const DraftPosition d = draft_position(positions, token_indices, base, num_rejected, r, s);
    in.advance_request(r);
    const int64_t row = draft_row(idx_mapping, r);
    for (int64_t g = 0; g < num_groups; ++g) groups[g].store(r, draft_slot(groups[g], row, d.position, d.mapped));
    // positions may be out_positions itself (in place): read above, written here.
    out_positions[r] = static_cast<OutPosT>(d.position);
    seq_lens[r] = static_cast<int32_t>(d.seq_len);
  }
  for (int64_t g = 0; g < num_groups; ++g) {
    for (int64_t t = s.num_reqs; t < groups[g].slot_end; ++t) groups[g].store(t, kPadSlotId);
  }
  std::fill(out_positions + std::min(s.num_reqs, s.positions_end), out_positions + s.positions_end, OutPosT{0});
  std::fill(seq_lens + std::min(s.num_reqs, s.seq_lens_end), seq_lens + s.seq_lens_end, 0);
  for (int64_t i = 0; query_start_loc != nullptr && i < s.query_start_loc_end; ++i) {
    query_start_loc[i] = static_cast<int32_t>(std::min(i, s.num_reqs));
  }
}

}  // namespace specops::kernels
