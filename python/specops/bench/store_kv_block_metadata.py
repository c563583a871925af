"""Benchmark of store_kv_block_metadata: the C++ op (and the Triton kernel on a device) against
the torch reference and a plain-Python restatement of the AI-CPU kernel, for decode and
spec-decode slot mappings of 8..256 requests (1 or 4 new tokens each, block size 128)."""

from __future__ import annotations

import torch

import specops
from specops.bench._harness import Case, empty_op_call

BATCHES = [8, 64, 256]
QUICK_BATCHES = [8, 256]
BLOCK_SIZE = 128


def python_store_kv_block_metadata(slot_mapping, capacity: int, block_size: int) -> list[int]:
    """group_len, group_key_idx and group_key_cache_idx, one after another: runs of consecutive
    slots inside one block, negative slots skipped; runs past the capacity dropped."""
    slots = slot_mapping.tolist() if hasattr(slot_mapping, "tolist") else list(slot_mapping)
    runs = []
    for i, slot in enumerate(slots):
        if slot < 0:
            continue
        if runs and i > 0 and slots[i - 1] == slot - 1 and slot % block_size:
            runs[-1][0] += 1
        else:
            runs.append([1, i, slot])
    runs = runs[:capacity] + [[0, 0, 0]] * max(capacity - len(runs), 0)
    return [run[field] for field in range(3) for run in runs]


def slot_mapping_of(num_reqs: int, tokens: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, 4096 * BLOCK_SIZE, (num_reqs,), generator=generator)
    return (starts[:, None] + torch.arange(tokens)).flatten().to(torch.int32)


def _case(tokens: int, num_reqs: int, device: torch.device) -> Case:
    slots = slot_mapping_of(num_reqs, tokens, seed=num_reqs).to(device)
    outputs = [torch.zeros(slots.numel(), dtype=torch.int32, device=device) for _ in range(3)]

    def run_specops():
        specops.store_kv_block_metadata(slots, *outputs, block_size=BLOCK_SIZE)

    def reference():
        with specops.backend("reference"):
            run_specops()

    for check in (run_specops, reference):
        check()
        if torch.cat(outputs).tolist() != python_store_kv_block_metadata(slots.cpu(), slots.numel(), BLOCK_SIZE):
            raise RuntimeError(f"store_kv_block_metadata q={tokens} R={num_reqs}: specops and the Python "
                               "restatement disagree")
    return Case(
        "store_kv_block_metadata", f"q={tokens} R={num_reqs}", num_reqs, slots.numel(),
        {"specops": run_specops, "reference": reference,
         "python": lambda: python_store_kv_block_metadata(slots.cpu(), slots.numel(), BLOCK_SIZE),
         "empty-op": empty_op_call(device)},
        baselines=("reference", "python"), floors=("empty-op",), family=f"q={tokens}",
        plotted=("specops", "reference", "python"),
    )


def cases(device: torch.device, quick: bool) -> list[Case]:
    return [_case(tokens, num_reqs, device) for tokens in (1, 4) for num_reqs in (QUICK_BATCHES if quick else BATCHES)]
