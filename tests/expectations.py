"""Independent expectations: what each op must write, computed by plain-Python loops over ints.

Every function here is written from the op's contract (the formulas in the op's docstring and in
docs/), one token, request or entry at a time, and shares no code with specops: no reference, no
torch vectorization, no helper of the package. The random tests compare every backend, the
reference included, with these, so a bug the three implementations share still shows; a test
that compared the reference with itself could not fail.

Each function takes the op's inputs and the output buffers as they are before the call, and
returns what the output buffers must hold after it (entries the op must not touch keep their old
values), as tensors of the buffers' dtypes and shapes.
"""

from __future__ import annotations

import torch

PAD = -1  # PAD_SLOT_ID: a slot that must not be written
NULL = 0  # NULL_BLOCK_ID: the block id of an empty table entry
INT32_MAX = 2**31 - 1


def _like(values: list, buffer: torch.Tensor) -> torch.Tensor:
    """values (nested lists of ints) as a tensor of buffer's dtype and shape."""
    return torch.tensor(values, dtype=buffer.dtype).reshape(buffer.shape)


def _wrapped(value: int, dtype: torch.dtype) -> int:
    """value in the two's-complement width of dtype (int32 or int64): its low bits, signed."""
    bits = 64 if dtype == torch.int64 else 32
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def _requests_of(query_start_loc: list[int]) -> list[tuple[int, int, int]]:
    """(request, first token, end token) of every request."""
    return [(r, query_start_loc[r], query_start_loc[r + 1]) for r in range(len(query_start_loc) - 1)]


# compute_slot_mapping -------------------------------------------------------------------------


def slot_of(position: int, table_row: list[int] | None, block_size: int, blocks_per_kv_block: int,
            cp_world_size: int, cp_rank: int, cp_interleave: int, int32_slots: bool) -> int:
    """The KV slot this rank stores `position` of a request at (PAD where it stores none).

    The positions of one allocation block of block_size * blocks_per_kv_block tokens per rank
    are dealt round robin, cp_interleave at a time, to the cp_world_size ranks; a rank keeps the
    positions it is dealt in order, in the kernel blocks of its table row.
    """
    if table_row is None or position < 0 or position > INT32_MAX:
        return PAD
    tokens_per_allocation_block = block_size * blocks_per_kv_block
    span = tokens_per_allocation_block * cp_world_size  # positions one column group covers on all ranks
    allocation_block, offset = divmod(position, span)
    run, inside_run = divmod(offset, cp_interleave)
    if run % cp_world_size != cp_rank:
        return PAD
    local_offset = (run // cp_world_size) * cp_interleave + inside_run  # among this rank's positions
    column = allocation_block * blocks_per_kv_block + local_offset // block_size
    if column >= len(table_row):
        return PAD
    block_id = table_row[column]
    if block_id < 0:
        return PAD
    slot = block_id * block_size + local_offset % block_size
    if int32_slots and slot > INT32_MAX:
        return PAD
    return slot


def compute_slot_mapping(query_start_loc: torch.Tensor, positions: torch.Tensor, block_table: torch.Tensor,
                         block_size: int, out: torch.Tensor, *, blocks_per_kv_block: int = 1, cp_world_size: int = 1,
                         cp_rank: int = 0, cp_interleave: int = 1, idx_mapping: torch.Tensor | None = None,
                         num_tokens_padded: int | None = None) -> torch.Tensor:
    qsl, position_list, table = query_start_loc.tolist(), positions.tolist(), block_table.tolist()
    rows = idx_mapping.tolist() if idx_mapping is not None and idx_mapping.numel() else None
    padded = out.numel() if num_tokens_padded is None else num_tokens_padded
    result = out.tolist()
    for t in range(len(position_list)):
        result[t] = PAD  # a token no request claims stores nothing
    for r, begin, end in _requests_of(qsl):
        row = r if rows is None else rows[r]
        table_row = table[row] if 0 <= row < len(table) else None
        for t in range(begin, end):
            result[t] = slot_of(position_list[t], table_row, block_size, blocks_per_kv_block, cp_world_size, cp_rank,
                                cp_interleave, out.dtype == torch.int32)
    for t in range(len(position_list), padded):
        result[t] = PAD
    return _like(result, out)


# correct_num_computed_tokens, correct_optimistic_seq_lens ---------------------------------------


def corrected_counts(num_computed_tokens: torch.Tensor, num_accepted_tokens: torch.Tensor,
                     prev_positions: torch.Tensor, valid_sampled_token_count: torch.Tensor,
                     prev_num_draft_tokens: torch.Tensor,
                     cpu_num_computed_tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(num_computed_tokens, num_accepted_tokens) after correct_num_computed_tokens.

    Row i continues previous row p = prev_positions[i] when p names a row of all three previous
    buffers and that row drafted: it then counts p's tokens plus p's valid samples, and accepts
    the valid samples; any other row takes the host count and keeps its accepted count. Every
    read sees the values from before the call (the lists are taken first). The counts are int32:
    int64 valid or host counts are taken by their low 32 bits, sums wrap.
    """
    computed_before, accepted_before = num_computed_tokens.tolist(), num_accepted_tokens.tolist()
    valid = [_wrapped(v, torch.int32) for v in valid_sampled_token_count.tolist()]
    drafts = prev_num_draft_tokens.tolist()
    host = cpu_num_computed_tokens.tolist()
    computed, accepted = list(computed_before), list(accepted_before)
    for i, p in enumerate(prev_positions.tolist()):
        continues = 0 <= p < len(valid) and p < len(drafts) and p < len(computed_before) and drafts[p] > 0
        if continues:
            computed[i] = _wrapped(computed_before[p] + valid[p], torch.int32)
            accepted[i] = valid[p]
        else:
            computed[i] = _wrapped(host[i], torch.int32)
    return _like(computed, num_computed_tokens), _like(accepted, num_accepted_tokens)


def corrected_seq_lens(seq_lens_cpu: torch.Tensor, prev_positions: torch.Tensor,
                       valid_sampled_token_count: torch.Tensor, prev_num_draft_tokens: torch.Tensor) -> torch.Tensor:
    """seq_lens_cpu after correct_optimistic_seq_lens: a row that continues a previous row which
    drafted gives back the drafts the device rejected (drafts + 1 bonus - valid samples). As the
    peer's numpy computes it: drafts + 1 in int32, minus the valid count in the valid counts'
    width, the difference in seq_lens', each step wrapping."""
    seq_lens = seq_lens_cpu.tolist()
    valid, drafts = valid_sampled_token_count.tolist(), prev_num_draft_tokens.tolist()
    result = list(seq_lens)
    for i, p in enumerate(prev_positions.tolist()):
        if 0 <= p < len(valid) and p < len(drafts) and drafts[p] > 0:
            rejected = _wrapped(_wrapped(drafts[p] + 1, torch.int32) - valid[p], valid_sampled_token_count.dtype)
            result[i] = _wrapped(seq_lens[i] - rejected, seq_lens_cpu.dtype)
    return _like(result, seq_lens_cpu)


# prepare_positions_and_seq_lens ------------------------------------------------------------------


def positions_and_seq_lens(num_computed_tokens: torch.Tensor, query_start_loc: torch.Tensor, positions: torch.Tensor,
                           seq_lens: torch.Tensor, num_tokens_padded: int, num_reqs_padded: int,
                           idx_mapping: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Token t of request r sits at num_computed_tokens[r] + (t - query_start_loc[r]); request r
    has num_computed_tokens[r] + its query length tokens after the step. With idx_mapping the
    counts are request-indexed (a request mapped to no row has computed nothing). Padding: 0."""
    counts_by_row, qsl = num_computed_tokens.tolist(), query_start_loc.tolist()
    rows = idx_mapping.tolist() if idx_mapping is not None else None
    position_list, seq_len_list = positions.tolist(), seq_lens.tolist()
    for t in range(num_tokens_padded):
        position_list[t] = 0
    for r in range(num_reqs_padded):
        seq_len_list[r] = 0
    for r, begin, end in _requests_of(qsl):
        if rows is None:
            count = counts_by_row[r]
        else:
            count = counts_by_row[rows[r]] if 0 <= rows[r] < len(counts_by_row) else 0
        for t in range(begin, min(end, num_tokens_padded)):
            position_list[t] = count + (t - begin)
        seq_len_list[r] = count + (end - begin)
    return _like(position_list, positions), _like(seq_len_list, seq_lens)


# gather_block_tables, apply_staged_writes -------------------------------------------------------


def gathered_block_tables(src_block_table: torch.Tensor, num_blocks: torch.Tensor, idx_mapping: torch.Tensor,
                          out: torch.Tensor, num_reqs_padded: int, num_computed_tokens: torch.Tensor | None = None,
                          sliding_window_reach: int = 0, block_size: int = 0) -> torch.Tensor:
    """Batch row r holds the first num_blocks[row] ids of source row idx_mapping[r] (as many as
    both tables have columns for) and NULL after them; a request without a source row, and every
    padding row below num_reqs_padded, is all NULL. With a sliding window, the entries wholly
    below the window of the request's first scheduled token are NULL too."""
    src, counts, result = src_block_table.tolist(), num_blocks.tolist(), out.tolist()
    computed = num_computed_tokens.tolist() if num_computed_tokens is not None else None
    columns = out.shape[1]
    source_columns = src_block_table.shape[1]
    mapping = idx_mapping.tolist()
    for r in range(num_reqs_padded):
        new_row = [NULL] * columns
        row = mapping[r] if r < len(mapping) else -1
        if 0 <= row < len(src):
            first = 0
            if computed is not None and sliding_window_reach > 0:
                first_position = computed[row]
                first = max(first_position - sliding_window_reach, 0) // block_size
            for j in range(first, min(counts[row], columns, source_columns)):
                new_row[j] = src[row][j]
        result[r] = new_row
    return _like(result, out)


def staged_table(table: torch.Tensor, rows: torch.Tensor, starts: torch.Tensor, cu_lens: torch.Tensor,
                 values: torch.Tensor) -> torch.Tensor:
    """The table after writing values[cu_lens[k]:cu_lens[k+1]] at row rows[k] from column
    starts[k], write after write; a write that does not fit the table is dropped whole."""
    result, value_list, bounds = table.tolist(), values.tolist(), cu_lens.tolist()
    columns = table.shape[1]
    for k, (row, start) in enumerate(zip(rows.tolist(), starts.tolist())):
        begin, end = bounds[k], bounds[k + 1]
        if not (0 <= row < len(result) and start >= 0 and 0 <= begin <= end <= len(value_list)):
            continue
        if start + (end - begin) > columns:
            continue
        for i in range(end - begin):
            result[row][start + i] = value_list[begin + i]
    return _like(result, table)


# cp_local_metadata, dspark_swa_indices, format_slot_mapping_blocks, dcp_local_seq_lens -------


def cp_slice(num_input_tokens: int, cp_size: int, cp_rank: int) -> tuple[int, int]:
    """[local_start, local_end): this rank's equal share of the stream padded to a multiple of cp_size."""
    tokens_per_rank = 0
    while tokens_per_rank * cp_size < num_input_tokens:
        tokens_per_rank += 1
    return cp_rank * tokens_per_rank, (cp_rank + 1) * tokens_per_rank


def cp_local_metadata(query_start_loc: torch.Tensor, seq_lens: torch.Tensor, num_input_tokens: int, cp_size: int,
                      cp_rank: int, causal: bool, local_query_start_loc: torch.Tensor, local_seq_lens: torch.Tensor,
                      start_pos: torch.Tensor) -> dict:
    """The three outputs and the two maxima of cp_local_metadata, counting tokens one by one.

    A request's local query length is the number of its tokens in this rank's slice. Causally a
    local token cannot see the request's tokens on later ranks, so the local seq_len drops them;
    a request with no local token has local seq_len 0. Padding entries repeat the last start
    (empty requests), and their seq_len and start position are 0.
    """
    local_start, local_end = cp_slice(num_input_tokens, cp_size, cp_rank)
    qsl, seq = query_start_loc.tolist(), seq_lens.tolist()
    starts, lens, start_positions = local_query_start_loc.tolist(), local_seq_lens.tolist(), start_pos.tolist()
    num_reqs = len(seq)
    starts[0] = 0
    running = 0
    local_query_lens = []
    for r, begin, end in _requests_of(qsl):
        local_tokens = sum(1 for t in range(begin, end) if local_start <= t < local_end)
        later_tokens = sum(1 for t in range(begin, end) if t >= local_end)
        local_query_lens.append(local_tokens)
        running += local_tokens
        starts[r + 1] = running
        if local_tokens == 0:
            lens[r] = 0
        elif causal:
            lens[r] = max(seq[r] - later_tokens, 0) if seq[r] > 0 else 0
        else:
            lens[r] = seq[r]
        start_positions[r] = seq[r] - (end - begin)
    for i in range(num_reqs + 1, len(starts)):
        starts[i] = running
    for i in range(num_reqs, len(lens)):
        lens[i] = 0
    for i in range(num_reqs, len(start_positions)):
        start_positions[i] = 0
    return dict(local_query_start_loc=_like(starts, local_query_start_loc),
                local_seq_lens=_like(lens, local_seq_lens), start_pos=_like(start_positions, start_pos),
                max_local_query_len=max([1, *local_query_lens]), max_local_seq_len=max([1, *lens[:num_reqs]]),
                local_start=local_start, local_end=local_end)


def dspark_swa_indices(block_table: torch.Tensor, query_start_loc: torch.Tensor, seq_lens: torch.Tensor, *,
                       window: int, block_size: int, num_tokens: int, width: int, cp_size: int, cp_rank: int,
                       out: torch.Tensor, out_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each token of this rank's slice gets its request's row: the slots of the last `window`
    positions before the request's new tokens and of the new tokens themselves, then PAD; a
    token past the real ones gets a PAD row and length 0. Rows past the slice are untouched."""
    table, qsl, seq = block_table.tolist(), query_start_loc.tolist(), seq_lens.tolist()
    result, lens = out.tolist(), out_lens.tolist()
    local_start, local_end = cp_slice(num_tokens, cp_size, cp_rank)
    for i, t in enumerate(range(local_start, local_end)):
        owner = [r for r, begin, end in _requests_of(qsl) if begin <= t < end]
        row = [PAD] * width
        visible = 0
        if owner:
            r = owner[0]
            query_len = qsl[r + 1] - qsl[r]
            first = max(seq[r] - query_len - window, 0)
            visible = min(max(seq[r] - first, 0), width)
            for j in range(visible):
                position = first + j
                column = position // block_size
                if r < len(table) and column < len(table[r]) and table[r][column] >= 0:
                    slot = table[r][column] * block_size + position % block_size
                    if slot <= INT32_MAX:
                        row[j] = slot
        result[i] = [row]
        lens[i] = visible
    return _like(result, out), _like(lens, out_lens)


def slot_mapping_blocks(slot_mapping: torch.Tensor, block_size: int, out: torch.Tensor) -> torch.Tensor:
    """(block, offset) of every slot with floor division (PAD -1 is block -1, offset
    block_size - 1); rows past the slots hold PAD's pair."""
    slots = slot_mapping.tolist()
    result = []
    for i in range(out.shape[0]):
        slot = slots[i] if i < len(slots) else PAD
        block, offset = divmod(slot, block_size)  # Python's divmod floors, as the contract asks
        result.append([block, offset])
    return _like(result, out)


def dcp_local_seq_len(seq_len: int, cp_world_size: int, cp_rank: int, cp_interleave: int) -> int:
    """The positions below seq_len dealt to cp_rank, cp_interleave at a time, round robin."""
    return sum(1 for p in range(max(seq_len, 0)) if (p // cp_interleave) % cp_world_size == cp_rank)
