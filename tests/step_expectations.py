"""The step-bookkeeping ops written from their contract in plain Python (lists and ints, valid
input only): the independent oracle of test_prepare_input_ids.py, test_count_sampled_and_rejected.py,
test_post_update_after_sampling.py, test_prepare_next_token_ids.py, test_advance_draft_step.py,
test_expand_parallel_draft_inputs.py and test_prepare_draft_prefill_inputs.py."""

from __future__ import annotations

PAD = -1


def input_ids(idx_mapping, qsl, num_computed, prefill_len, last_sampled, drafts, cu, *, num_new=1,
              all_token_ids=None, num_lookahead=0, input_ids_before, next_prefill_before=None):
    """(input_ids, next_prefill_tokens, logits_indices, expanded_idx_mapping, expanded_local_pos)."""
    ids = list(input_ids_before)
    nxt = [list(row) for row in next_prefill_before] if next_prefill_before is not None else None
    logits, expanded, local = [], [], []
    for r, row in enumerate(idx_mapping):
        q0, q1 = qsl[r], qsl[r + 1]
        n_log = cu[r + 1] - cu[r]
        n_draft = n_log - num_new
        for j in range(n_log):
            logits.append(q1 - n_log + j)
            expanded.append(row)
            local.append(j)
        if row < 0:
            continue
        nc, pl = num_computed[row], prefill_len[row]
        seq_len = nc + q1 - q0
        if all_token_ids is not None and nc < pl:
            for j in range(q1 - q0):
                ids[q0 + j] = all_token_ids[row][nc + j]
            for k in range(num_lookahead):
                nxt[k][row] = all_token_ids[row][seq_len + k] if seq_len + k < pl else 0
        if seq_len > pl:
            if num_new == 1 and seq_len - n_log >= pl:
                ids[q1 - n_log] = last_sampled[row]
            for j in range(n_draft):
                ids[q1 - n_draft + j] = drafts[row][j]
    return ids, nxt, logits, expanded, local


def sampled_and_rejected(num_sampled, seq_lens, cu, idx_mapping, prefill_len):
    sampled, rejected = [], []
    for r, row in enumerate(idx_mapping):
        if row < 0 or seq_lens[r] < prefill_len[row]:
            sampled.append(0)
            rejected.append(0)
        else:
            sampled.append(num_sampled[r])
            rejected.append(cu[r + 1] - cu[r] - num_sampled[r])
    return sampled, rejected


def int32(value):
    """value as an int32 store keeps it (the low 32 bits, signed)."""
    return (value + 2**31) % 2**32 - 2**31


def draft_prefill_inputs(target_ids, target_positions, idx_mapping, qsl, seq_lens, num_sampled, num_rejected,
                         last_sampled, next_prefill, *, ids_before, positions_before, qsl_before, seq_lens_before,
                         last_index_before, mapping_before=None, id_bits=32, position_bits=64):
    """(input_ids, positions, out_query_start_loc, out_seq_lens, last_token_indices,
    request_idx_mapping) after the call: each request's kept tokens one at a time.
    last_sampled and next_prefill are the request rows' values (row 0 of an [L, M] one)."""
    def fit(value, bits):
        return value if bits == 64 else int32(value)

    ids, positions = list(ids_before), list(positions_before)
    out_qsl, out_seq_lens, last_index = list(qsl_before), list(seq_lens_before), list(last_index_before)
    mapping = list(mapping_before) if mapping_before is not None else None
    num_reqs = len(idx_mapping)
    for r, row in enumerate(idx_mapping):
        start = qsl[r]
        kept = qsl[r + 1] - start - num_rejected[r]
        # The sampled token when the request sampled one this step, else the prompt's next token.
        next_token = int32(last_sampled[row]) if num_sampled[r] > 0 else next_prefill[row]
        for j in range(kept):
            ids[start + j] = fit(target_ids[start + j + 1], id_bits) if j < kept - 1 else next_token
            positions[start + j] = fit(target_positions[start + j], position_bits)
        last_index[r] = start + kept - 1
        out_qsl[r] = start
        out_seq_lens[r] = seq_lens[r]
        if mapping is not None:
            mapping[r] = row
    for i in range(num_reqs, len(out_qsl)):
        out_qsl[i] = qsl[num_reqs]
    for i in range(num_reqs, len(out_seq_lens)):
        out_seq_lens[i] = 0
    for i in range(num_reqs, len(last_index)):
        last_index[i] = 0
    if mapping is not None:
        for i in range(num_reqs, len(mapping)):
            mapping[i] = -1
    return ids, positions, out_qsl, out_seq_lens, last_index, mapping


def post_update(idx_mapping, num_computed, *, qsl=None, sampled=None, num_sampled=None, num_rejected=None,
                last_sampled=None, all_token_ids=None, total_len=None, bins=None, drafts=None, drafts_out=None):
    """The request state after the step, as new lists (the inputs are left as they are)."""
    num_computed = list(num_computed)
    state = dict(last_sampled=list(last_sampled) if last_sampled is not None else None,
                 all_token_ids=[list(row) for row in all_token_ids] if all_token_ids is not None else None,
                 total_len=list(total_len) if total_len is not None else None,
                 bins=[list(row) for row in bins] if bins is not None else None,
                 drafts_out=[list(row) for row in drafts_out] if drafts_out is not None else None)
    for r, row in enumerate(idx_mapping):
        if row < 0:
            continue
        qlen = qsl[r + 1] - qsl[r] if qsl is not None else 0
        if sampled is None:
            num_computed[row] += qlen
            continue
        if drafts is not None:
            state["drafts_out"][row] = list(drafts[r])
        ns, n0 = num_sampled[r], state["total_len"][row]
        if ns > 0:
            state["last_sampled"][row] = sampled[r][ns - 1]
            state["total_len"][row] = n0 + ns
        for i in range(ns):
            state["all_token_ids"][row][n0 + i] = sampled[r][i]
            if bins is not None:
                state["bins"][row][sampled[r][i]] += 1
        num_computed[row] += qlen - num_rejected[r]
    return num_computed, state


def next_tokens(sampled, vocab_size, *, discard=None, backup=None, cu=None, qsl=None):
    """(next, count, rejected, index); the last two None without cu."""
    nxt, counts, rejected, index = [], [], [], []
    for r, row in enumerate(sampled):
        valid = [j for j, x in enumerate(row) if 0 <= x < vocab_size]
        dropped = discard is not None and discard[r]
        count = 0 if dropped else len(valid)
        nxt.append(backup[r] if dropped or count == 0 else row[valid[-1]])
        counts.append(count)
        if cu is not None:
            d = cu[r] - (cu[r - 1] if r > 0 else 0)
            rej = d + 1 - count if d > 0 else 0
            rejected.append(rej)
            index.append(max(qsl[r + 1] - 1 - rej, qsl[r]))
    return nxt, counts, (rejected if cu is not None else None), (index if cu is not None else None)


def cp_slot(table_row, position, block_size, blocks_per_kv_block=1, world=1, rank=0, interleave=1):
    """compute_slot_mapping's slot of one position, PAD when another rank stores it."""
    kv_block = block_size * blocks_per_kv_block
    virtual = position // (kv_block * world)
    offset = position % (kv_block * world)
    if (offset // interleave) % world != rank:
        return PAD
    local = offset // (world * interleave) * interleave + offset % interleave
    column = virtual * blocks_per_kv_block + local // block_size
    return table_row[column] * block_size + local % block_size


def draft_step(positions, seq_lens, tables, block_sizes, *, max_model_len, rule="reset", token_indices=None,
               num_rejected=None, idx_mapping=None, cp=(1, 0, 1), cp_sharded=None, enabled=None):
    """(positions, seq_lens, slots per group) of R requests."""
    num_reqs = len(token_indices) if token_indices is not None else len(positions)
    out_pos, out_seq, slots = [], [], [[] for _ in tables]
    for r in range(num_reqs):
        p = (positions[token_indices[r]] if token_indices is not None else positions[r]) + 1
        base = seq_lens[r] - (num_rejected[r] if num_rejected is not None else 0)
        if rule == "reset":
            over = p >= max_model_len
            position = 0 if over else p
            seq_len = min(1 if over else base + 1, max_model_len)
        else:
            over = False
            position = min(p, max_model_len - 1)
            seq_len = min(base + 1, max_model_len)
        out_pos.append(position)
        out_seq.append(seq_len)
        row = idx_mapping[r] if idx_mapping is not None else r
        for g, table in enumerate(tables):
            sharded = cp_sharded is None or cp_sharded[g]
            world, rank, interleave = cp if sharded else (1, 0, 1)
            on = enabled is None or enabled[g]
            if over or row < 0 or not on:
                slots[g].append(PAD)
            else:
                slots[g].append(cp_slot(table[row], position, block_sizes[g], 1, world, rank, interleave))
    return out_pos, out_seq, slots


def parallel_draft(target_ids, target_positions, next_ids, qsl, tables, block_sizes, *, slots, max_model_len,
                   draft_token, shift=True, padding_token=0, num_rejected=None, seq_lens=None, idx_mapping=None,
                   cp=(1, 0, 1), cp_sharded=None, enabled=None):
    """expand_parallel_draft_inputs' real outputs as a dict of lists (no padding)."""
    s = 1 if shift else 0
    n = slots - s
    num_reqs = len(next_ids)
    total = len(target_ids) + num_reqs * n
    out = dict(input_ids=[None] * total, positions=[None] * total, rejected=[False] * total, masked=[False] * total,
               indices=[None] * (num_reqs * slots), hidden=[None] * len(target_ids) if shift else None,
               slots=[[None] * total for _ in tables], qsl=[], seq_lens=None)
    for r in range(num_reqs):
        q0, q = qsl[r], qsl[r + 1] - qsl[r]
        nv = q - (num_rejected[r] if num_rejected is not None else 0) - s
        row = idx_mapping[r] if idx_mapping is not None else r
        for j in range(q + n):
            o = q0 + r * n + j
            if j < nv:
                token = target_ids[q0 + j + s]
            elif j == nv:
                token = next_ids[r]
            elif j < nv + slots:
                token = draft_token
                out["masked"][o] = True
            else:
                token = padding_token
                out["rejected"][o] = True
            out["input_ids"][o] = token
            position = 0 if out["rejected"][o] else target_positions[q0] + j
            out["positions"][o] = position
            if nv <= j < nv + slots:
                out["indices"][r * slots + j - nv] = o
            if shift and j < q:
                out["hidden"][q0 + j] = o
            for g, table in enumerate(tables):
                sharded = cp_sharded is None or cp_sharded[g]
                world, rank, interleave = cp if sharded else (1, 0, 1)
                on = enabled is None or enabled[g]
                if out["rejected"][o] or position >= max_model_len or row < 0 or not on:
                    out["slots"][g][o] = PAD
                else:
                    out["slots"][g][o] = cp_slot(table[row], position, block_sizes[g], 1, world, rank, interleave)
        out["qsl"].append(q0 + r * n)
    out["qsl"].append(total)
    if seq_lens is not None:
        out["seq_lens"] = [seq_lens[r] + n for r in range(num_reqs)]
    return out
