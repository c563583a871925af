#pragma once
// The A5 (Ascend950) shared-KV sparse-attention schedule, vllm-ascend's
// `npu_kv_quant_sparse_attn_sharedkv_metadata` (docs/dsa_metadata_family.md): the sas schedule
// of sas_metadata.h with this variant's tiles, 9-word FA entries (FD entries from word 324) and,
// with 128 heads, core pairs that write two identical entries.
#include <cstdint>

#include "kernels/sas_metadata.h"

namespace specops::kernels::kv_quant_sas {

namespace sas = specops::kernels::sas;

constexpr int64_t kEntryWords = 9;  // the 8 sas fields and s2_max_num
constexpr int64_t kFdBase = kEntryWords * sas::kMaxCubeCores;  // 324
constexpr int64_t kPairedHeads = 128;

struct Plan {
  sas::Variant variant;
  int64_t planned_cores = 0;  // cores the greedy pass plans for
  int64_t fa_entries = 0;     // FA entries written
  int64_t fd_entries = 0;     // FD entries written
};

// The kernel's tile rule. M tiles: one token, except 64 heads on A2/A3 without SCFA (two
// tokens, 128 rows); S2 tiles 128 on Ascend950, 512 on A2/A3. With 128 heads every planned core
// writes a pair of entries, and Ascend950 plans for half the cube and vector cores.
inline Plan plan(int64_t num_heads_q, bool scfa, bool ascend950, int64_t num_cube_cores, int64_t num_vector_cores) {
  Plan p;
  p.variant.entry_words = kEntryWords;
  p.variant.paired = num_heads_q == kPairedHeads;
  p.variant.s2_tile_shift = ascend950 ? 7 : 9;
  p.variant.m_tile_rows = (!ascend950 && num_heads_q != kPairedHeads && !scfa) ? 2 * num_heads_q : 0;
  const bool halved = ascend950 && p.variant.paired;
  p.planned_cores = halved ? num_cube_cores / 2 : num_cube_cores;
  p.fa_entries = p.variant.paired ? 2 * p.planned_cores : p.planned_cores;
  p.fd_entries = halved ? num_vector_cores / 2 : num_vector_cores;
  return p;
}

}  // namespace specops::kernels::kv_quant_sas
