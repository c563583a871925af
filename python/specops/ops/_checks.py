"""Metadata checks in Python, mirroring csrc/cpu/checks.h.

They run in the fake kernel, before a Triton launch and before the reference, and look at
dtypes, ranks, shapes, devices and sizes only: reading values would cost a device-to-host
sync. Device kernels instead write PAD where a value is invalid; the native CPU op also
rejects invalid values, since reading them there is free.
"""

from __future__ import annotations

from collections.abc import Sequence

import operator
from typing import Any

import numpy as np
import torch
from torch._subclasses.fake_tensor import is_fake

from specops.arguments import (  # noqa: F401  (TRANSITION: re-exported)
    INT32_MAX, _described, check_allocated_elements, checked_bool, checked_int, checked_size, checked_tensor_list,
    bools_per_group, ints_per_group, normalize_config_fields)


def check_tensor(
    t: object,
    name: str,
    dtypes: Sequence[torch.dtype],
    dim: int,
    device: torch.device | None = None,
    device_of: str = "out",
) -> None:
    """dtype, rank, layout, and (given `device`) the device of `device_of`, the argument every
    other tensor of the call must share a device with."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        expected = " or ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise ValueError(f"{name} must have dtype {expected}, got {str(t.dtype).removeprefix('torch.')}")
    if t.dim() != dim:
        raise ValueError(f"{name} must be {dim}-D, got shape {list(t.shape)}")
    # A 1-D tensor is contiguous exactly when its last dimension is: one message for every rank.
    # An empty tensor holds no element to lay out (NumPy makes [0, n] arrays with strides [0, 0]).
    if dim >= 1 and t.size(-1) > 1 and t.stride(-1) != 1 and t.numel() > 0:
        raise ValueError(f"{name} must be contiguous in its last dimension, got strides {list(t.stride())}")
    if device is not None and t.device != device:
        raise ValueError(f"{name} must be on {device} like {device_of}, got {t.device}")


def check_positive(value: int, name: str) -> None:
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")


def check_rows_disjoint(t: torch.Tensor, name: str) -> None:
    """The rows of an output buffer must not share memory (see csrc/cpu/checks.h)."""
    if t.dim() < 2 or t.size(0) <= 1 or t.numel() == 0:
        return
    row_extent = 1 + sum((t.size(d) - 1) * t.stride(d) for d in range(1, t.dim()))
    if t.stride(0) < row_extent:
        raise ValueError(f"{name} must not have overlapping rows: stride(0) = {t.stride(0)} is below the "
                         f"{row_extent} elements a row spans")


def check_int32_range(value: int, name: str, lowest: int) -> None:
    """A size that int32 index math must hold: in [lowest, 2^31 - 1]."""
    if not lowest <= value <= INT32_MAX:
        raise ValueError(f"{name} must be in [{lowest}, 2^31 - 1], got {value}")


def check_non_negative(value: int, name: str) -> None:
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")


def check_cp_rank(cp_size: int, cp_rank: int, size_name: str, rank_name: str = "cp_rank") -> None:
    check_positive(cp_size, size_name)
    if not 0 <= cp_rank < cp_size:
        raise ValueError(f"{rank_name} must be in [0, {size_name} = {cp_size}), got {cp_rank}")


def check_token_count(value: int, name: str, cp_size: int) -> None:
    """A token count the CP split divides: every rank's share and its padding fit int32 (cp_size
    checked first)."""
    if not 0 <= value <= INT32_MAX - cp_size:
        raise ValueError(f"{name} must be in [0, 2^31 - 1 - cp_size], got {value}")


def check_context_parallel(cp_world_size: int, cp_rank: int, cp_interleave: int) -> None:
    check_cp_rank(cp_world_size, cp_rank, "cp_world_size")
    check_positive(cp_interleave, "cp_interleave")


def check_interleave_divides(kv_block: int, cp_interleave: int, owner: str = "") -> None:
    """cp_interleave must divide the allocation block (of `owner`, when several are checked)."""
    if kv_block % cp_interleave != 0:
        raise ValueError(
            f"cp_interleave must divide block_size * blocks_per_kv_block = {kv_block}{owner}, got {cp_interleave}"
        )


def check_entries(t: torch.Tensor, name: str, min_entries: int, what: str = "") -> None:
    """At least min_entries entries; `what` says where the number comes from (e.g. "R")."""
    if t.numel() < min_entries:
        count = f"{what} = {min_entries}" if what else f"{min_entries}"
        raise ValueError(f"{name} must have at least {count} entries, got {t.numel()}")


def check_query_start_loc(
    query_start_loc: torch.Tensor, device: torch.device | None = None, device_of: str = "out"
) -> int:
    """Checks the metadata of query_start_loc and returns R."""
    check_tensor(query_start_loc, "query_start_loc", [torch.int32], 1, device, device_of)
    if query_start_loc.numel() < 1:
        raise ValueError("query_start_loc must have R + 1 >= 1 entries, got 0")
    return query_start_loc.numel() - 1


def host_token_count(query_start_loc: torch.Tensor) -> int:
    """query_start_loc[R], read on the host to size an output the caller did not pass (a
    device-to-host copy for device tensors). The offsets are checked first (from 0, never
    decreasing), as the host op checks them, so no buffer is sized from an invalid value."""
    check_query_start_loc(query_start_loc)
    offsets = query_start_loc.tolist()
    if offsets[0] != 0:
        raise ValueError(f"query_start_loc[0] must be 0, got {offsets[0]}")
    for r in range(1, len(offsets)):
        if offsets[r] < offsets[r - 1]:
            raise ValueError(f"query_start_loc must be non-decreasing, but query_start_loc[{r}] = {offsets[r]} "
                             f"< query_start_loc[{r - 1}] = {offsets[r - 1]}")
    return offsets[-1]


def _byte_span(t: torch.Tensor) -> tuple[int, int]:
    """[first, end) of the bytes t's elements span (torch strides are never negative)."""
    start = t.data_ptr()
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return start, start + (last + 1) * t.element_size()


def _storage_span(t: torch.Tensor) -> tuple[int, int]:
    """[first, end) of the bytes t's elements span inside its storage."""
    start = t.storage_offset() * t.element_size()
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return start, start + (last + 1) * t.element_size()


def check_no_overlap(a: torch.Tensor, a_name: str, b: torch.Tensor, b_name: str) -> None:
    """For outputs that must not share memory with another output or an input.

    Looks at addresses and strides only, as csrc/cpu/checks.h does: the byte ranges from the
    first element to the last must be disjoint (conservative for interleaved strided views).
    Fake tensors (tracing) and meta tensors have no addresses: views of one storage are
    compared by their places in it, so a compiled graph rejects what the eager op rejects.
    """
    if a.device != b.device or a.numel() == 0 or b.numel() == 0:
        return
    if a.device.type != "meta" and not is_fake(a) and not is_fake(b):
        a_start, a_end = _byte_span(a)
        b_start, b_end = _byte_span(b)
    elif a.untyped_storage()._cdata == b.untyped_storage()._cdata:
        a_start, a_end = _storage_span(a)
        b_start, b_end = _storage_span(b)
    else:
        return
    if a_start < b_end and b_start < a_end:
        raise ValueError(f"{a_name} must not share memory with {b_name}")


NamedTensors = Sequence[tuple["torch.Tensor | None", str]]


def check_outputs_alias_nothing(outputs: NamedTensors, inputs: NamedTensors) -> None:
    """No output shares memory with another output or with an input the op reads after its
    first write (absent optional tensors are None). Mirrors csrc/cpu/checks.h."""
    for a, (output, output_name) in enumerate(outputs):
        if output is None:
            continue
        for other, other_name in outputs[:a]:
            if other is not None:
                check_no_overlap(output, output_name, other, other_name)
        for tensor, name in inputs:
            if tensor is not None:
                check_no_overlap(output, output_name, tensor, name)


def check_idx_mapping(
    idx_mapping: torch.Tensor | None, num_reqs: int, device: torch.device, device_of: str = "out"
) -> None:
    """An optional idx_mapping: int32 or int64 [R] (its rows are checked where the table is known)."""
    if idx_mapping is not None:
        check_tensor(idx_mapping, "idx_mapping", [torch.int32, torch.int64], 1, device, device_of)
        if idx_mapping.numel() != num_reqs:
            raise ValueError(
                f"idx_mapping must have R = query_start_loc.numel() - 1 = {num_reqs} entries, got {idx_mapping.numel()}"
            )
