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

INT32_MAX = 2**31 - 1


def _described(value: Any) -> str:
    return "None" if value is None else f"{type(value).__name__} {value!r}"


def is_tensor(value: Any) -> bool:
    """A tensor by its type (torch.Tensor, Parameter, a real subclass), as FastOp takes one
    (csrc/fastpath/py_values.h): not isinstance, which a value whose __class__ says torch.Tensor
    (a MagicMock(spec=torch.Tensor)) passes without a tensor's attributes."""
    return issubclass(type(value), torch.Tensor)


def checked_int(value: Any, name: str) -> int:
    """value as every backend takes an int (FastOp, csrc/fastpath/fast_call.cpp, the same): a Python int,
    a NumPy integer, an integer tensor of one element; converted to int. Bools (True, a NumPy
    bool, a bool tensor), which torch's schema would read as 1 or 0, floats, None and strings
    are a ValueError naming the argument: the mirror of checked_bool's rule."""
    if type(value) is int:
        return value
    # By the value's type, as FastOp asks (csrc/fastpath/fast_call.cpp's is_int_like): isinstance
    # would take a value whose __class__ claims int or torch.Tensor.
    if issubclass(type(value), (bool, np.bool_)):
        raise ValueError(f"{name} must be an int, got {_described(value)}")
    if issubclass(type(value), (int, np.integer)) or (
            is_tensor(value) and value.numel() == 1 and not value.is_floating_point()
            and not value.is_complex() and value.dtype != torch.bool):
        return operator.index(value)
    raise ValueError(f"{name} must be an int, got {_described(value)}")


def ints_per_group(value: Any, num_groups: int, name: str) -> list[int]:
    """An int[] argument with one entry per group, or one int for every group: checked as torch's
    schema takes ints (checked_int), naming the entry (block_sizes[1]) or the argument."""
    if type(value) is int:  # the usual one value for all groups, without the Sequence ABC check
        return [value] * num_groups
    if type(value) is list:  # a list of plain ints (the other usual form): no ABC check, no names built
        for entry in value:
            if type(entry) is not int:
                break
        else:
            return list(value)
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [checked_int(entry, f"{name}[{g}]") for g, entry in enumerate(value)]
    return [checked_int(value, name)] * num_groups


def normalize_config_fields(config: Any, ints: Sequence[str] = (), optional_ints: Sequence[str] = (),
                            bools: Sequence[str] = ()) -> None:
    """A frozen dataclass's number and flag fields, taken as the ops take their int and bool
    arguments (checked_int, checked_bool: NumPy ints accepted and stored as Python ints, floats
    such as 16.0 rejected, truthy non-bools such as "no" rejected), before any range check reads
    them. optional_ints may also be None."""
    for name in (*ints, *optional_ints):
        value = getattr(config, name)
        if value is None and name in optional_ints:
            continue
        if type(value) is not int:
            object.__setattr__(config, name, checked_int(value, name))
    for name in bools:
        value = getattr(config, name)
        if type(value) is not bool:
            object.__setattr__(config, name, checked_bool(value, name))


def bools_per_group(value: Any, num_groups: int, name: str) -> list[bool]:
    """A per-group bool argument, one entry per group or one value for every group, each taken as
    checked_bool takes it, naming the entry (cp_sharded[1]) or the argument."""
    # The usual arguments first, without the Sequence ABC check and the per-entry names, which
    # cost more than a small op's body on every call.
    if value is True or value is False:
        return [value] * num_groups
    if type(value) is list:
        for entry in value:
            if entry is not True and entry is not False:
                break
        else:
            return list(value)
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [checked_bool(entry, f"{name}[{g}]") for g, entry in enumerate(value)]
    return [checked_bool(value, name)] * num_groups


_TENSOR = torch.Tensor


def checked_tensor_list(value: Any, name: str) -> list[torch.Tensor]:
    """A list (or tuple) of tensors, one per group, as a list; a ValueError names the argument or
    the entry that is not a tensor (block_tables[1] None), before anything is sized from it."""
    if type(value) is list:
        # Plain tensors without isinstance (torch.Tensor's metaclass makes it slow); anything
        # else takes the checks below.
        for entry in value:
            if type(entry) is not _TENSOR:
                break
        else:
            return list(value)
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{name} must be a list of tensors, got {_described(value)}")
    for g, entry in enumerate(value):
        if not is_tensor(entry):
            raise ValueError(f"{name}[{g}] must be a tensor, got {_described(entry)}")
    return list(value)


def check_allocated_elements(rows: int, row_elements: int, name: str, what: str) -> None:
    """An output a wrapper allocates holds at most 2^31 - 1 elements (the kernels index a buffer
    with int32 element offsets): checked before the allocation, naming the argument that sizes it
    (`what` says how)."""
    if rows * row_elements > INT32_MAX:
        raise ValueError(f"{name} would size an output of {rows} x {row_elements} elements ({what}), more than "
                         f"2^31 - 1")


def checked_size(value: Any, name: str, lowest: int, what: str = "") -> int:
    """An int argument that sizes an output the wrapper allocates: checked before the allocation
    (never `negative dimension`, never gigabytes from an unchecked value). `what` names lowest.
    Bounded above too (docs/hardening.md, "Sizes an op allocates from"): the kernels index an
    output with int32 offsets, so a size past 2^31 - 1 is a ValueError naming it, on every
    backend, before torch's allocator sees it."""
    value = checked_int(value, name)
    if value < lowest:
        raise ValueError(f"{name} must be >= {what or lowest}, got {value}")
    if value > INT32_MAX:
        raise ValueError(f"{name} must be <= 2^31 - 1 (the outputs it sizes are indexed with int32 offsets), "
                         f"got {value}")
    return value


def checked_bool(value: Any, name: str) -> bool:
    """value as every backend takes a bool (FastOp, csrc/fastpath/fast_call.cpp, the same): True or False,
    a NumPy bool, or a one-element bool tensor (torch's schema reads these three as the bool they
    hold). Ints (0 and 1 too), floats, None, strings and other tensors, which torch's schema would
    read by their truth value, are a ValueError naming the argument."""
    if type(value) is bool:
        return value
    if issubclass(type(value), np.bool_) or (
            is_tensor(value) and value.dtype == torch.bool and value.numel() == 1):
        return bool(value)
    raise ValueError(f"{name} must be a bool (True, False, a NumPy bool or a one-element bool tensor), "
                     f"got {_described(value)}")


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
    if not is_tensor(t):
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
