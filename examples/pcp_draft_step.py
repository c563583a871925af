"""A target on two prefill-context-parallel (PCP) ranks and a replicated draft, step after step.

Each step a plain-Python scheduler mixes decodes (1 token) and prefill chunks. The target runs
PCP = 2 (DualChunkSwap): `pcp_partition` lays the global batch out over the two ranks (decodes
sharded round-robin), each rank gathers its input ids and positions (`pcp_local_inputs`) and
its local block table (`gather_block_tables` on the local request rows), and a stand-in model
computes every local token's hidden state and KV. The two ranks' outputs are "all-gathered"
(concatenated, as torch.distributed would), the KV is written through the gathered slot
mapping of each KV-cache group (`pcp_gathered_slot_mappings`) into a KV stand-in, and the
hidden states are put back in global order with `hidden_restore_idx`.

The draft model runs replicated: PCP = 1 over the global batch on every rank, on graphs
captured on its default buffers, which under PCP nothing else writes. As vllm-ascend #16300
does, the runner refreshes them from the global batch each step: a `PersistentMappings` with
int32 slots (Ascend's cache writes read int32) and pad-to-end, refreshed with the peer's call
shape (query_start_loc of num_reqs_padded + 1 entries, positions in a persistent buffer).

Every step is checked against a plain-Python ground truth: every token's KV written exactly
once at its slot with its value, the restored hidden states equal to the global ones, the
draft's captured slots and table rows equal to the global batch's, PAD / NULL to their ends,
and the captured buffers' addresses unchanged.

Run: python examples/pcp_draft_step.py [--steps 30] [--seed 0]
"""

from __future__ import annotations

import argparse
import random

import torch

import specops
from specops import MappingGroup, PersistentMappings

PCP = 2
BLOCK_SIZES = (16, 8)  # the target's two KV-cache groups; the draft has one group of 16
MAX_NUM_REQS = 6
MAX_NUM_TOKENS = 96
MAX_BLOCKS = 16  # per request and group: room for 128 tokens of the smallest block
CHUNK = 40  # the largest prefill chunk


def new_mappings(block_sizes, **options) -> PersistentMappings:
    return PersistentMappings([MappingGroup(b) for b in block_sizes], max_num_reqs=MAX_NUM_REQS,
                              max_num_blocks_per_req=MAX_BLOCKS, max_num_tokens=MAX_NUM_TOKENS, **options)


def hidden_of(ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    return torch.stack([ids.double(), positions.double()], dim=1)


def run(steps: int, seed: int) -> int:
    rng = random.Random(seed)
    target = new_mappings(BLOCK_SIZES)
    draft = new_mappings((16,), slot_dtype=torch.int32, pad_to_end=True)
    draft_addresses = (draft.slot_mappings[0].data_ptr(), draft.block_tables[0].data_ptr())
    draft_positions = torch.zeros(MAX_NUM_TOKENS, dtype=torch.int64)  # the peer's persistent positions
    prompt = {}  # request row -> prompt length
    computed = {}  # request row -> tokens computed so far
    next_block = 1
    for step in range(steps):
        # Schedule: admit requests into free rows, then give each one a decode or a prefill chunk.
        for row in range(MAX_NUM_REQS):
            if row not in prompt and rng.random() < 0.5:
                prompt[row], computed[row] = rng.randint(1, 90), 0
        rows = [r for r in sorted(prompt) if computed[r] < 120]
        rng.shuffle(rows)
        q, c, f, budget = [], [], [], MAX_NUM_TOKENS
        for row in list(rows):
            prefilling = computed[row] < prompt[row]
            n = min(prompt[row] - computed[row], CHUNK) if prefilling else 1
            if n > budget:
                rows.remove(row)
                continue
            budget -= n
            q.append(n), c.append(computed[row]), f.append(prefilling)
        # Allocate every scheduled position's blocks before the step, in both mappings.
        for row, n, start in zip(rows, q, c):
            for mappings in (target, draft):
                have = [int(mappings.staged_num_blocks[g][row]) for g in range(mappings.num_groups)]
                need = [-(-(start + n) // mappings.groups[g].block_size) for g in range(mappings.num_groups)]
                fresh = [list(range(next_block + g * 1000, next_block + g * 1000 + need[g] - have[g]))
                         for g in range(mappings.num_groups)]
                next_block += max(len(ids) for ids in fresh)
                mappings.append_blocks(row, fresh)
            # (the draft gets its own block ids: it has its own KV cache)
        target.apply_staged()
        draft.apply_staged()

        R, T = len(rows), sum(q)
        idx_mapping = torch.tensor(rows, dtype=torch.int32)
        query_start_loc = torch.tensor([0] + torch.tensor(q, dtype=torch.int64).cumsum(0).tolist(), dtype=torch.int32)
        positions = torch.cat([torch.arange(s, s + n) for s, n in zip(c, q)] or [torch.zeros(0, dtype=torch.int64)])
        input_ids = torch.randint(0, 32000, (T,))

        # Target: the global batch's slots and tables (PCP shards no KV), then the PCP layout.
        target.refresh(idx_mapping, query_start_loc, positions, num_reqs_padded=R, num_tokens_padded=T)
        layout = specops.pcp_partition(torch.tensor(q, dtype=torch.int32), torch.tensor(c, dtype=torch.int32),
                                       torch.tensor(f), PCP, shard_decode_requests=True)
        index = layout.copy_to("cpu")
        gathered_slots = specops.pcp_gathered_slot_mappings(
            [s[:T] for s in target.slot_mappings], index.padded_gather_idx, index.gathered_kv_write_mask)
        L = layout.padded_num_tokens
        local_hidden, local_kv = [], []
        for k in range(PCP):
            mine = layout.rank(k)
            local = specops.pcp_local_inputs(input_ids, positions, index.padded_gather_idx[k * L:(k + 1) * L],
                                             mine.local_query_start_loc, num_local_tokens=mine.num_tokens)
            local_rows = idx_mapping[mine.local_to_global_batch_req_idx.long()] if R else idx_mapping
            local_tables = specops.gather_block_tables(target.source_block_tables[0], target.num_blocks[0],
                                                       local_rows,
                                                       out=torch.empty(2 * MAX_NUM_REQS, MAX_BLOCKS, dtype=torch.int32))
            n = mine.local_query_start_loc.numel() - 1
            if R and not torch.equal(local_tables[:n], target.block_tables[0][mine.local_to_global_batch_req_idx.long()]):
                raise AssertionError(f"step {step}: rank {k}'s local block table is not its requests' rows")
            hidden = torch.full((L, 2), -1.0, dtype=torch.float64)  # padding rows hold garbage
            hidden[:mine.num_tokens] = hidden_of(local.input_ids[:mine.num_tokens], local.positions[:mine.num_tokens])
            local_hidden.append(hidden)
            local_kv.append(local.input_ids * 1000 + local.positions)
        gathered_hidden, gathered_kv = torch.cat(local_hidden), torch.cat(local_kv)
        if not torch.equal(gathered_hidden[index.hidden_restore_idx], hidden_of(input_ids, positions)):
            raise AssertionError(f"step {step}: the restored hidden states are not the global ones")
        for g, slots in enumerate(gathered_slots):
            writes = torch.zeros(int(slots.max()) + 1 if slots.numel() else 1, dtype=torch.int64)
            cache = torch.full_like(writes, -1)
            written = slots != specops.PAD_SLOT_ID
            writes.index_add_(0, slots[written], torch.ones(int(written.sum()), dtype=torch.int64))
            cache[slots[written]] = gathered_kv[written]
            token_slots = target.slot_mappings[g][:T]
            if not (bool((writes[token_slots] == 1).all()) and int(writes.sum()) == T):
                raise AssertionError(f"step {step} group {g}: a token's KV is not written exactly once")
            if not torch.equal(cache[token_slots], input_ids * 1000 + positions):
                raise AssertionError(f"step {step} group {g}: a token's slot holds another token's KV")

        # Draft: replicated over the global batch, refreshed as #16300 does.
        num_reqs_padded = min(MAX_NUM_REQS, R + rng.randint(0, 2))
        num_tokens_padded = min(MAX_NUM_TOKENS, T + rng.randint(0, 8))
        padded_query_start_loc = torch.full((num_reqs_padded + 1,), T, dtype=torch.int32)
        padded_query_start_loc[:R + 1] = query_start_loc
        draft_positions[:T] = positions
        draft.refresh(idx_mapping, padded_query_start_loc, draft_positions, num_reqs_padded=num_reqs_padded,
                      num_tokens_padded=num_tokens_padded)
        expected_slots = []
        for row, n, start in zip(rows, q, c):
            for p in range(start, start + n):
                expected_slots.append(int(draft.source_block_tables[0][row, p // 16]) * 16 + p % 16)
        slots = draft.slot_mappings[0]
        if slots.dtype != torch.int32 or slots[:T].tolist() != expected_slots or bool((slots[T:] != -1).any()):
            raise AssertionError(f"step {step}: the draft's captured slots are not the global batch's, PAD to the end")
        table = draft.block_tables[0]
        if R and not torch.equal(table[:R], draft.source_block_tables[0][idx_mapping.long()]):
            raise AssertionError(f"step {step}: the draft's captured table rows are not the global batch's")
        if bool((table[R:] != specops.NULL_BLOCK_ID).any()):
            raise AssertionError(f"step {step}: the draft's table rows past R are not NULL to the end")
        if (slots.data_ptr(), table.data_ptr()) != draft_addresses:
            raise AssertionError(f"step {step}: the draft's captured buffers moved")

        for row, n in zip(rows, q):
            computed[row] += n
        for row in [r for r in prompt if computed[r] >= 120 or rng.random() < 0.1]:
            for mappings in (target, draft):
                mappings.append_blocks(row, [[] for _ in range(mappings.num_groups)], overwrite=True)
            del prompt[row], computed[row]
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    steps = run(args.steps, args.seed)
    print(f"pcp_draft_step: {steps} steps, PCP = {PCP} target, replicated draft: every check held")


if __name__ == "__main__":
    main()
