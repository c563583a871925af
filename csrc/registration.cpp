// Every specops schema, in one place. Ops that write into caller buffers mark them
// Tensor(a!) and return (); the Python wrappers allocate outputs when the caller passes none.
#include <torch/library.h>

TORCH_LIBRARY(specops, m) {
  // SPEC 3.1
  m.def(
      "compute_slot_mapping(Tensor query_start_loc, Tensor positions, Tensor block_table, int block_size, "
      "Tensor(a!) out, int blocks_per_kv_block, int cp_world_size, int cp_rank, int cp_interleave, "
      "Tensor? idx_mapping, int num_tokens_padded) -> ()");

  // SPEC 3.3
  m.def(
      "gather_block_tables(Tensor src_block_table, Tensor num_blocks, Tensor idx_mapping, Tensor(a!) out, "
      "int num_reqs_padded) -> ()");
  m.def("apply_staged_writes(Tensor(a!) table, Tensor rows, Tensor starts, Tensor cu_lens, Tensor values) -> ()");

  // SPEC 3.5
  m.def(
      "sas_metadata(Tensor cu_seqlens_q, Tensor seqused_kv, int num_heads_q, int num_heads_kv, int head_dim, "
      "int window_left, int window_right, int num_cube_cores, int num_vector_cores, Tensor(a!) out) -> ()");
}
