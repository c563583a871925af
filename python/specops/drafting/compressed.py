"""The compressed groups' own part of a draft step (GroupConfig.compress_ratio 4 / 128): the
lightning-indexer schedule every C4 group shares, and every compressed group's compressor
metadata (compressed-cache slots and RoPE rows), one compressor_metadata launch per batch.

compressor_metadata takes one group: one block table, one block size, one ratio, one RoPE
table. The groups of a batch (the same ratio, storage block size, RoPE table and, at a step,
table width) become one call of it over virtual requests: group j's requests, then one filler
request, per group, with the groups' tables stacked (one torch.cat) and the lengths and starts
repeated (host values, one copy to the device). The filler request's table row is all -1, so
its rows are the op's invalid rows (cos 1, sin 0, slot -1 or (-1, block size - 1)), exactly the
padding rows a group called alone gets past its valid rows; it completes N - V rows, where V is
the rows the batch's requests complete (a host sum) and N = min(T, T // ratio + R) the bound
vllm-ascend sizes the output with, so group j's rows are rows [j N, (j + 1) N) of the batch's
outputs whatever the batch. docs/drafting.md, "Compressed groups".
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from specops.drafting.buffers import DraftBuffers, Generation
from specops.drafting.cache import logger
from specops.drafting.calls import (
    COMPRESSOR_METADATA,
    LIGHTNING_INDEXER_METADATA,
    indexer_arguments,
    set_indexer_batch,
)
from specops.compressor_layout import FORMAT_BLOCK_OFFSET, FORMAT_FLAT

if TYPE_CHECKING:
    from specops.drafting.cache import StepCache
    from specops.drafting.configs import CommonDraftInputs, DraftAttnMetadata, ModelConfig
    from specops.drafting.invariant import GroupInvariant
    from specops.drafting.platform import DraftPlatform
    from specops.drafting.setup import GroupSetup


def compressor_format(platform: DraftPlatform) -> int:
    """The compressor's slot format vllm-ascend's DeviceOperator picks: flat slots on A5,
    (block, offset) pairs on A2/A3 (the group's platform.sas_variant)."""
    return FORMAT_FLAT if platform.sas_variant == "a5" else FORMAT_BLOCK_OFFSET


def row_bound(num_tokens: int, num_reqs: int, ratio: int) -> int:
    """The compressor rows vllm-ascend sizes a step with: min(T, T // ratio + R), at least the
    compression groups R requests of T tokens can complete."""
    return min(num_tokens, num_tokens // ratio + num_reqs)


def rope_halves(model: ModelConfig, ratio: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ratio's RoPE table as contiguous cos and sin tables, made once per model and ratio
    (compressor_metadata's device kernels read contiguous tables; a strided half would be copied
    at every launch)."""
    halves = model.__dict__.setdefault("_compress_rope_halves", {})
    table = model.compress_rope_cache(ratio)
    found = halves.get(ratio)
    if found is None or found[0] is not table:
        half = table.size(1) // 2
        found = halves[ratio] = (table, table[:, :half].contiguous(), table[:, half:].contiguous())
    return found[1], found[2]


class StagingBlocks:
    """Two reused host staging blocks (pinned on CUDA / NPU) for a per-step host-to-device copy:
    `next_block()` waits for the event recorded behind the copy that last read the block it
    hands out (so a queued copy never reads the next step's values), `copied(device)` records
    that event after the caller's copy. No allocation per step."""

    __slots__ = ("blocks", "events", "turn")

    def __init__(self, size: int, device: torch.device):
        pinned = device.type in ("cuda", "npu")
        self.blocks = [torch.zeros(size, dtype=torch.int32, pin_memory=pinned) for _ in range(2)]
        self.events: list[object | None] = [None, None]
        self.turn = 0

    def next_block(self) -> torch.Tensor:
        self.turn ^= 1
        event = self.events[self.turn]
        if event is not None:
            event.synchronize()
        return self.blocks[self.turn]

    def copied(self, device: torch.device) -> None:
        module = getattr(torch, device.type, None)
        if module is not None and hasattr(module, "Event"):
            event = module.Event()
            event.record()
            self.events[self.turn] = event


class QliCall:
    """The step's one lightning-indexer schedule of the C4 groups sharing a model, computed by
    the first of them into its buffer."""

    __slots__ = ("key", "invariant_slot", "rope_id", "writes", "arguments", "out", "later")

    def __init__(self, setup: GroupSetup, buffers: DraftBuffers, invariant_slot: int, later: int):
        self.key = buffers.qli_key
        self.invariant_slot = invariant_slot
        self.rope_id = id(setup.model.rope_cos_sin_cache)
        self.writes: Generation = buffers.qli_writes
        self.out = buffers.qli
        self.arguments = indexer_arguments(setup.model, setup.platform, buffers.qli)
        self.later = later  # how many later C4 groups share it


class CompressorBatch:
    """The compressed groups of a step with one ratio, storage block size, RoPE table and slot
    format: one compressor_metadata launch per table width their step's tables have (one when
    they have one width, as a runner's persistent tables do)."""

    __slots__ = ("members", "names", "ratio", "block_size", "format", "rope_cos", "rope_sin", "max_reqs",
                 "out_cos", "out_sin", "out_slots", "stacks", "host", "device_arrays", "invariant_slot", "arguments",
                 "staging")

    def __init__(self, setups: Sequence[GroupSetup], members: list[int], invariant_slot: int):
        first = setups[members[0]]
        model, group = first.model, first.group
        self.members, self.names = members, [setups[i].group.name for i in members]
        self.ratio, self.block_size, self.format = group.compress_ratio, group.storage_block_size, \
            compressor_format(first.platform)
        self.rope_cos, self.rope_sin = rope_halves(model, self.ratio)
        self.invariant_slot = invariant_slot
        self.max_reqs = min(setups[i].max_num_reqs for i in members)
        num_groups, device = len(members), first.device
        rows = num_groups * row_bound(min(setups[i].max_num_tokens for i in members), self.max_reqs, self.ratio)
        self.out_cos = torch.ones((rows, 1, 1, self.rope_cos.size(1)), dtype=self.rope_cos.dtype, device=device)
        self.out_sin = torch.zeros_like(self.out_cos)
        slot_shape = (rows,) if self.format == FORMAT_FLAT else (rows, 2)
        self.out_slots = torch.full(slot_shape, -1, dtype=torch.int32, device=device)
        # Per table width: the stacked tables and the -1 row of the filler requests.
        self.stacks: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        # The virtual requests' query starts and start positions: filled on the host and, on a
        # device, staged and copied once per step into device_arrays.
        entries = num_groups * (self.max_reqs + 1)
        self.host = torch.zeros(2 * entries + 1, dtype=torch.int32) if device.type == "cpu" else None
        self.device_arrays = self.host if device.type == "cpu" else torch.zeros(2 * entries + 1, dtype=torch.int32,
                                                                               device=device)
        # On a device: two reused pinned staging blocks, each rewritten only once the copy that
        # last read it has completed (the event recorded behind it; normally a step ago).
        self.staging = StagingBlocks(2 * entries + 1, device) if device.type != "cpu" else None
        # compressor_metadata's keyword arguments: the batch's here, each launch's in _run_batch.
        self.arguments = dict(rope_cos=self.rope_cos, rope_sin=self.rope_sin, kv_block_size=self.block_size,
                              slot_mapping_format=self.format, compress_ratio=self.ratio)

    def stack(self, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        found = self.stacks.get(width)
        if found is None:
            device = self.out_slots.device
            found = self.stacks[width] = (
                torch.zeros((len(self.members) * (self.max_reqs + 1), width), dtype=torch.int32, device=device),
                torch.full((1, width), -1, dtype=torch.int32, device=device))
        return found


class CompressedPlan:
    """A step plan's compressed groups: the lightning-indexer calls and the compressor batches."""

    __slots__ = ("qli_calls", "qli_of", "batches", "compressed")

    def __init__(self, setups: Sequence[GroupSetup], buffers: list[DraftBuffers], invariant_of: list[int]):
        self.compressed = [i for i, setup in enumerate(setups) if setup.group.compress_ratio > 1]
        # One lightning-indexer schedule per distinct key (one per model) among the C4 groups.
        self.qli_calls: list[QliCall] = []
        self.qli_of: dict[int, int] = {}
        slots: dict = {}
        for index in self.compressed:
            key = buffers[index].qli_key
            if key is None:
                continue
            slot = slots.get(key)
            if slot is None:
                slot = slots[key] = len(self.qli_calls)
                self.qli_calls.append(QliCall(setups[index], buffers[index], invariant_of[index], 0))
            else:
                self.qli_calls[slot].later += 1
            self.qli_of[index] = slot
        batches: dict[tuple, list[int]] = {}
        for index in self.compressed:
            setup = setups[index]
            group = setup.group
            if not group.compressor_metadata:
                continue
            key = (group.compress_ratio, group.storage_block_size,
                   id(setup.model.compress_rope_cache(group.compress_ratio)), compressor_format(setup.platform),
                   invariant_of[index], setup.device)
            batches.setdefault(key, []).append(index)
        self.batches = [CompressorBatch(setups, members, invariant_of[members[0]]) for members in batches.values()]

    def tables(self, common: CommonDraftInputs) -> list[list[torch.Tensor]]:
        """Every batch's block tables, checked before the step writes anything."""
        found = []
        for batch in self.batches:
            tables = []
            for name in batch.names:
                table = common.block_tables[name]
                if not isinstance(table, torch.Tensor) or table.dim() != 2 or table.dtype != torch.int32:
                    described = f"{table.dtype} {list(table.shape)}" if isinstance(table, torch.Tensor) else \
                        type(table).__name__
                    raise ValueError(f"block_tables[{name!r}] must be a 2-D int32 tensor, got {described}")
                if table.size(0) < common.num_reqs:
                    raise ValueError(f"block_tables[{name!r}] must have at least num_reqs = {common.num_reqs} rows, "
                                     f"got {table.size(0)}")
                if table.device.type != batch.out_slots.device.type:
                    raise ValueError(f"block_tables[{name!r}] must be on the builder's device "
                                     f"{batch.out_slots.device}, got {table.device}")
                tables.append(table)
            found.append(tables)
        if common.num_reqs > min((batch.max_reqs for batch in self.batches), default=common.num_reqs):
            raise ValueError(f"num_reqs must be at most max_num_reqs of every compressed group, got {common.num_reqs}")
        return found

    def resolve_qli(self, invariants: list[GroupInvariant], shared: StepCache | None,
                    fingerprints: Mapping[int, tuple | None], keep_alive: tuple) -> list[torch.Tensor]:
        """Each distinct lightning-indexer schedule: from `shared` when stored for these inputs,
        else computed (and stored)."""
        values = []
        for call in self.qli_calls:
            value = None
            if shared is not None:
                value = shared.get(call.key, fingerprints.get(call.rope_id))
                # The later C4 groups share what this lookup found or the call computes.
                shared.hits += call.later
                if call.later and logger.isEnabledFor(logging.DEBUG):
                    for _ in range(call.later):
                        logger.debug("StepCache hit: %s", call.key)
            if value is None:
                _run_qli(call, invariants[call.invariant_slot])
                value = call.out
                if shared is not None:
                    shared.put(call.key, fingerprints.get(call.rope_id), value, keep_alive=keep_alive,
                               owner=call.writes)
            values.append(value)
        return values

    def run_compressor(self, common: CommonDraftInputs, invariants: list[GroupInvariant],
                       tables: list[list[torch.Tensor]]) -> dict[int, tuple]:
        """Every compressed group's compressor metadata: (cos, sin, slots) views per group index."""
        results: dict[int, tuple] = {}
        for batch, batch_tables in zip(self.batches, tables):
            results.update(_run_batch(batch, common, invariants[batch.invariant_slot], batch_tables))
        return results

    def attach(self, metadata: list[DraftAttnMetadata], qli: list[torch.Tensor], compressor: dict[int, tuple]) -> None:
        for index, slot in self.qli_of.items():
            metadata[index].qli_metadata = qli[slot]
        for index, (cos, sin, slots) in compressor.items():
            meta = metadata[index]
            meta.compress_cos, meta.compress_sin, meta.compress_slot_mapping = cos, sin, slots


def compressed_plan(setups: Sequence[GroupSetup], buffers: list[DraftBuffers], invariant_of: list[int],
                    causal: bool) -> CompressedPlan | None:
    """The plan's compressed part; None when no group is compressed (the step then runs nothing
    more). Compressed groups are never DSpark groups: both kinds of step plan them alike."""
    if all(setup.group.compress_ratio == 1 for setup in setups):
        return None
    return CompressedPlan(setups, buffers, invariant_of)


def _run_qli(call: QliCall, invariant: GroupInvariant) -> None:
    """The lightning-indexer schedule of the step's CP-local batch (query ends, KV lengths)."""
    call.writes.generation += 1  # before the write: an entry holding this buffer is dead from here on
    cp = invariant.shared.cp
    # The host copies on every device: the op plans on the host and reads no device value.
    local_query_start_loc, local_seq_lens = invariant.local_lengths_cpu()
    set_indexer_batch(call.arguments, local_query_start_loc, local_seq_lens, cp.max_local_query_len,
                      cp.max_local_seq_len)
    LIGHTNING_INDEXER_METADATA.select()(**call.arguments)


def _run_batch(batch: CompressorBatch, common: CommonDraftInputs, invariant: GroupInvariant,
               tables: list[torch.Tensor]) -> dict[int, tuple]:
    num_reqs, num_tokens, ratio = common.num_reqs, common.num_actual_tokens, batch.ratio
    bound = row_bound(num_tokens, num_reqs, ratio)
    views = {}
    cos, sin, slots = batch.out_cos, batch.out_sin, batch.out_slots
    for j, index in enumerate(batch.members):
        views[index] = (cos[j * bound:(j + 1) * bound], sin[j * bound:(j + 1) * bound],
                        slots[j * bound:(j + 1) * bound])
    if bound == 0:
        return views
    # The host lengths and starts of one group's virtual requests: its requests, then the filler
    # that completes the rows its requests do not (the op packs rows; the filler's are invalid).
    query_lens = invariant.query_lens.astype(np.int64)
    starts = invariant.seq_lens_cpu.numpy().astype(np.int64) - query_lens
    completed = np.where((starts >= 0) & (query_lens > 0), (starts + query_lens) // ratio - starts // ratio, 0)
    filler = bound - int(completed.sum())
    per_group = num_reqs + 1
    entries = len(tables) * per_group
    arrays = batch.device_arrays
    # On a device: the next of the batch's two pinned staging blocks, free once the copy that
    # last read it has completed (StagingBlocks), then one asynchronous copy.
    staged = batch.host if batch.host is not None else batch.staging.next_block()
    host = staged.numpy()
    host[0] = 0
    np.cumsum(np.tile(np.append(query_lens, filler * ratio), len(tables)), out=host[1:entries + 1])
    host[entries + 1:2 * entries + 1] = np.tile(np.append(starts, 0), len(tables))
    if batch.host is None:
        arrays[:2 * entries + 1].copy_(staged[:2 * entries + 1], non_blocking=True)
        batch.staging.copied(arrays.device)
    # By width: a stack is one torch.cat, which needs one width.
    by_width: dict[int, list[int]] = {}
    for j, table in enumerate(tables):
        by_width.setdefault(table.size(1), []).append(j)
    arguments = batch.arguments
    for width, positions in by_width.items():
        stack, filler_row = batch.stack(width)
        pieces = []
        for j in positions:
            pieces += (tables[j][:num_reqs], filler_row)
        count = len(positions) * per_group
        torch.cat(pieces, out=stack[:count])
        if len(by_width) > 1:  # one launch per width: its groups' rows sit together
            rows = [views[batch.members[j]] for j in positions]
            out_cos, out_sin, out_slots = (torch.empty((len(positions) * bound, *t.shape[1:]), dtype=t.dtype,
                                                       device=t.device) for t in (cos, sin, slots))
        else:
            rows, end = None, len(positions) * bound
            out_cos, out_sin, out_slots = cos[:end], sin[:end], slots[:end]
        arguments["cu_seqlens"] = arrays[:count + 1]
        arguments["start_pos"] = arrays[entries + 1:entries + 1 + count]
        arguments["kv_block_table"] = stack[:count]
        arguments["num_reqs_actual"] = count
        arguments["compress_cos"], arguments["compress_sin"] = out_cos, out_sin
        arguments["slot_mapping"] = out_slots
        COMPRESSOR_METADATA.select()(**arguments)
        if rows is not None:
            for k, (c, s, m) in enumerate(rows):
                c.copy_(out_cos[k * bound:(k + 1) * bound])
                s.copy_(out_sin[k * bound:(k + 1) * bound])
                m.copy_(out_slots[k * bound:(k + 1) * bound])
    return views
