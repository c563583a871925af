#pragma once
// This PCP rank's input ids, positions and seq_lens, gathered from the global batch through the
// rank's slice of the layout's gather index (pcp_partition.h), in one pass.
//
//   input_ids[o] = global_input_ids[gather[o]], positions[o] = global_positions[gather[o]]   o < N
//   input_ids[o] = positions[o] = 0                                                          N <= o < end
//   seq_lens[i]  = positions[lqsl[i + 1] - 1] + 1 if lqsl[i + 1] > lqsl[i] else 0             i < n
//   seq_lens[i]  = 0                                                                         n <= i < num_reqs_padded
//
// A gather index outside a global tensor reads 0 (the host op rejects it; the device kernels
// must not read out of bounds), and so does a local offset outside [0, N).
#include <algorithm>
#include <cstdint>

namespace specops::kernels {

struct PcpLocalInputsShape {
  int64_t num_global_ids = 0;
  int64_t num_global_positions = 0;
  int64_t num_local_tokens = 0;  // N
  int64_t num_reqs = 0;  // n: local_query_start_loc has n + 1 entries
  int64_t num_ids_out = 0;  // entries of input_ids written
  int64_t num_positions_out = 0;  // entries of positions written
  int64_t num_reqs_padded = 0;  // entries of seq_lens written
};

template <typename T>
inline T gathered(const T* values, int64_t num_values, const int64_t* gather, int64_t o, int64_t num_local) {
  if (o < 0 || o >= num_local) return T{0};
  const int64_t index = gather[o];
  return index >= 0 && index < num_values ? values[index] : T{0};
}

// PosT: the global positions' type; OutPosT: the output's (int64, or int32 taking the low bits).
template <typename IdT, typename PosT, typename OutPosT>
void pcp_local_inputs(const IdT* global_ids, const PosT* global_positions, const int64_t* gather,
                      const int32_t* local_query_start_loc, IdT* ids, OutPosT* positions, int32_t* seq_lens,
                      const PcpLocalInputsShape& s) {
  const int64_t N = s.num_local_tokens;
  for (int64_t o = 0; o < s.num_ids_out; ++o) ids[o] = gathered(global_ids, s.num_global_ids, gather, o, N);
  for (int64_t o = 0; o < s.num_positions_out; ++o) {
    positions[o] = static_cast<OutPosT>(gathered(global_positions, s.num_global_positions, gather, o, N));
  }
  for (int64_t i = 0; i < s.num_reqs; ++i) {
    const int64_t start = local_query_start_loc[i];
    const int64_t end = local_query_start_loc[i + 1];
    const int64_t last = static_cast<int64_t>(gathered(global_positions, s.num_global_positions, gather, end - 1, N));
    // In 64 unsigned bits, then the low 32 as every backend keeps them: an accepted position of
    // 2^63 - 1 has no int64 successor.
    seq_lens[i] = end > start ? static_cast<int32_t>(static_cast<uint64_t>(last) + 1u) : 0;
  }
  std::fill(seq_lens + std::min(s.num_reqs, s.num_reqs_padded), seq_lens + s.num_reqs_padded, int32_t{0});
}

}  // namespace specops::kernels
