// prepare_spec_decode_inputs: its metadata checks (the Meta kernel, and every backend's first step),
// then the CPU op: the checks, the values (the positions from the gathered counts included), then
// the correction, positions, seq_lens and every slot mapping stored in one pass over the requests
// (kernels/prepare_spec_decode_inputs.h).
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <vector>

#include "cpu/accounting_checks.h"
#include "cpu/gather_block_tables_checks.h"
#include "cpu/spec_decode_parts.h"
#include "cpu/scratch.h"
#include "cpu/slot_mapping_checks.h"
#include "kernels/dcp_local_seq_lens.h"
#include "kernels/prepare_spec_decode_inputs.h"

namespace specops::cpu {
namespace {

// The gather's arguments as this op names them.
const GatherArgNames kGatherNames{"block_tables", "gathered_block_tables", "num_gathered_rows"};

// The request-indexed mode's and the gather's own conditions.
template <typename Int>
void check_target_step_mode(const at::Tensor& prev_positions, const std::optional<at::Tensor>& idx_mapping,
                            size_t num_groups, c10::IntArrayRef blocks_per_kv_block, at::TensorList num_blocks,
                            bool request_indexed_counts, at::TensorList gathered_block_tables,
                            c10::IntArrayRef sliding_window_reach) {
  if (request_indexed_counts) {
    TORCH_CHECK_VALUE(idx_mapping.has_value(),
                      "idx_mapping must be given with request_indexed_counts (it indexes num_computed_tokens)");
    TORCH_CHECK_VALUE(numel_of<Int>(prev_positions) == 0,
                      "prev_positions must be empty with request_indexed_counts (a runner's request-indexed "
                      "counts have no rows to correct), got ",
                      numel_of<Int>(prev_positions), " entries");
  }
  TORCH_CHECK_VALUE(sliding_window_reach.empty() || sliding_window_reach.size() == num_groups,
                    "sliding_window_reach must be empty or hold one entry per block table (len(block_tables) = ",
                    num_groups, "), got ", sliding_window_reach.size());
  if (gathered_block_tables.empty()) return;
  TORCH_CHECK_VALUE(request_indexed_counts,
                    "gathered_block_tables needs request_indexed_counts (the gather reads the counts by row)");
  TORCH_CHECK_VALUE(gathered_block_tables.size() == num_groups,
                    "gathered_block_tables must be empty or hold one tensor per block table (len(block_tables) = ",
                    num_groups, "), got ", gathered_block_tables.size());
  TORCH_CHECK_VALUE(num_blocks.size() == num_groups,
                    "num_blocks must hold one tensor per block table (len(block_tables) = ", num_groups,
                    ") with gathered_block_tables, got ", num_blocks.size());
  for (size_t g = 0; g < sliding_window_reach.size(); ++g) {
    TORCH_CHECK_VALUE(sliding_window_reach[g] <= 0 || blocks_per_kv_block[g] == 1, "blocks_per_kv_block[", g,
                      "] must be 1 where sliding_window_reach[", g,
                      "] > 0 (the window is masked in blocks of block_sizes[", g, "]), got ", blocks_per_kv_block[g]);
  }
}

// Every output is written once, so no two may share memory. The correction's four inputs are
// read in full before the first store (gathered into scratch), so they may alias any output;
// query_start_loc, idx_mapping, the block tables and their counts are read while storing.
void check_outputs_apart(const at::Tensor& num_computed_tokens, const at::Tensor& num_accepted_tokens,
                         const at::Tensor& query_start_loc, const at::Tensor& positions, const at::Tensor& seq_lens,
                         at::TensorList block_tables, at::TensorList slot_mappings,
                         const std::optional<at::Tensor>& idx_mapping, at::TensorList num_blocks,
                         at::TensorList gathered_block_tables, const StepParts& parts) {
  // Per-thread lists that keep their capacity: the steady state allocates nothing.
  thread_local std::vector<NamedTensor> outputs;
  thread_local std::vector<NamedTensor> read_while_storing;
  outputs.assign({{&num_computed_tokens, {"num_computed_tokens"}},
                  {&num_accepted_tokens, {"num_accepted_tokens"}},
                  {&positions, {"positions"}},
                  {&seq_lens, {"seq_lens"}}});
  read_while_storing.assign({{&query_start_loc, {"query_start_loc"}},
                             {idx_mapping.has_value() ? &*idx_mapping : nullptr, {"idx_mapping"}}});
  for (size_t g = 0; g < block_tables.size(); ++g) {
    outputs.push_back({&slot_mappings[g], {"slot_mappings", static_cast<int64_t>(g)}});
    read_while_storing.push_back({&block_tables[g], {"block_tables", static_cast<int64_t>(g)}});
    if (!num_blocks.empty()) read_while_storing.push_back({&num_blocks[g], {"num_blocks", static_cast<int64_t>(g)}});
  }
  for (size_t g = 0; g < gathered_block_tables.size(); ++g) {
    outputs.push_back({&gathered_block_tables[g], {"gathered_block_tables", static_cast<int64_t>(g)}});
  }
  // The parts run beside the rest in one launch: their outputs meet nothing, their inputs no output.
  if (parts.input_ids.has_value()) {
    const InputIdsArgs args = parts.input_ids_args(*idx_mapping, query_start_loc, num_computed_tokens);
    for (const NamedTensor& output : args.outputs()) outputs.push_back(output);
    // idx_mapping, query_start_loc and num_computed_tokens are the op's own, listed above.
    for (const NamedTensor& input : args.inputs()) {
      if (input.tensor != &*idx_mapping && input.tensor != &query_start_loc && input.tensor != &num_computed_tokens) {
        read_while_storing.push_back(input);
      }
    }
  }
  outputs.push_back({ptr(parts.dcp_local_seq_lens), {"dcp_local_seq_lens"}});
  check_outputs_alias_nothing_once(outputs, read_while_storing);
}

// The op's metadata checks (every tensor on num_computed_tokens' device).
template <typename Int>
void check_prepare_spec_decode_inputs(
    const at::Tensor& num_computed_tokens, const at::Tensor& num_accepted_tokens, const at::Tensor& prev_positions,
    const at::Tensor& valid_sampled_token_count, const at::Tensor& prev_num_draft_tokens,
    const at::Tensor& cpu_num_computed_tokens, const at::Tensor& query_start_loc, const at::Tensor& positions,
    const at::Tensor& seq_lens, at::TensorList block_tables, at::TensorList slot_mappings,
    const std::optional<at::Tensor>& idx_mapping, std::optional<int64_t> tokens_padded,
    std::optional<int64_t> reqs_padded, int64_t cp_world_size, int64_t cp_rank, int64_t cp_interleave,
    c10::IntArrayRef block_sizes, c10::IntArrayRef blocks_per_kv_block, const c10::List<bool>& cp_sharded,
    const c10::List<bool>& slot_mapping_enabled, at::TensorList num_blocks, bool request_indexed_counts,
    at::TensorList gathered_block_tables, int64_t num_gathered_rows, c10::IntArrayRef sliding_window_reach,
    const OptTensor& input_ids, const OptTensor& prefill_len, const OptTensor& last_sampled_tokens,
    const OptTensor& draft_tokens, const OptTensor& cu_num_logits, int64_t num_new_sampled_tokens,
    const OptTensor& all_token_ids, const OptTensor& next_prefill_tokens, const OptTensor& logits_indices,
    const OptTensor& expanded_idx_mapping, const OptTensor& expanded_local_pos, int64_t num_logits_padded,
    const OptTensor& dcp_local_seq_lens) {
  const StepParts parts{input_ids,      prefill_len,          last_sampled_tokens, draft_tokens,
                        cu_num_logits,  num_new_sampled_tokens, all_token_ids,     next_prefill_tokens,
                        logits_indices, expanded_idx_mapping, expanded_local_pos,  num_logits_padded,
                        dcp_local_seq_lens};
  const size_t num_groups = block_tables.size();
  const GroupSettings settings{block_sizes,   blocks_per_kv_block, cp_sharded,   slot_mapping_enabled,
                               cp_world_size, cp_rank,             cp_interleave};
  settings.check(num_groups);
  const Int num_tokens_padded = tokens_padded.has_value() ? Int(*tokens_padded) : numel_of<Int>(positions);
  const Int num_reqs_padded = reqs_padded.has_value() ? Int(*reqs_padded) : numel_of<Int>(seq_lens);
  // The pairs of outputs (and query_start_loc) these would test are tested with the op's others
  // below, each tensor's span computed once.
  check_count_correction<Int>(num_computed_tokens, num_accepted_tokens, prev_positions, valid_sampled_token_count,
                              prev_num_draft_tokens, cpu_num_computed_tokens, /*check_outputs_apart=*/false);
  check_positions_and_seq_lens<Int>(num_computed_tokens, query_start_loc, positions, seq_lens, num_tokens_padded,
                                    num_reqs_padded, request_indexed_counts, /*check_outputs_apart=*/false);
  const Anchor anchor = anchor_of(num_computed_tokens, "num_computed_tokens");
  check_target_step_mode<Int>(prev_positions, idx_mapping, num_groups, blocks_per_kv_block, num_blocks,
                              request_indexed_counts, gathered_block_tables, sliding_window_reach);
  check_context_parallel(cp_world_size, cp_rank, cp_interleave);
  TORCH_CHECK_VALUE(slot_mappings.size() == num_groups,
                    "slot_mappings must have one tensor per block table (len(block_tables) = ", num_groups, "), got ",
                    slot_mappings.size());
  for (size_t g = 0; g < num_groups; ++g) {
    const GroupSettings::Cp cp = settings.cp(g);
    // The token count is a value (query_start_loc[R]): the slot mapping's sizes are checked
    // against 0 tokens here, the count on the host (check_token_padding).
    check_slot_mapping_args<Int>(block_tables[g], block_sizes[g], slot_mappings[g], blocks_per_kv_block[g],
                                 cp.world_size, cp.rank, cp.interleave, Int(0), num_tokens_padded, &anchor,
                                 SlotMappingArgNames::of_group(static_cast<int64_t>(g)));
  }
  TORCH_CHECK_VALUE(num_blocks.empty() || num_blocks.size() == num_groups,
                    "num_blocks must be empty or hold one tensor per block table (len(block_tables) = ", num_groups,
                    "), got ", num_blocks.size());
  for (size_t g = 0; g < num_blocks.size(); ++g) {
    check_num_blocks<Int>(num_blocks[g], ArgName{"num_blocks", static_cast<int64_t>(g)}, block_tables[g],
                          ArgName{"block_tables", static_cast<int64_t>(g)}, &anchor);
  }
  check_idx_mapping(idx_mapping, numel_of<Int>(query_start_loc) - 1, &anchor);
  if (!gathered_block_tables.empty()) {
    // Checked as gather_block_tables_multi checks them, under this op's names.
    const std::vector<int64_t> no_reach(num_groups, 0);
    check_gather_groups<Int>(block_tables, num_blocks, *idx_mapping, gathered_block_tables, num_gathered_rows,
                             &num_computed_tokens,
                             sliding_window_reach.empty() ? c10::IntArrayRef(no_reach) : sliding_window_reach,
                             block_sizes, kGatherNames);
  }
  check_step_parts<Int>(parts, num_computed_tokens, query_start_loc, idx_mapping, request_indexed_counts, cp_world_size,
                        cp_interleave, anchor);
  check_outputs_apart(num_computed_tokens, num_accepted_tokens, query_start_loc, positions, seq_lens, block_tables,
                      slot_mappings, idx_mapping, num_blocks, gathered_block_tables, parts);
}

void prepare_spec_decode_inputs(const at::Tensor& num_computed_tokens, const at::Tensor& num_accepted_tokens,
                                const at::Tensor& prev_positions, const at::Tensor& valid_sampled_token_count,
                                const at::Tensor& prev_num_draft_tokens, const at::Tensor& cpu_num_computed_tokens,
                                const at::Tensor& query_start_loc, const at::Tensor& positions,
                                const at::Tensor& seq_lens, at::TensorList block_tables, at::TensorList slot_mappings,
                                const std::optional<at::Tensor>& idx_mapping,
                                std::optional<int64_t> tokens_padded, std::optional<int64_t> reqs_padded,
                                int64_t cp_world_size, int64_t cp_rank, int64_t cp_interleave,
                                c10::IntArrayRef block_sizes, c10::IntArrayRef blocks_per_kv_block,
                                const c10::List<bool>& cp_sharded, const c10::List<bool>& slot_mapping_enabled,
                                at::TensorList num_blocks, bool request_indexed_counts,
                                at::TensorList gathered_block_tables, int64_t num_gathered_rows,
                                c10::IntArrayRef sliding_window_reach, const OptTensor& input_ids,
                                const OptTensor& prefill_len, const OptTensor& last_sampled_tokens,
                                const OptTensor& draft_tokens, const OptTensor& cu_num_logits,
                                int64_t num_new_sampled_tokens, const OptTensor& all_token_ids,
                                const OptTensor& next_prefill_tokens, const OptTensor& logits_indices,
                                const OptTensor& expanded_idx_mapping, const OptTensor& expanded_local_pos,
                                int64_t num_logits_padded, const OptTensor& dcp_local_seq_lens) {
  check_prepare_spec_decode_inputs<int64_t>(
      num_computed_tokens, num_accepted_tokens, prev_positions, valid_sampled_token_count, prev_num_draft_tokens,
      cpu_num_computed_tokens, query_start_loc, positions, seq_lens, block_tables, slot_mappings, idx_mapping,
      tokens_padded, reqs_padded, cp_world_size, cp_rank, cp_interleave, block_sizes, blocks_per_kv_block, cp_sharded,
      slot_mapping_enabled, num_blocks, request_indexed_counts, gathered_block_tables, num_gathered_rows,
      sliding_window_reach, input_ids, prefill_len, last_sampled_tokens, draft_tokens, cu_num_logits,
      num_new_sampled_tokens, all_token_ids, next_prefill_tokens, logits_indices, expanded_idx_mapping,
      expanded_local_pos, num_logits_padded, dcp_local_seq_lens);
  const StepParts parts{input_ids,      prefill_len,          last_sampled_tokens, draft_tokens,
                        cu_num_logits,  num_new_sampled_tokens, all_token_ids,     next_prefill_tokens,
                        logits_indices, expanded_idx_mapping, expanded_local_pos,  num_logits_padded,
                        dcp_local_seq_lens};
  // The input ids' values, checked before anything is written (their writes come last).
  std::optional<InputIdsArgs> input_ids_args;
  std::optional<InputIdsCall> input_ids_call;
  if (input_ids.has_value()) {
    input_ids_args.emplace(parts.input_ids_args(*idx_mapping, query_start_loc, num_computed_tokens));
    input_ids_call.emplace(InputIdsCall::checked(*input_ids_args));
  }
  const size_t num_groups = block_tables.size();
  const GroupSettings settings{block_sizes,   blocks_per_kv_block, cp_sharded,   slot_mapping_enabled,
                               cp_world_size, cp_rank,             cp_interleave};
  const int64_t num_tokens_padded = tokens_padded.value_or(positions.numel());
  const int64_t num_reqs_padded = reqs_padded.value_or(seq_lens.numel());
  const int64_t num_tokens = check_token_padding(query_start_loc, positions, num_tokens_padded);
  const kernels::CountCorrectionShape correction =
      count_correction_shape(num_computed_tokens, prev_positions, valid_sampled_token_count, prev_num_draft_tokens);
  const int64_t num_reqs = query_start_loc.numel() - 1;
  // Per-thread lists that keep their capacity: the steady state allocates nothing.
  thread_local std::vector<kernels::SlotMappingGroup> groups;
  groups.clear();
  for (size_t g = 0; g < num_groups; ++g) {
    const GroupSettings::Cp cp = settings.cp(g);
    kernels::SlotMappingShape shape = slot_mapping_shape(block_tables[g], block_sizes[g], blocks_per_kv_block[g],
                                                         cp.world_size, cp.rank, cp.interleave, num_reqs, num_tokens,
                                                         num_tokens_padded);
    if (!num_blocks.empty()) shape.num_blocks = num_blocks[g].data_ptr<int32_t>();
    const at::Tensor& out = slot_mappings[g];
    const bool wide = out.scalar_type() == c10::kLong;
    groups.emplace_back(block_tables[g].data_ptr<int32_t>(), wide ? out.data_ptr<int64_t>() : nullptr,
                        wide ? nullptr : out.data_ptr<int32_t>(), shape, settings.enabled(g));
  }
  // The gather's groups.
  c10::SmallVector<kernels::GatherBlockTablesGroup, 4> gather_groups;
  if (!gathered_block_tables.empty()) {
    const std::vector<int64_t> no_reach(num_groups, 0);
    gather_groups = gather_groups_of(
        block_tables, num_blocks, *idx_mapping, gathered_block_tables, num_gathered_rows, &num_computed_tokens,
        sliding_window_reach.empty() ? c10::IntArrayRef(no_reach) : sliding_window_reach, block_sizes);
  }

  // The gathered counts, and room for every request's corrected count (the gathered ones
  // themselves when the correction covers every request, as it usually does).
  const int64_t gathered_requests = std::min(num_reqs, correction.num_rows);
  const int64_t request_room = gathered_requests == num_reqs ? 0 : num_reqs;
  int32_t* new_computed = int32_scratch(2 * correction.num_rows + request_room);
  int32_t* new_accepted = new_computed + correction.num_rows;
  int32_t* request_counts = request_room == 0 ? new_computed : new_accepted + correction.num_rows;
  int32_t* counts = num_computed_tokens.data_ptr<int32_t>();
  const int32_t* qsl = query_start_loc.data_ptr<int32_t>();
  kernels::PositionsShape positions_shape;
  positions_shape.num_reqs = num_reqs;
  positions_shape.num_tokens_padded = num_tokens_padded;
  positions_shape.num_reqs_padded = num_reqs_padded;

  with_correction_inputs(prev_positions, valid_sampled_token_count, cpu_num_computed_tokens,
                         [&](auto* prev, auto* valid, auto* host) {
                           kernels::gather_corrected_counts(counts, num_accepted_tokens.data_ptr<int32_t>(), prev,
                                                            valid, prev_num_draft_tokens.data_ptr<int32_t>(), host,
                                                            new_computed, new_accepted, correction);
                         });
  // Request-indexed: every request's count is request_counts' (filled below), none the buffer's.
  const kernels::CorrectedCounts corrected =
      request_indexed_counts ? kernels::CorrectedCounts{request_counts, num_reqs, counts}
                             : kernels::CorrectedCounts{new_computed, correction.num_rows, counts};
  // Every request's count (request-indexed: the runner's through idx_mapping, a request without
  // a row counting 0; else the corrected rows, then the untouched ones), and the range of
  // positions they give: one pass that most groups' checks need nothing beyond.
  // Decided by request_room, never by comparing pointers: with no row corrected (an empty
  // prev_positions) the room starts where new_computed does, so the two pointers are equal and
  // yet the room holds whatever the thread's last call left there until it is filled.
  if (request_indexed_counts) {
    with_idx_mapping(idx_mapping, [&](auto* idx) {
      check_rows_inside_table(idx, num_reqs, num_computed_tokens.numel(), "num_computed_tokens");
      for (int64_t r = 0; r < num_reqs; ++r) request_counts[r] = idx[r] < 0 ? 0 : counts[idx[r]];
    });
  } else if (request_room != 0) {
    std::copy(new_computed, new_computed + gathered_requests, request_counts);
    std::copy(counts + gathered_requests, counts + num_reqs, request_counts + gathered_requests);
  }
  const kernels::RequestPositionRange range = kernels::request_position_range(qsl, request_counts, num_reqs);

  with_idx_mapping(idx_mapping, [&](auto* idx) {
    using IdxT = std::remove_const_t<std::remove_pointer_t<decltype(idx)>>;
    if (!gather_groups.empty()) {
      check_gather_rows(idx, num_reqs, {gather_groups.data(), gather_groups.size()}, kGatherNames);
    }
    for (size_t g = 0; g < num_groups; ++g) {
      kernels::SlotMappingGroup& group = groups[g];
      if (!group.enabled()) continue;  // its table is never read
      check_rows_inside_table(idx, num_reqs, group.shape.block_table_rows,
                              ArgName{"block_tables", static_cast<int64_t>(g)});
      // Without per-row counts every row covers table_covered positions: the shared range decides.
      const bool all_inside = group.shape.num_blocks == nullptr && range.inside(group.table_covered);
      group.all_covered = all_inside;
      const int64_t bad = all_inside ? -1 : kernels::find_request_beyond_block_table<IdxT>(qsl, corrected, idx, group);
      if (bad >= 0) {
        const int64_t first = corrected(bad), query_len = qsl[bad + 1] - qsl[bad];
        const int64_t row = idx ? static_cast<int64_t>(idx[bad]) : bad;
        // The first of the request's positions that the group cannot map.
        int64_t position = first;
        const int64_t columns = kernels::usable_columns(group.shape, row);
        while (position >= 0 && position <= INT32_MAX && position < first + query_len - 1) {
          const kernels::TokenPlacement p =
              kernels::place_token<kernels::CpLayout::kInterleaved>(static_cast<uint32_t>(position), group.divisors);
          if (p.local && p.column >= columns) break;
          ++position;
        }
        std::ostringstream counts_name;
        counts_name << ArgName{"num_blocks", static_cast<int64_t>(g)};
        TORCH_CHECK_VALUE(false, "positions of request ", bad, " (from num_computed_tokens = ", first,
                          " after the correction, query_len = ", query_len, "): ",
                          position_outside_message(position, bad, row, group.shape, group.divisors,
                                                   ArgName{"block_tables", static_cast<int64_t>(g)},
                                                   counts_name.str()));
      }
      if (group.out32 == nullptr) continue;
      // An int32 slot mapping: its slots are computed wide and checked before the first store.
      int64_t* wide = int64_scratch(num_tokens);
      const int64_t past = kernels::find_group_slot_past_int32<IdxT>(qsl, request_counts, idx, group, wide);
      TORCH_CHECK_VALUE(past < 0, "slot_mappings[", g, "] is int32, but token ", past, " has slot ",
                        wide[past < 0 ? 0 : past], " (its block id in block_tables[", g, "] times block_sizes[", g,
                        "] = ", group.shape.block_size, "), past 2^31 - 1; pass an int64 slot mapping");
    }
    AT_DISPATCH_INDEX_TYPES(positions.scalar_type(), "prepare_spec_decode_inputs", [&] {
      kernels::store_spec_decode_inputs<index_t, IdxT>(
          new_computed, new_accepted, correction.num_rows, request_counts, counts,
          num_accepted_tokens.data_ptr<int32_t>(), qsl,
          positions.data_ptr<index_t>(), seq_lens.data_ptr<int32_t>(), positions_shape, idx, groups.data(),
          static_cast<int64_t>(num_groups));
    });
    if (!gather_groups.empty()) {
      kernels::gather_block_tables_multi<IdxT>(idx, gather_groups.data(), static_cast<int64_t>(gather_groups.size()));
    }
  });
  if (input_ids_call.has_value()) input_ids_call->run();
  if (dcp_local_seq_lens.has_value()) {
    // The DCP-local lengths of the seq_lens just stored (0 past R, to the output's end).
    kernels::DcpLocalSeqLensShape shape;
    shape.num_reqs = num_reqs;
    shape.num_out = dcp_local_seq_lens->numel();
    shape.world_size = cp_world_size;
    shape.rank = cp_rank;
    shape.interleave = cp_interleave;
    kernels::dcp_local_seq_lens<int32_t>(seq_lens.data_ptr<int32_t>(), dcp_local_seq_lens->data_ptr<int32_t>(), shape);
  }
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  // Fused: the correction, positions and seq_lens, and the slot mapping of every KV-cache group.
  // The multi-group ops (this one, advance_draft_step, advance_draft_steps,
  // expand_parallel_draft_inputs) take one entry per block table in block_sizes,
  // blocks_per_kv_block, cp_sharded (else a single rank) and slot_mapping_enabled (else every
  // slot PAD, the table never read). num_blocks: empty, or the blocks allocated to each table
  // row, one tensor per group. num_tokens_padded / num_reqs_padded None: positions.numel() /
  // seq_lens.numel(), as the wrapper's defaults. request_indexed_counts: num_computed_tokens is
  // a runner's request-indexed counts (read through idx_mapping, no correction); then
  // gathered_block_tables (empty: none) receive gather_block_tables_multi of the block tables
  // (rows [0, num_gathered_rows), sliding_window_reach per group or empty) in the same call, and
  // with input_ids, prepare_input_ids' writes (its arguments under its names; input_ids not padded
  // past T); dcp_local_seq_lens: dcp_local_seq_lens of the seq_lens (0 past R, to its end).
  m.def(
      "prepare_spec_decode_inputs(Tensor(a!) num_computed_tokens, Tensor(b!) num_accepted_tokens, "
      "Tensor prev_positions, Tensor valid_sampled_token_count, Tensor prev_num_draft_tokens, "
      "Tensor cpu_num_computed_tokens, Tensor query_start_loc, Tensor(c!) positions, Tensor(d!) seq_lens, "
      "Tensor[] block_tables, Tensor(e!)[] slot_mappings, Tensor? idx_mapping, int? num_tokens_padded, "
      "int? num_reqs_padded, int cp_world_size, int cp_rank, int cp_interleave, int[] block_sizes, "
      "int[] blocks_per_kv_block, bool[] cp_sharded, bool[] slot_mapping_enabled, Tensor[] num_blocks, "
      "bool request_indexed_counts, Tensor(f!)[] gathered_block_tables, int num_gathered_rows, "
      "int[] sliding_window_reach, Tensor(g!)? input_ids=None, Tensor? prefill_len=None, "
      "Tensor? last_sampled_tokens=None, Tensor? draft_tokens=None, Tensor? cu_num_logits=None, "
      "int num_new_sampled_tokens=1, Tensor? all_token_ids=None, Tensor(h!)? next_prefill_tokens=None, "
      "Tensor(i!)? logits_indices=None, Tensor(j!)? expanded_idx_mapping=None, "
      "Tensor(k!)? expanded_local_pos=None, int num_logits_padded=-1, Tensor(l!)? dcp_local_seq_lens=None) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("prepare_spec_decode_inputs", &prepare_spec_decode_inputs); }
TORCH_LIBRARY_IMPL(specops, Meta, m) {
  m.impl("prepare_spec_decode_inputs", &check_prepare_spec_decode_inputs<c10::SymInt>);
}

}  // namespace specops::cpu
