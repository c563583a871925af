"""The tree KV ops' contract in plain Python over ints (tree_slot_mappings, tree_compaction_pairs),
independent of the reference: each slot is placed by hand (rank, local position, column), and the
clamps of the device paths are written as the docs state them (docs/tree_kv.md)."""

from __future__ import annotations

PAD = -1
INT32_MAX = 2**31 - 1


def slot(table, row, position, block_size, *, blocks_per_kv_block=1, cp=(1, 0, 1), enabled=True, num_blocks=None):
    """The slot of `position` in row `row` of `table` (a list of lists), PAD where this rank
    does not store it or it has none (no row, past the row or its allocated blocks, a negative
    block id, a position outside [0, 2^31))."""
    world, rank, interleave = cp
    if not enabled or row < 0 or row >= len(table) or not 0 <= position <= INT32_MAX:
        return PAD
    kv_block = block_size * blocks_per_kv_block
    virtual_block, offset = divmod(position, kv_block * world)
    if (offset // interleave) % world != rank:
        return PAD
    local = offset // (world * interleave) * interleave + offset % interleave
    column = virtual_block * blocks_per_kv_block + local // block_size
    usable = len(table[row])
    if num_blocks is not None:
        usable = min(max(num_blocks[row], 0), usable)
    if column >= usable or table[row][column] < 0:
        return PAD
    return table[row][column] * block_size + local % block_size


def _layout(g, block_sizes, cp, cp_sharded, enabled, num_blocks, blocks_per_kv_block):
    return dict(blocks_per_kv_block=blocks_per_kv_block[g] if blocks_per_kv_block else 1,
                cp=cp if cp_sharded is None or cp_sharded[g] else (1, 0, 1),
                enabled=enabled is None or enabled[g], num_blocks=num_blocks[g] if num_blocks else None)


def _position(base, offset):
    """verified_seq_len + offset, or None where the base is no position (negative, past 2^31 - 1)."""
    return base + offset if 0 <= base <= INT32_MAX else None


def tree_slots(verified_seq_len, tables, block_sizes, draft_token_num, *, idx_mapping=None, cp=(1, 0, 1),
               cp_sharded=None, enabled=None, num_blocks=None, blocks_per_kv_block=None):
    """Per group, the slot of token r * D + i at position verified_seq_len[r] + i (no padding)."""
    out = [[] for _ in tables]
    for r, base in enumerate(verified_seq_len):
        row = idx_mapping[r] if idx_mapping is not None else r
        for g, table in enumerate(tables):
            layout = _layout(g, block_sizes, cp, cp_sharded, enabled, num_blocks, blocks_per_kv_block)
            for i in range(draft_token_num):
                position = _position(base, i)
                out[g].append(PAD if position is None else slot(table, row, position, block_sizes[g], **layout))
    return out


def accepted_path(accept_index_row, count, r, draft_token_num, num_steps):
    """The tree index of each node j < S of request r (None: not accepted), the count clamped
    into [0, S - 1] as the device paths clamp it."""
    count = min(max(count, 0), num_steps - 1)
    path = []
    for j in range(num_steps):
        index = accept_index_row[j]
        i = index - r * draft_token_num
        path.append(i if j <= count and 0 <= i < draft_token_num else None)
    return path, count


def compaction(accept_index, accept_token_num, verified_seq_len, tables, block_sizes, draft_token_num, *,
               idx_mapping=None, cp=(1, 0, 1), cp_sharded=None, enabled=None, num_blocks=None,
               blocks_per_kv_block=None):
    """(src per group, dst per group, next_seq_lens, num_accepted_tokens), the pairs flat [bs * S]."""
    num_steps = len(accept_index[0]) if accept_index else 1
    src = [[] for _ in tables]
    dst = [[] for _ in tables]
    next_seq_lens, num_accepted = [], []
    for r, base in enumerate(verified_seq_len):
        row = idx_mapping[r] if idx_mapping is not None else r
        path, count = accepted_path(accept_index[r], accept_token_num[r], r, draft_token_num, num_steps)
        for g, table in enumerate(tables):
            layout = _layout(g, block_sizes, cp, cp_sharded, enabled, num_blocks, blocks_per_kv_block)
            for j, i in enumerate(path):
                if i is None or _position(base, 0) is None:
                    pair = (PAD, PAD)
                else:
                    pair = (slot(table, row, base + i, block_sizes[g], **layout),
                            slot(table, row, base + j, block_sizes[g], **layout))
                    if pair[0] == pair[1]:
                        pair = (PAD, PAD)
                src[g].append(pair[0])
                dst[g].append(pair[1])
        next_seq_lens.append(base + count + 1)
        num_accepted.append(count + 1)
    return src, dst, next_seq_lens, num_accepted
