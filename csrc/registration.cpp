// Every specops schema, in one place. Ops that write into caller buffers mark them
// Tensor(a!) and return (); the Python wrappers allocate outputs when the caller passes none.
#include <torch/library.h>

TORCH_LIBRARY(specops, m) {
  // SPEC 3.1
  m.def(
      "compute_slot_mapping(Tensor query_start_loc, Tensor positions, Tensor block_table, int block_size, "
      "Tensor(a!) out, int blocks_per_kv_block, int cp_world_size, int cp_rank, int cp_interleave, "
      "Tensor? idx_mapping, int num_tokens_padded) -> ()");

  // SPEC 3.2: async spec-decode token accounting. The corrections are in place: every read sees
  // the values from before the call.
  m.def(
      "correct_num_computed_tokens(Tensor(a!) num_computed_tokens, Tensor(b!) num_accepted_tokens, "
      "Tensor prev_positions, Tensor valid_sampled_token_count, Tensor prev_num_draft_tokens, "
      "Tensor cpu_num_computed_tokens) -> ()");
  m.def(
      "correct_optimistic_seq_lens(Tensor(a!) seq_lens_cpu, Tensor prev_positions, Tensor valid_sampled_token_count, "
      "Tensor prev_num_draft_tokens) -> ()");
  m.def(
      "prepare_positions_and_seq_lens(Tensor num_computed_tokens, Tensor query_start_loc, Tensor(a!) positions, "
      "Tensor(b!) seq_lens, int num_tokens_padded, int num_reqs_padded) -> ()");
  // Fused: the correction, positions and seq_lens, and the slot mapping of every KV-cache group.
  // sizes = [num_tokens_padded, num_reqs_padded, cp_world_size, cp_rank, cp_interleave] then
  // (block_size, blocks_per_kv_block, cp_sharded) per group: one list, because the Python
  // binding's cost per int and per list argument exceeds the op's body (python/specops/_spec_decode_sizes.py).
  m.def(
      "prepare_spec_decode_inputs(Tensor(a!) num_computed_tokens, Tensor(b!) num_accepted_tokens, "
      "Tensor prev_positions, Tensor valid_sampled_token_count, Tensor prev_num_draft_tokens, "
      "Tensor cpu_num_computed_tokens, Tensor query_start_loc, Tensor(c!) positions, Tensor(d!) seq_lens, "
      "Tensor[] block_tables, Tensor(e!)[] slot_mappings, Tensor? idx_mapping, int[] sizes) -> ()");
}
