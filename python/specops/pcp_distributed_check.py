"""Multi-rank check of prefill context parallelism over torch.distributed (docs/pcp.md).

Every rank builds the same global batch, partitions it with `pcp_partition` (P = the world
size), copies the layout's index tensors to its device, gathers its local inputs with
`pcp_local_inputs`, and computes the gathered slot mappings of two KV-cache groups with
`pcp_gathered_slot_mappings`. A stand-in model turns each local token into a "hidden state"
and a "KV value" from its input id and position alone. The ranks then do what a PCP forward
does: all-gather the local KV values and write the gathered stream into their own KV cache
(PCP stores the whole sequence on every rank), and all-gather the local hidden states and
restore the global order with `hidden_restore_idx`. Each rank checks:

- every rank computed the same layout (the gathered index tensors are identical);
- every token's KV is written exactly once per group, at its own slot, with its own value, and
  no other slot is written;
- `all_gather(local hidden)[hidden_restore_idx]` equals the global hidden states (padding rows
  hold garbage);
- the local seq_lens are the last local position of each segment plus one, and each segment's
  positions are the global ones from `local_start_pos` on.

    python -m specops.pcp_distributed_check --world-size 4                       # gloo, local processes
    torchrun --nproc-per-node 8 -m specops.pcp_distributed_check --backend nccl   # one process per GPU
"""

from __future__ import annotations

import dataclasses
import sys

import torch
import torch.distributed as dist

import specops
from specops import distributed_check
from specops._constants import PAD_SLOT_ID

GARBAGE = -7.0  # what padding rows of a rank's hidden states hold


@dataclasses.dataclass(frozen=True)
class PCPCase:
    """One global batch: request r schedules q[r] tokens after c[r] computed ones."""

    name: str
    q: tuple[int, ...]
    c: tuple[int, ...]
    f: tuple[bool, ...]
    shard_decode_requests: bool = True
    dcp_world_size: int = 1
    pad: int = 0  # padded_num_tokens - max(per_rank_num_tokens)
    block_sizes: tuple[int, ...] = (16, 4)
    seed: int = 0


def default_cases() -> list[PCPCase]:
    cases = [
        PCPCase("one fresh prefill", (7,), (0,), (True,)),
        PCPCase("decodes and a continued prefill", (1, 1, 9, 1), (10, 20, 4, 30), (False, False, True, False), pad=3),
        PCPCase("replicated decodes under DCP", (1, 7, 3), (10, 0, 5), (False, True, True), shard_decode_requests=False,
                dcp_world_size=2),
        PCPCase("empty requests", (0, 5, 0, 1), (3, 0, 9, 9), (True, True, False, False), shard_decode_requests=False),
        PCPCase("empty batch", (), (), (), pad=2),
    ]
    generator = torch.Generator().manual_seed(2525)
    for seed in range(4):
        R = int(torch.randint(1, 10, (1,), generator=generator))
        f = (torch.rand(R, generator=generator) < 0.5).tolist()
        q = [int(torch.randint(1, 40, (1,), generator=generator)) if p else int(torch.randint(1, 4, (1,),
                                                                                                 generator=generator))
             for p in f]
        c = torch.randint(0, 100, (R,), generator=generator).tolist()
        shard = seed % 2 == 0
        cases.append(PCPCase(f"random {seed}", tuple(q), tuple(c), tuple(f), shard_decode_requests=shard,
                             dcp_world_size=1 if shard else 1 + seed % 2, pad=seed, seed=seed))
    return cases


@dataclasses.dataclass
class GlobalBatch:
    input_ids: torch.Tensor  # int64 [T]
    positions: torch.Tensor  # int64 [T]
    slot_mappings: list[torch.Tensor]  # int64 [T] per group: distinct slots, the global batch's
    num_slots: int  # the KV stand-in's size


def make_global_batch(case: PCPCase) -> GlobalBatch:
    generator = torch.Generator().manual_seed(case.seed)
    total = sum(case.q)
    input_ids = torch.randint(0, 32000, (total,), generator=generator)
    positions = torch.cat([torch.arange(c, c + q) for c, q in zip(case.c, case.q)] or [torch.zeros(0, dtype=torch.long)])
    num_slots = 4 * total + 8
    # Distinct slots per group, as compute_slot_mapping gives for distinct blocks.
    slot_mappings = [torch.randperm(num_slots, generator=generator)[:total] for _ in case.block_sizes]
    return GlobalBatch(input_ids, positions, slot_mappings, num_slots)


def hidden_of(input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The stand-in model: a token's hidden state depends on its id and position only."""
    return torch.stack([input_ids.double(), positions.double() * 0.5 + 1.0], dim=1)


def kv_of(input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    return input_ids * 100003 + positions


def _all_gather(tensor: torch.Tensor, world_size: int) -> list[torch.Tensor]:
    parts = [torch.empty_like(tensor) for _ in range(world_size)]
    dist.all_gather(parts, tensor.contiguous())
    return parts


def check_case(case: PCPCase, rank: int, world_size: int, device: torch.device) -> list[str]:
    failures = []
    batch = make_global_batch(case)
    lay = specops.pcp_partition(torch.tensor(case.q, dtype=torch.int32), torch.tensor(case.c, dtype=torch.int32),
                                torch.tensor(case.f, dtype=torch.bool), world_size,
                                shard_decode_requests=case.shard_decode_requests, dcp_world_size=case.dcp_world_size)
    lay = specops.pcp_partition(torch.tensor(case.q, dtype=torch.int32), torch.tensor(case.c, dtype=torch.int32),
                                torch.tensor(case.f, dtype=torch.bool), world_size,
                                shard_decode_requests=case.shard_decode_requests, dcp_world_size=case.dcp_world_size,
                                padded_num_tokens=lay.padded_num_tokens + case.pad)
    L = lay.padded_num_tokens
    on_device = lay.copy_to(device)
    mine = lay.rank(rank)
    local_gather_idx = on_device.padded_gather_idx[rank * L:(rank + 1) * L]
    local = specops.pcp_local_inputs(batch.input_ids.to(device), batch.positions.to(device), local_gather_idx,
                                     mine.local_query_start_loc.to(device), num_local_tokens=mine.num_tokens)
    gathered_slots = specops.pcp_gathered_slot_mappings([s.to(device) for s in batch.slot_mappings],
                                                        on_device.padded_gather_idx, on_device.gathered_kv_write_mask)

    # 5: the same layout everywhere.
    for name, tensor in (("padded_gather_idx", on_device.padded_gather_idx),
                         ("gathered_kv_write_mask", on_device.gathered_kv_write_mask.to(torch.uint8)),
                         ("hidden_restore_idx", on_device.hidden_restore_idx)):
        if any(not torch.equal(part.cpu(), tensor.cpu()) for part in _all_gather(tensor, world_size)):
            failures.append(f"{case.name}: rank {rank}'s {name} differs from another rank's")

    # The forward's two collectives, on the local stream padded with garbage.
    N = mine.num_tokens
    local_ids, local_positions = local.input_ids, local.positions
    local_hidden = torch.full((L, 2), GARBAGE, dtype=torch.float64, device=device)
    local_hidden[:N] = hidden_of(local_ids[:N], local_positions[:N])
    local_kv = torch.full((L,), -12345, dtype=torch.int64, device=device)
    local_kv[:N] = kv_of(local_ids[:N], local_positions[:N])
    gathered_hidden = torch.cat(_all_gather(local_hidden, world_size)) if L else local_hidden[:0]
    gathered_kv = torch.cat(_all_gather(local_kv, world_size)).cpu() if L else local_kv[:0].cpu()

    restored = gathered_hidden.index_select(0, on_device.hidden_restore_idx).cpu()
    if not torch.equal(restored, hidden_of(batch.input_ids, batch.positions)):
        failures.append(f"{case.name}: rank {rank}: all_gather(local)[hidden_restore_idx] is not the global hidden")

    expected_kv = kv_of(batch.input_ids, batch.positions)
    for g, slots in enumerate(gathered_slots):
        slots = slots.cpu()
        cache = torch.full((batch.num_slots,), -1, dtype=torch.int64)
        writes = torch.zeros(batch.num_slots, dtype=torch.int64)
        written = slots != PAD_SLOT_ID
        cache[slots[written]] = gathered_kv[written]
        writes.index_add_(0, slots[written], torch.ones_like(slots[written]))
        token_slots = batch.slot_mappings[g]
        if not bool((writes[token_slots] == 1).all()) or int(writes.sum()) != token_slots.numel():
            failures.append(f"{case.name}: rank {rank} group {g}: KV writes per token "
                            f"{writes[token_slots].tolist()}, {int(writes.sum())} in all, not exactly one each")
        elif not torch.equal(cache[token_slots], expected_kv):
            failures.append(f"{case.name}: rank {rank} group {g}: a token's slot holds another token's KV")

    lqsl = mine.local_query_start_loc.tolist()
    positions = local.positions.cpu()
    seq_lens = local.seq_lens.cpu().tolist()
    for i in range(len(lqsl) - 1):
        start, end = lqsl[i], lqsl[i + 1]
        expected_positions = torch.arange(end - start) + int(mine.local_start_pos[i])
        if not torch.equal(positions[start:end], expected_positions):
            failures.append(f"{case.name}: rank {rank} segment {i}: positions {positions[start:end].tolist()} are not "
                            f"the global ones from local_start_pos {int(mine.local_start_pos[i])}")
        expected_len = int(positions[end - 1]) + 1 if end > start else 0
        if seq_lens[i] != expected_len:
            failures.append(f"{case.name}: rank {rank} segment {i}: seq_len {seq_lens[i]}, expected {expected_len}")
    return failures


def check_rank(rank: int, world_size: int, device: torch.device, cases: list[PCPCase] | None = None) -> list[str]:
    failures = []
    for case in cases if cases is not None else default_cases():
        failures += check_case(case, rank, world_size, device)
    return failures


def run_local(world_size: int, backend: str = "gloo", timeout_s: float = distributed_check.DEFAULT_TIMEOUT_S,
              cases: list[PCPCase] | None = None) -> list[str]:
    """world_size local processes (distributed_check.run_local) running check_rank; every rank's
    findings, empty when all checks hold."""
    return distributed_check.run_local(world_size, backend, timeout_s, cases, check=check_rank)


def main(argv: list[str] | None = None) -> int:
    return distributed_check.command(argv, "specops.pcp_distributed_check", __doc__, check_rank, default_cases())


if __name__ == "__main__":
    sys.exit(main())
