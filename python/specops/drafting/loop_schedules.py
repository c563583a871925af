"""The host half of a DraftLoopPlan step (loop_plan.py): every draft pass's host lengths, CP-split
maxima and schedules (sas / A5 / lightning indexer), planned from the runner's host values only,
into one reused host block that one non-blocking copy takes to the device.

Pass 1 is planned from its exact query layout (query_start_loc_cpu) and the seq_lens bound;
pass k >= 2 (one token per request) from the bound plus k - 1, clamped to max_model_len, never
reset. A schedule is a work partition: the consumer kernels re-read the real KV lengths at run
time, so a plan made for lengths at least the real ones covers the real work (the indexer's also
needs every batch of more than 4 query tokens to hold 4 KV tokens, as a causal batch does;
docs/sas_metadata.md, "Planning from an upper bound"). Passes whose bounds are equal share one computation (the words
are copied); `shared` plans every pass k >= 2 once, for the largest bound (pass K's).

The host block is double-buffered: each is rewritten only after the event recorded behind its
last copy has completed (normally long before: a step apart), so a copy still queued never reads
words of the next step. Without a device (CPU) the host block is the device block: no copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch

from specops.drafting.calls import (
    LIGHTNING_INDEXER_METADATA,
    indexer_arguments,
    sas_arguments,
    set_indexer_batch,
    set_sas_batch,
)
from specops.sas_layout import NUM_WORDS

if TYPE_CHECKING:
    from specops.drafting.setup import GroupSetup, SasArguments


class PassHost(NamedTuple):
    """The host values of one draft pass (DraftAttnMetadata's host fields)."""

    num_decodes: int
    num_prefills: int
    num_decode_tokens: int
    num_prefill_tokens: int
    num_tokens: int  # the pass's real tokens
    num_input_tokens: int  # its padded token count
    split: tuple[int, int, int, int]  # num_tokens_pad, tokens_per_rank, local_start, local_end
    max_local_query_len: int
    max_local_seq_len: int


def split_of(num_input_tokens: int, cp_size: int, cp_rank: int) -> tuple[int, int, int, int]:
    """cp_token_split's (num_tokens_pad, tokens_per_rank, local_start, local_end)."""
    per_rank = -(-num_input_tokens // cp_size)
    return per_rank * cp_size, per_rank, cp_rank * per_rank, (cp_rank + 1) * per_rank


def check_query_starts(starts: np.ndarray) -> None:
    """A step's host query starts (query_start_loc_cpu's first R + 1 entries): from >= 0 and
    non-decreasing, checked where the layer reads them, before a schedule op is planned from them
    (whose own check would name its cu_seqlens_q, nothing the caller passed)."""
    wide = starts.astype(np.int64)
    if wide.size and wide[0] < 0:
        raise ValueError(f"query_start_loc_cpu[0] = {int(wide[0])} must be >= 0")
    drops = np.flatnonzero(wide[1:] < wide[:-1])
    if drops.size:
        r = int(drops[0]) + 1
        raise ValueError(f"query_start_loc_cpu must be non-decreasing, got query_start_loc_cpu[{r}] = {int(wide[r])} "
                         f"< query_start_loc_cpu[{r - 1}] = {int(wide[r - 1])}")


def local_lengths(starts: np.ndarray, seq_lens: np.ndarray, local_start: int, local_end: int,
                  causal: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """cp_local_metadata's local query starts [R + 1] and local seq_lens [R] (causal: minus the
    request's tokens on later ranks; non-causal: the whole seq_len), on the host."""
    clamped = np.clip(starts, local_start, local_end)
    local_starts = clamped - clamped[0]
    local_lens = clamped[1:] - clamped[:-1]
    if not causal:
        return local_starts, np.where(local_lens > 0, seq_lens, 0)
    beyond = starts[1:] - clamped[1:]  # each request's tokens on later ranks
    local_seq = np.where((local_lens > 0) & (seq_lens > 0), np.maximum(seq_lens - beyond, 0), 0)
    return local_starts, local_seq


class SasSlot:
    """One distinct sas schedule of the groups (their fixed arguments are equal), per pass and
    per host block its keyword arguments with its output there."""

    __slots__ = ("fixed", "op", "arguments", "empty_kv")

    def __init__(self, fixed: SasArguments, outputs: list[list[torch.Tensor]]):
        self.fixed = fixed
        self.arguments = []
        for block in outputs:
            per_pass = []
            for out in block:
                self.op, arguments = sas_arguments(fixed, out)
                per_pass.append(arguments)
            self.arguments.append(per_pass)
        # The A5 op wants seqused_kv in every layout: one host entry it never reads (B = 0).
        self.empty_kv = torch.zeros(1, dtype=torch.int32) if fixed.a5 else None


class LoopSchedules:
    """The host block of every pass's schedules and the host arrays they are planned from."""

    def __init__(self, setups: Sequence[GroupSetup], num_steps: int, max_num_reqs: int,
                 device: torch.device, shared: bool):
        self.num_steps, self.shared = num_steps, shared
        self.sas_of: list[int | None] = []
        fixed_slots: dict = {}
        for setup in setups:
            fixed = setup.sas_arguments[True] if setup.sas_arguments is not None else None
            if fixed is not None and fixed not in fixed_slots:
                fixed_slots[fixed] = len(fixed_slots)
            self.sas_of.append(None if fixed is None else fixed_slots[fixed])
        self.qli_slot = len(fixed_slots) if any(setup.group.compress_ratio == 4 for setup in setups) else None
        num_slots = len(fixed_slots) + (self.qli_slot is not None)
        shape = (num_steps, max(num_slots, 1), NUM_WORDS)
        self.device_block = torch.zeros(shape, dtype=torch.int32, device=device)
        self.on_host = device.type == "cpu"
        pinned = device.type in ("cuda", "npu")
        self.host_blocks = [self.device_block] if self.on_host else [
            torch.zeros(shape, dtype=torch.int32, pin_memory=pinned) for _ in range(2)]
        self.events: list[object | None] = [None] * len(self.host_blocks)
        self.turn = 0
        self.sas = [SasSlot(fixed, [[block[k, slot] for k in range(num_steps)] for block in self.host_blocks])
                    for fixed, slot in fixed_slots.items()]
        self.qli_arguments = None
        if self.qli_slot is not None:
            first = next(setup for setup in setups if setup.group.compress_ratio == 4)
            self.qli_arguments = [[indexer_arguments(first.model, first.platform, block[k, self.qli_slot])
                                   for k in range(num_steps)] for block in self.host_blocks]
        # Host arrays each pass's schedules read: local query starts and local seq_lens.
        self.local_starts = torch.zeros((num_steps, max_num_reqs + 1), dtype=torch.int32)
        self.local_seq_lens = torch.zeros((num_steps, max_num_reqs), dtype=torch.int32)

    def plan(self, num_reqs: int, passes: list[PassHost], equal_to_previous: list[bool]) -> None:
        """Every pass's schedules into the next host block, then its one copy to the device
        (local_starts / local_seq_lens rows filled by the caller). equal_to_previous[k]: pass k's
        arguments are pass k - 1's (its words are copied, not recomputed); `shared`: passes 2..K
        all take the words planned for pass K."""
        index = self.turn
        self.turn = (self.turn + 1) % len(self.host_blocks)
        event = self.events[index]
        if event is not None:
            event.synchronize()  # the copy that last read this block (a step ago) has completed
        block = self.host_blocks[index]
        words = block.numpy()
        last = len(passes) - 1
        for k in range(len(passes)):
            if k > 1 and (equal_to_previous[k] or self.shared):
                words[k] = words[k - 1]
                continue
            # shared: pass 2's words are planned from pass K's lengths, the largest of passes
            # 2..K (the bounds grow with k, the layout is the same), then copied to 3..K.
            source = last if self.shared and k == 1 else k
            host = passes[source]
            starts = self.local_starts[source, :num_reqs + 1]
            seq_lens = self.local_seq_lens[source, :num_reqs]
            for slot in self.sas:
                _plan_sas(slot, slot.arguments[index][k], starts, seq_lens, host)
            if self.qli_arguments is not None:
                _plan_qli(self.qli_arguments[index][k], starts, seq_lens, host)
        if not self.on_host:
            self.device_block.copy_(block, non_blocking=True)
            self.events[index] = _record(self.device_block.device)

    def view(self, draft_index: int, slot: int) -> torch.Tensor:
        return self.device_block[draft_index - 1, slot]


def _record(device: torch.device) -> object | None:
    """An event on the current stream behind the copy (None where the device has no events)."""
    module = getattr(torch, device.type, None)
    if module is None or not hasattr(module, "Event"):
        return None
    event = module.Event()
    event.record()
    return event


def _plan_sas(slot: SasSlot, arguments: dict[str, object], starts: torch.Tensor, seq_lens: torch.Tensor,
              host: PassHost) -> None:
    """One sas (A5: kv_quant_sas) schedule of a pass, host tensors in, host words out."""
    set_sas_batch(arguments, slot.empty_kv, starts, seq_lens, host.max_local_query_len, host.max_local_seq_len)
    slot.op.select()(**arguments)


def _plan_qli(arguments: dict[str, object], starts: torch.Tensor, seq_lens: torch.Tensor, host: PassHost) -> None:
    """The lightning-indexer schedule of a pass (TND query ends, paged keys), host in and out."""
    set_indexer_batch(arguments, starts, seq_lens, host.max_local_query_len, host.max_local_seq_len)
    LIGHTNING_INDEXER_METADATA.select()(**arguments)
