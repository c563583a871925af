"""pcp_partition: every prefill-context-parallel rank's DualChunkSwap layout (docs/pcp.md).

A host op: the layout is computed from host counts before the forward, outside any captured
graph, identically on every rank. The C++ body runs whatever the backend (there is no device
kernel), except under the "reference" backend, which runs the op's checks (its Meta entry, the
C++ checks themselves) and then the plain-Python reference (without the extension: the
reference alone).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

from specops._backend import current_backend
from specops._extension import require_native
from specops._fastpath import check_entry, native_entry
from specops.arguments import check_entries, check_outputs_alias_nothing, check_tensor, checked_bool, checked_int
from specops.reference.pcp_partition import pcp_partition as _reference

__all__ = ["PCPDeviceLayout", "PCPLayout", "PCPRankLayout", "pcp_partition"]

_NATIVE = native_entry("pcp_partition")
_CHECK = check_entry("pcp_partition")


class PCPRankLayout(NamedTuple):
    """Rank k's local batch: one entry per segment (int32 host tensors, views into the layout)."""

    local_to_global_batch_req_idx: torch.Tensor  # [n]: the global request of each segment
    local_num_scheduled_tokens: torch.Tensor  # [n]
    local_query_start_loc: torch.Tensor  # [n + 1]
    local_start_pos: torch.Tensor  # [n]: global position of the segment's first token (host bound)
    local_seq_lens_cpu_upper_bound: torch.Tensor  # [n]
    local_gather_idx: torch.Tensor  # int64 [L]: padded_gather_idx[k L : (k + 1) L]
    num_tokens: int  # N_k


class PCPDeviceLayout(NamedTuple):
    """The three index tensors on the device, as copy_to returns them."""

    padded_gather_idx: torch.Tensor
    gathered_kv_write_mask: torch.Tensor
    hidden_restore_idx: torch.Tensor


class PCPLayout(NamedTuple):
    """Every rank's layout of one batch (host tensors).

    The per-rank arrays are packed rank after rank: `segments` (int32 [4, S]) holds the request,
    length, start position and seq_len bound of every segment, `segment_counts[k]` of them for
    rank k; `local_query_start_locs` (int32 [S + P]) holds every rank's n_k + 1 offsets. rank(k)
    slices them.
    """

    padded_num_tokens: int  # L
    per_rank_num_tokens: list[int]  # N_k; max() is vLLM's get_num_tokens_for_dispatch
    replicated: torch.Tensor  # bool [R]
    padded_gather_idx: torch.Tensor  # int64 [P L]
    gathered_kv_write_mask: torch.Tensor  # bool [P L]
    hidden_restore_idx: torch.Tensor  # int64 [T]
    segments: torch.Tensor
    segment_counts: list[int]
    local_query_start_locs: torch.Tensor

    @property
    def pcp_world_size(self) -> int:
        return len(self.per_rank_num_tokens)

    def rank(self, k: int) -> PCPRankLayout:
        world = self.pcp_world_size
        if not 0 <= k < world:
            raise ValueError(f"k must be in [0, pcp_world_size = {world}), got {k}")
        first = sum(self.segment_counts[:k])
        count = self.segment_counts[k]
        columns = self.segments[:, first:first + count]
        L = self.padded_num_tokens
        return PCPRankLayout(
            local_to_global_batch_req_idx=columns[0],
            local_num_scheduled_tokens=columns[1],
            local_query_start_loc=self.local_query_start_locs[first + k:first + k + count + 1],
            local_start_pos=columns[2],
            local_seq_lens_cpu_upper_bound=columns[3],
            local_gather_idx=self.padded_gather_idx[k * L:(k + 1) * L],
            num_tokens=self.per_rank_num_tokens[k],
        )

    def copy_to(
        self,
        device: torch.device | str,
        *,
        padded_gather_idx: torch.Tensor | None = None,
        gathered_kv_write_mask: torch.Tensor | None = None,
        hidden_restore_idx: torch.Tensor | None = None,
    ) -> PCPDeviceLayout:
        """The three index tensors on `device`: one non-blocking copy from a pinned staging
        buffer (on an accelerator), into the given buffers (each at least the layout's size;
        their first entries are written, the rest left as they are) or into new ones."""
        device = torch.device(device)
        given = {"padded_gather_idx": padded_gather_idx, "gathered_kv_write_mask": gathered_kv_write_mask,
                 "hidden_restore_idx": hidden_restore_idx}
        sources = {"padded_gather_idx": self.padded_gather_idx, "gathered_kv_write_mask": self.gathered_kv_write_mask,
                   "hidden_restore_idx": self.hidden_restore_idx}
        for name, buffer in given.items():
            if buffer is None:
                continue
            source = sources[name]
            check_tensor(buffer, name, [source.dtype], 1)
            # `device` without an index takes a buffer on any device of its type.
            if buffer.device != device and not (device.index is None and buffer.device.type == device.type):
                raise ValueError(f"{name} must be on {device}, got {buffer.device}")
            check_entries(buffer, name, source.numel(), "the layout's size")
        # Outputs that share memory are rejected before any write (docs/hardening.md): one given
        # buffer over another, or over a layout tensor copied after it, would be overwritten
        # silently (the restore index over the gather index).
        outputs = [(buffer, name) for name, buffer in given.items() if buffer is not None]
        inputs = [(source, f"the layout's {name}") for name, source in sources.items()]
        check_outputs_alias_nothing(outputs, inputs)
        if device.type == "cpu":
            results = {}
            for name, buffer in given.items():
                if buffer is None:
                    results[name] = sources[name].clone()
                else:
                    buffer[: sources[name].numel()].copy_(sources[name])
                    results[name] = buffer[: sources[name].numel()]
            return PCPDeviceLayout(**results)
        return self._staged_copy(device, given)

    def _staged_copy(self, device: torch.device, given: dict[str, torch.Tensor | None]) -> PCPDeviceLayout:
        # One pinned host buffer holds the two int64 tensors, then the mask's bytes; one
        # non-blocking copy moves it, and the device views (or copies into the caller's buffers)
        # follow on the same stream. The caching host allocator keeps the pinned block alive
        # until the copy is done.
        gather, restore = self.padded_gather_idx, self.hidden_restore_idx
        mask = self.gathered_kv_write_mask
        words = gather.numel() + restore.numel()
        staged = torch.empty(8 * words + mask.numel(), dtype=torch.uint8, pin_memory=True)
        wide = staged[: 8 * words].view(torch.int64)
        wide[: gather.numel()].copy_(gather)
        wide[gather.numel():].copy_(restore)
        staged[8 * words:].view(torch.bool).copy_(mask)
        moved = staged.to(device, non_blocking=True)
        on_device = {
            "padded_gather_idx": moved[: 8 * gather.numel()].view(torch.int64),
            "hidden_restore_idx": moved[8 * gather.numel(): 8 * words].view(torch.int64),
            "gathered_kv_write_mask": moved[8 * words:].view(torch.bool),
        }
        results = {}
        for name, view in on_device.items():
            buffer = given[name]
            if buffer is None:
                results[name] = view
            else:
                buffer[: view.numel()].copy_(view, non_blocking=True)
                results[name] = buffer[: view.numel()]
        return PCPDeviceLayout(**results)


def _host_counts(value: Any, name: str) -> torch.Tensor:
    """A host tensor of the counts (a NumPy array's, shared); the op checks its dtype and rank."""
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(np.ascontiguousarray(value))
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{name} must be a CPU tensor or a NumPy array, got {type(value).__name__}")
    if value.device.type != "cpu":
        raise ValueError(f"{name} must be a CPU tensor (host counts), got device {value.device}")
    return value.contiguous()


def pcp_partition(
    num_scheduled_tokens: torch.Tensor | np.ndarray,
    num_computed_tokens: torch.Tensor | np.ndarray,
    is_prefilling: torch.Tensor | np.ndarray,
    pcp_world_size: int,
    *,
    shard_decode_requests: bool = False,
    dcp_world_size: int = 1,
    padded_num_tokens: int | None = None,
) -> PCPLayout:
    """Every rank's layout of the batch under prefill context parallelism (DualChunkSwap).

    A prefill of q tokens is cut into 2P chunks of ceil(q / 2P) tokens and rank k computes
    chunks k and 2P - 1 - k; a replicated request (a decode, or under DCP a prefill too short to
    fill the 2P chunks) is whole on one owner rank (shard_decode_requests, round-robin) or on
    every rank (rank 0 writes its KV). A rank's segments are ordered decodes first, then
    prefills, each request's chunks in query order; each rank's stream is padded to L =
    padded_num_tokens (default: the largest rank's token count).

    Host inputs (CPU tensors or NumPy arrays, [R]): num_scheduled_tokens and num_computed_tokens
    int32 (int64 accepted), is_prefilling bool. Raises ValueError for P < 1, dcp_world_size < 1,
    lengths that differ, a negative count, padded_num_tokens below the largest rank's count, and
    shard_decode_requests with dcp_world_size > 1 (a layout that writes no KV for some tokens).
    """
    world = checked_int(pcp_world_size, "pcp_world_size")
    shard = checked_bool(shard_decode_requests, "shard_decode_requests")
    dcp = checked_int(dcp_world_size, "dcp_world_size")
    # None is -1 in the op's schema (the op rejects what is below).
    padded = -1 if padded_num_tokens is None else checked_int(padded_num_tokens, "padded_num_tokens")
    native = current_backend() != "reference"
    if native and _NATIVE is None:
        require_native("pcp_partition")
    counts = (num_scheduled_tokens, num_computed_tokens, is_prefilling)
    if native and all(type(t) is torch.Tensor and t.device.type == "cpu" for t in counts):
        # The C++ op checks the tensors itself (device, dtype, rank, layout: the same messages).
        parts = _NATIVE(*counts, world, shard, dcp, padded)
    else:
        q = _host_counts(num_scheduled_tokens, "num_scheduled_tokens")
        c = _host_counts(num_computed_tokens, "num_computed_tokens")
        f = _host_counts(is_prefilling, "is_prefilling")
        args = (q, c, f, world, shard, dcp, padded)
        if native:
            parts = _NATIVE(*args)
        else:
            if _CHECK is not None:  # without the extension the reference runs unchecked
                _CHECK(*args)  # the C++ op's checks (its Meta entry), then the reference's value checks
            parts = _reference(*args)
    gather, mask, restore, replicated, rank_info, segments, query_start_locs = parts
    info = rank_info.tolist()
    return PCPLayout(
        padded_num_tokens=info[0],
        per_rank_num_tokens=info[1:1 + world],
        replicated=replicated,
        padded_gather_idx=gather,
        gathered_kv_write_mask=mask,
        hidden_restore_idx=restore,
        segments=segments,
        segment_counts=info[1 + world:],
        local_query_start_locs=query_start_locs,
    )
