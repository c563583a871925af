// Every specops schema, in one place. Ops that write into caller buffers mark them
// Tensor(a!) and return (); the Python wrappers allocate outputs when the caller passes none.
#include <torch/library.h>

#include "written_versions.h"

TORCH_LIBRARY(specops, m) {
  // docs/slot_mapping.md
  m.def(
      "compute_slot_mapping(Tensor query_start_loc, Tensor positions, Tensor block_table, int block_size, "
      "Tensor(a!) out, int blocks_per_kv_block, int cp_world_size, int cp_rank, int cp_interleave, "
      "Tensor? idx_mapping, int num_tokens_padded, Tensor? num_blocks=None) -> ()");
  // Host-only: compute_slot_mapping's value checks for several tables, writing nothing (so that
  // PersistentMappings.refresh rejects a batch before it rewrites any group). block_sizes,
  // blocks_per_kv_block, cp_sharded: one entry per table (a table not CP-sharded maps as a single
  // rank); num_blocks: empty, or the blocks allocated to each row, one tensor per table;
  // slot_mappings: empty, or the output each table's slots go to, one per table (never written:
  // an int32 one has its slots checked to fit, as compute_slot_mapping checks its int32 out).
  m.def(
      "check_slot_mapping_positions(Tensor query_start_loc, Tensor positions, Tensor[] block_tables, "
      "Tensor? idx_mapping, int[] block_sizes, int[] blocks_per_kv_block, bool[] cp_sharded, int cp_world_size, "
      "int cp_rank, int cp_interleave, Tensor[] num_blocks, Tensor[] slot_mappings) -> ()");

  // docs/persistent_buffers.md
  m.def(
      "gather_block_tables(Tensor src_block_table, Tensor num_blocks, Tensor idx_mapping, Tensor(a!) out, "
      "int num_reqs_padded, Tensor? num_computed_tokens, int sliding_window_reach, int block_size) -> ()");
  // gather_block_tables of every KV-cache group in one call (one launch on a device): group g
  // gathers src_block_tables[g] (num_blocks[g], sliding_window_reach[g], block_sizes[g]; a block
  // size of 0 stands for None) into out[g]; the groups share idx_mapping, num_reqs_padded and
  // num_computed_tokens.
  m.def(
      "gather_block_tables_multi(Tensor[] src_block_tables, Tensor[] num_blocks, Tensor idx_mapping, "
      "Tensor(a!)[] out, int num_reqs_padded, Tensor? num_computed_tokens, int[] sliding_window_reach, "
      "int[] block_sizes) -> ()");
  m.def("apply_staged_writes(Tensor(a!) table, Tensor rows, Tensor starts, Tensor cu_lens, Tensor values) -> ()");

  // docs/sas_metadata.md
  // The arguments of vllm-ascend's npu_sparse_attn_sharedkv_metadata, with the string ones as
  // the wrapper resolves them: layout_q 0 BSND / 1 TND, layout_kv 0 PA_ND / 1 TND / 2 BSND,
  // ascend950 = soc_version contains "Ascend950".
  m.def(
      "sas_metadata(int num_heads_q, int num_heads_kv, int head_dim, Tensor? cu_seqlens_q, Tensor? cu_seqlens_ori_kv, "
      "Tensor? cu_seqlens_cmp_kv, Tensor? seqused_q, Tensor? seqused_kv, int batch_size, int max_seqlen_q, "
      "int max_seqlen_kv, int ori_topk, int cmp_topk, int cmp_ratio, int ori_mask_mode, int cmp_mask_mode, "
      "int ori_win_left, int ori_win_right, int layout_q, int layout_kv, bool has_ori_kv, bool has_cmp_kv, "
      "int num_cube_cores, int num_vector_cores, bool ascend950, Tensor(a!) out) -> ()");

  // docs/dsa_metadata_family.md: the rest of the DSA metadata family (string arguments as codes,
  // as for sas_metadata; layout_query 0 BSND / 1 TND, layout_key 0 PA_BSND / 1 TND / 2 BSND).
  m.def(
      "kv_quant_sas_metadata(int num_heads_q, int num_heads_kv, int head_dim, int kv_quant_mode, Tensor? cu_seqlens_q, "
      "Tensor? cu_seqlens_ori_kv, Tensor? cu_seqlens_cmp_kv, Tensor? seqused_q, Tensor? seqused_kv, int batch_size, "
      "int max_seqlen_q, int max_seqlen_kv, int ori_topk, int cmp_topk, int tile_size, int rope_head_dim, "
      "int cmp_ratio, int ori_mask_mode, int cmp_mask_mode, int ori_win_left, int ori_win_right, int layout_q, "
      "int layout_kv, bool has_ori_kv, bool has_cmp_kv, int num_cube_cores, int num_vector_cores, bool ascend950, "
      "Tensor(a!) out) -> ()");
  m.def(
      "lightning_indexer_metadata(int num_heads_q, int num_heads_k, int head_dim, int query_quant_mode, "
      "int key_quant_mode, Tensor? actual_seq_lengths_query, Tensor? actual_seq_lengths_key, int batch_size, "
      "int max_seqlen_q, int max_seqlen_k, int layout_query, int layout_key, int sparse_count, int sparse_mode, "
      "int pre_tokens, int next_tokens, int cmp_ratio, int num_cube_cores, int num_vector_cores, bool ascend950, "
      "Tensor(a!) out) -> ()");
  m.def(
      "store_kv_block_metadata(Tensor slot_mapping, Tensor(a!) group_len, Tensor(b!) group_key_idx, "
      "Tensor(c!) group_key_cache_idx, int block_size) -> ()");
  // N = compress_cos.size(0) rows; slot_mapping [N] (format 1, flat) or [N, 2] (format 2).
  m.def(
      "compressor_metadata(Tensor rope_cos, Tensor rope_sin, Tensor cu_seqlens, Tensor start_pos, "
      "Tensor kv_block_table, int kv_block_size, int slot_mapping_format, int compress_ratio, int num_reqs_actual, "
      "Tensor(a!) compress_cos, Tensor(b!) compress_sin, Tensor(c!) slot_mapping) -> ()");
  // compressor_metadata for every group g and step s at once (one launch): group g's RoPE tables,
  // block table, block size, format and ratio; step s's row of cu_seqlens [S, >= R + 1] and
  // start_pos [S, >= R]; into step s of compress_cos[g] / compress_sin[g] [S, N_g, 1, 1, D_g] and
  // slot_mappings[g] [S, N_g] (format 1) or [S, N_g, 2] (format 2).
  m.def(
      "compressor_metadata_multi(Tensor[] rope_cos, Tensor[] rope_sin, Tensor cu_seqlens, Tensor start_pos, "
      "Tensor[] kv_block_tables, int[] kv_block_sizes, int[] slot_mapping_formats, int[] compress_ratios, "
      "int num_reqs_actual, Tensor(a!)[] compress_cos, Tensor(b!)[] compress_sin, Tensor(c!)[] slot_mappings) -> ()");

  // docs/context_parallel.md
  m.def(
      "cp_local_metadata(Tensor query_start_loc, Tensor seq_lens, int num_input_tokens, int cp_size, int cp_rank, "
      "bool causal, Tensor(a!) local_query_start_loc, Tensor(b!) local_seq_lens, Tensor(c!) start_pos) -> ()");
  // Host-only: the host ints of CPLocalMetadata from host copies of the inputs.
  m.def(
      "cp_local_max_lens(Tensor query_start_loc, Tensor? seq_lens, int num_input_tokens, int cp_size, int cp_rank, "
      "bool causal) -> int[]");
  m.def("format_slot_mapping_blocks(Tensor slot_mapping, int block_size, Tensor(a!) out) -> ()");
  // The KV length each decode-context-parallel rank stores (vllm-ascend get_dcp_local_seq_lens).
  m.def(
      "dcp_local_seq_lens(Tensor seq_lens, int cp_world_size, int cp_rank, int cp_interleave, Tensor(a!) out) -> ()");
  m.def(
      "dspark_swa_indices(Tensor block_table, Tensor query_start_loc, Tensor seq_lens, int window, "
      "int num_speculative_tokens, int block_size, int num_tokens, int width, int cp_size, int cp_rank, "
      "Tensor(a!) out, Tensor(b!) out_lens) -> ()");
  // The two per-group ops of a draft step for every group at once (one launch each):
  // slot_mappings[g][:num_slots] formatted with block_sizes[g] into out[g]; and the DSpark
  // indices of group g (block_tables[g], windows[g], block_sizes[g], widths[g]) into out[g],
  // out_lens[g], every group sharing the batch, the token count and the CP split.
  m.def(
      "format_slot_mapping_blocks_multi(Tensor[] slot_mappings, int[] block_sizes, int num_slots, "
      "Tensor(a!)[] out) -> ()");
  m.def(
      "dspark_swa_indices_multi(Tensor[] block_tables, Tensor query_start_loc, Tensor seq_lens, int[] windows, "
      "int num_speculative_tokens, int[] block_sizes, int num_tokens, int[] widths, int cp_size, int cp_rank, "
      "Tensor(a!)[] out, Tensor(b!)[] out_lens) -> ()");

  // docs/async_accounting.md: async spec-decode token accounting. The corrections are in place: every read sees
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
      "Tensor(b!) seq_lens, int num_tokens_padded, int num_reqs_padded, Tensor? idx_mapping) -> ()");
  // Fused: the correction, positions and seq_lens, and the slot mapping of every KV-cache group.
  // The multi-group ops (this one, advance_draft_step, advance_draft_steps,
  // expand_parallel_draft_inputs) take one entry per block table in block_sizes,
  // blocks_per_kv_block, cp_sharded (else a single rank) and slot_mapping_enabled (else every
  // slot PAD, the table never read). num_blocks: empty, or the blocks allocated to each table
  // row, one tensor per group. num_tokens_padded / num_reqs_padded None: positions.numel() /
  // seq_lens.numel(), as the wrapper's defaults. request_indexed_counts: num_computed_tokens is
  // a runner's request-indexed counts (read through idx_mapping, no correction); then
  // gathered_block_tables (empty: none) receive gather_block_tables_multi of the block tables
  // (rows [0, num_gathered_rows), sliding_window_reach per group or empty) in the same call.
  m.def(
      "prepare_spec_decode_inputs(Tensor(a!) num_computed_tokens, Tensor(b!) num_accepted_tokens, "
      "Tensor prev_positions, Tensor valid_sampled_token_count, Tensor prev_num_draft_tokens, "
      "Tensor cpu_num_computed_tokens, Tensor query_start_loc, Tensor(c!) positions, Tensor(d!) seq_lens, "
      "Tensor[] block_tables, Tensor(e!)[] slot_mappings, Tensor? idx_mapping, int? num_tokens_padded, "
      "int? num_reqs_padded, int cp_world_size, int cp_rank, int cp_interleave, int[] block_sizes, "
      "int[] blocks_per_kv_block, bool[] cp_sharded, bool[] slot_mapping_enabled, Tensor[] num_blocks, "
      "bool request_indexed_counts, Tensor(f!)[] gathered_block_tables, int num_gathered_rows, "
      "int[] sliding_window_reach) -> ()");

  // docs/step_bookkeeping.md: the spec-decode step's own bookkeeping (input ids, sampled and
  // rejected counts, request state, next tokens, later draft steps). A *_padded of -1: each
  // output padded to its own end.
  m.def(
      "count_sampled_and_rejected(Tensor(a!) num_sampled, Tensor seq_lens, Tensor cu_num_logits, "
      "Tensor idx_mapping, Tensor prefill_len, Tensor(b!) num_rejected, int num_reqs_padded) -> ()");
  m.def(
      "prepare_input_ids(Tensor(a!) input_ids, Tensor idx_mapping, Tensor query_start_loc, "
      "Tensor num_computed_tokens, Tensor prefill_len, Tensor last_sampled_tokens, Tensor draft_tokens, "
      "Tensor cu_num_logits, int num_new_sampled_tokens, Tensor? all_token_ids, Tensor(b!)? next_prefill_tokens, "
      "Tensor(c!) logits_indices, Tensor(d!) expanded_idx_mapping, Tensor(e!) expanded_local_pos, "
      "int num_logits_padded, int num_tokens_padded) -> ()");
  m.def(
      "post_update_after_sampling(Tensor idx_mapping, Tensor(a!) num_computed_tokens, Tensor? query_start_loc, "
      "Tensor? sampled_tokens, Tensor? num_sampled, Tensor? num_rejected, Tensor(b!)? last_sampled_tokens, "
      "Tensor(c!)? all_token_ids, Tensor(d!)? total_len, Tensor(e!)? output_bin_counts, Tensor? draft_tokens, "
      "Tensor(f!)? draft_tokens_out) -> ()");
  m.def(
      "prepare_next_token_ids(Tensor sampled_token_ids, int vocab_size, Tensor? discard_request_mask, "
      "Tensor? backup_next_token_ids, Tensor? token_ids, Tensor? num_tokens_no_spec, Tensor? cu_num_draft_tokens, "
      "Tensor? query_start_loc, Tensor(a!) next_token_ids, Tensor(b!) valid_sampled_token_count, "
      "Tensor(c!)? num_rejected_tokens, Tensor(d!)? token_indices_to_sample, int num_reqs_padded) -> ()");
  // The draft model's prefill inputs after a target step (MRV2's prepare_prefill_inputs), with the
  // drafter's copy of the request mapping; every output padded to its own end.
  m.def(
      "prepare_draft_prefill_inputs(Tensor target_input_ids, Tensor target_positions, Tensor idx_mapping, "
      "Tensor query_start_loc, Tensor seq_lens, Tensor num_sampled, Tensor num_rejected, "
      "Tensor last_sampled_tokens, Tensor next_prefill_tokens, Tensor(a!) input_ids, Tensor(b!) positions, "
      "Tensor(c!) out_query_start_loc, Tensor(d!) out_seq_lens, Tensor(e!) last_token_indices, "
      "Tensor(f!)? current_draft_step, Tensor(g!)? request_idx_mapping) -> ()");
  // past_max_model_len: 0 "reset", 1 "clamp"; out_positions may be positions itself (in place)
  // without token_indices. num_draft_steps -1: no last step (draft_step only picks the column).
  // max_model_len -1: max_model_len_tensor (0-D, read on the device) gives it.
  m.def(
      "advance_draft_step(Tensor positions, Tensor(a!) seq_lens, Tensor[] block_tables, Tensor? token_indices, "
      "Tensor? num_rejected_tokens, Tensor? idx_mapping, Tensor(b!) out_positions, Tensor(c!)[] slot_mappings, "
      "Tensor(d!)? query_start_loc, Tensor[] num_blocks, int max_model_len, int past_max_model_len, "
      "int num_tokens_padded, int num_reqs_padded, int cp_world_size, int cp_rank, int cp_interleave, "
      "int[] block_sizes, int[] blocks_per_kv_block, bool[] cp_sharded, bool[] slot_mapping_enabled, "
      "Tensor? target_seq_lens, Tensor(e!)? input_ids, Tensor(f!)? draft_tokens, Tensor? sampled_tokens, "
      "Tensor? draft_step, int num_draft_steps, Tensor(g!)? sample_positions, Tensor? hidden_states, "
      "Tensor(h!)? next_hidden_states, Tensor? max_model_len_tensor=None) -> ()");
  // Row k - 1 of every output is pass k; storage_block_sizes: each group's block size in its KV
  // cache (the slot pairs' format).
  m.def(
      "advance_draft_steps(Tensor query_start_loc, Tensor positions, Tensor seq_lens, Tensor token_indices, "
      "Tensor num_rejected_tokens, Tensor? idx_mapping, Tensor[] block_tables, Tensor[] num_blocks, "
      "Tensor[] target_slot_mappings, Tensor rope_cos_sin_cache, Tensor(a!) out_positions, Tensor(b!) out_seq_lens, "
      "Tensor(c!) out_query_start_loc, Tensor(d!) out_cos_sin, Tensor(e!) out_local_cos_sin, "
      "Tensor(f!) out_local_query_start_loc, Tensor(g!) out_local_seq_lens, Tensor(h!) out_start_pos, "
      "Tensor(i!)[] out_slots, Tensor(j!)[] out_slot_pairs, int num_steps, int num_actual_tokens, "
      "int num_input_tokens, int num_reqs_padded, int max_model_len, int past_max_model_len, int split_size, "
      "int split_rank, int cp_world_size, int cp_rank, int cp_interleave, int[] block_sizes, "
      "int[] blocks_per_kv_block, bool[] cp_sharded, bool[] slot_mapping_enabled, int[] storage_block_sizes, "
      "Tensor? max_model_len_tensor=None) -> ()");
  m.def(
      "expand_parallel_draft_inputs(Tensor target_token_ids, Tensor target_positions, Tensor next_token_ids, "
      "Tensor query_start_loc, Tensor[] block_tables, Tensor? num_rejected_tokens, Tensor? seq_lens, "
      "Tensor? idx_mapping, Tensor[] num_blocks, Tensor(a!) input_ids, Tensor(b!) positions, "
      "Tensor(c!) is_rejected_token_mask, Tensor(d!) is_masked_token_mask, Tensor(e!) token_indices_to_sample, "
      "Tensor(f!)? hidden_state_mapping, Tensor(g!)[] slot_mappings, Tensor(h!) out_query_start_loc, "
      "Tensor(i!)? out_seq_lens, int slots_per_request, bool shift_input_ids, int max_model_len, "
      "int parallel_drafting_token_id, int padding_token_id, int num_tokens_padded, int num_reqs_padded, "
      "int cp_world_size, int cp_rank, int cp_interleave, int[] block_sizes, int[] blocks_per_kv_block, "
      "bool[] cp_sharded, bool[] slot_mapping_enabled) -> ()");
  // end of the step-bookkeeping block
  // docs/pcp.md: prefill context parallelism (DualChunkSwap).
  // Host-only: every rank's layout from host counts (padded_num_tokens -1: the largest rank's
  // count). Returns [padded_gather_idx, gathered_kv_write_mask, hidden_restore_idx, replicated,
  // rank_info (L, then the tokens and the segment count of every rank), segments (int32 [4, S]:
  // request, length, start position, seq_len bound of every rank's segments, rank after rank),
  // local_query_start_loc (int32 [S + P], every rank's n_k + 1 entries, rank after rank)].
  m.def(
      "pcp_partition(Tensor num_scheduled_tokens, Tensor num_computed_tokens, Tensor is_prefilling, "
      "int pcp_world_size, bool shard_decode_requests, int dcp_world_size, int padded_num_tokens) -> Tensor[]");
  m.def(
      "pcp_local_inputs(Tensor global_input_ids, Tensor global_positions, Tensor local_gather_idx, "
      "Tensor local_query_start_loc, int num_local_tokens, Tensor(a!) input_ids, Tensor(b!) positions, "
      "Tensor(c!) seq_lens, int num_reqs_padded) -> ()");
  // num_tokens_padded -1: every buffer padded to its own end.
  m.def(
      "pcp_gathered_slot_mappings(Tensor[] slot_mappings, Tensor padded_gather_idx, Tensor gathered_kv_write_mask, "
      "Tensor(a!)[] out, int num_tokens_padded) -> ()");
}

// Every op that writes a caller's tensor bumps its version (csrc/written_versions.h). Defined
// here, after the schemas (initializers of one file run in order), so that it sees them all.
TORCH_LIBRARY_IMPL(specops, ADInplaceOrView, m) { specops::register_written_version_bumps(m); }
TORCH_LIBRARY_IMPL(specops, Autograd, m) { specops::register_autograd_kernels(m); }
