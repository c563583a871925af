"""How specops takes int, bool, list and size arguments, and the sizes its wrappers allocate.

Every op's checks live in its C++ file (csrc/cpu/NAME.cpp: the op's Meta kernel, which every
backend runs first); this module is what Python does before an op is called: it takes the
arguments torch's schema would convert (a NumPy integer for an int, one value for every group of
a per-group list) as the ops take them, refuses the ones torch would read wrongly (a float or
None for an int, a truthy string for a bool) with a ValueError naming them, and bounds the sizes
a wrapper or a layer allocates from (an op never allocates). The layers (persistent/, drafting/)
and the config objects use the same rules.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from specops._extension import EXTENSION
from specops._fastpath import fronted_group_settings, fronted_tensor_list, native_entry

INT32_MAX = 2**31 - 1


def _described(value: Any) -> str:
    return "None" if value is None else f"{type(value).__name__} {value!r}"


def is_tensor(value: Any) -> bool:
    """A tensor by its type (torch.Tensor, Parameter, a real subclass), as FastOp takes one
    (csrc/fastpath/py_values.h): not isinstance, which a value whose __class__ says torch.Tensor
    (a MagicMock(spec=torch.Tensor)) passes without a tensor's attributes."""
    return issubclass(type(value), torch.Tensor)


def checked_int(value: Any, name: str) -> int:
    """value as every backend takes an int (FastOp, csrc/fastpath/boxing.cpp, the same): a Python int,
    a NumPy integer, an integer tensor of one element; converted to int. Bools (True, a NumPy
    bool, a bool tensor), which torch's schema would read as 1 or 0, floats, None and strings
    are a ValueError naming the argument: the mirror of checked_bool's rule."""
    if type(value) is int:
        return value
    # By the value's type, as FastOp asks (csrc/fastpath/py_values.h's is_int_like): isinstance
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


def plain_checked_tensor_list(value: Any, name: str) -> list[torch.Tensor]:
    """A list (or tuple) of tensors, one per group, as a list; a ValueError names the argument or
    the entry that is not a tensor (block_tables[1] None), before anything is sized from it."""
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{name} must be a list of tensors, got {_described(value)}")
    for g, entry in enumerate(value):
        if not is_tensor(entry):
            raise ValueError(f"{name}[{g}] must be a tensor, got {_described(entry)}")
    return list(value)


# What the package calls: the usual forms (an exact list or tuple of tensors) in one C call, every
# other call the function above (specops._fastpath; the function alone under SPECOPS_FASTPATH=0).
checked_tensor_list = fronted_tensor_list(plain_checked_tensor_list)


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
    """value as every backend takes a bool (FastOp, csrc/fastpath/boxing.cpp, the same): True or False,
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


def _per_group(value: Any, num_groups: int, name: str, taken: Any, plain: type) -> list:
    """A per-group argument as its schema takes it: a list (or any sequence but a string) as a
    list, whose entries the op judges; one value for every group, taken as `taken` takes it
    (`plain`: the type taken as it is)."""
    # The usual forms first (one plain value, a list), without the Sequence ABC check, which
    # costs more than a small op's body on every call.
    kind = type(value)
    if kind is plain:
        return [value] * num_groups
    if kind is list or kind is tuple or (isinstance(value, Sequence) and not isinstance(value, str)):
        return list(value)
    return [taken(value, name)] * num_groups


def plain_group_settings(block_sizes: Sequence[int] | int, blocks_per_kv_block: Sequence[int] | int,
                         cp_sharded: Sequence[bool] | bool, slot_mapping_enabled: Sequence[bool] | bool,
                         num_groups: int) -> list[list]:
    """The per-group keywords of a multi-group op's wrapper (a list, or one value for every
    group) as its schema takes them, [block_sizes, blocks_per_kv_block, cp_sharded,
    slot_mapping_enabled]; the op checks each list's length and entries."""
    return [_per_group(block_sizes, num_groups, "block_sizes", checked_int, int),
            _per_group(blocks_per_kv_block, num_groups, "blocks_per_kv_block", checked_int, int),
            _per_group(cp_sharded, num_groups, "cp_sharded", checked_bool, bool),
            _per_group(slot_mapping_enabled, num_groups, "slot_mapping_enabled", checked_bool, bool)]


# What the package calls: every call of a multi-group op's wrapper passes all four, usually as a
# list or one plain int or bool each, taken in one C call; any other form goes to the function
# above (specops._fastpath; the function alone under SPECOPS_FASTPATH=0).
group_settings = fronted_group_settings(plain_group_settings)


def padded_argument(value: int | None, name: str) -> int:
    """A wrapper's optional *_padded argument as the schema takes it (-1: each buffer's end).
    Checked before the wrapper sizes an output from it: a padded extent is an int32 count."""
    if value is None:
        return -1
    value = checked_size(value, name, 0)
    if value >= 2**31 - 1:
        raise ValueError(f"{name} must be < 2^31 - 1, got {value}")
    return value


def max_model_len_arguments(max_model_len: Any, max_model_len_tensor: Any) -> tuple[Any, Any]:
    """A draft op wrapper's limit as its schema takes it: (the int, None), or for a tensor, read
    on the device (vLLM 0.34's `max_model_len_gpu`), (-1, the tensor). The tensor comes as
    max_model_len_tensor (the schema's name) or as max_model_len itself: never read on the host;
    the op checks it (csrc/cpu/step_checks.h, check_max_model_len)."""
    if is_tensor(max_model_len) and max_model_len.dtype in (torch.int32, torch.int64) and max_model_len_tensor is None:
        # Any other tensor stays an int argument, rejected as one (a bool or float is not a limit).
        max_model_len, max_model_len_tensor = None, max_model_len
    if max_model_len_tensor is not None:
        if max_model_len is not None:
            raise ValueError("give max_model_len or max_model_len_tensor, not both")
        return -1, max_model_len_tensor
    if max_model_len is None:
        raise ValueError("max_model_len must be given (an int, or a 0-D tensor as max_model_len_tensor)")
    return max_model_len, None


_TOKENS = native_entry("query_start_loc_tokens")


def query_start_loc_tokens(query_start_loc: Any) -> int:
    """query_start_loc[R], read on the host (a device-to-host copy for a device tensor) after
    query_start_loc's own checks, the host op's (csrc/cpu/query_start_loc_tokens.cpp: int32
    [R + 1] from 0, never decreasing): the token count a wrapper sizes an output from when the
    caller gives neither the output nor its size, never an unchecked value."""
    if _TOKENS is None:  # without the extension: the reference backend alone runs, unchecked
        return int(query_start_loc[-1])
    return _TOKENS(query_start_loc.cpu() if is_tensor(query_start_loc) else query_start_loc)


# checks.h's shared metadata checks themselves (csrc/checks_binding.cpp), for tensors that reach
# no op's schema as one call (a layer checking several ops' arguments before its first write, a
# layout's buffers, a host copy): the ops' messages, from the same code. Inside a traced region
# they check nothing (Dynamo cannot trace a C extension's function): there every op's fake kernel
# checks its own arguments while the graph is traced, before any of it runs. Without the
# extension they check nothing either: then only the reference backend runs, unchecked.
_C = None
if EXTENSION.loaded:
    import specops._C as _C
_is_compiling = torch.compiler.is_compiling


def _unchecked() -> bool:
    return _C is None or _is_compiling()


def check_tensor(t: Any, name: str, dtypes: Sequence[torch.dtype], dim: int, device: torch.device | None = None,
                 device_of: str = "out") -> None:
    """dtype, rank, layout and (given device) the device of device_of, the argument every other
    tensor of the call shares a device with (checks.h's check_tensor)."""
    if not _unchecked():
        _C.check_tensor(t, name, dtypes, dim, device, device_of)


def check_query_start_loc(query_start_loc: Any, device: torch.device | None = None, device_of: str = "out") -> int:
    """query_start_loc's metadata (int32 [R + 1], R >= 0); returns R."""
    if _unchecked():
        return query_start_loc.numel() - 1
    return _C.check_query_start_loc(query_start_loc, device, device_of)


def check_entries(t: Any, name: str, required: int, what: str) -> None:
    """At least `required` entries, `what` naming that count."""
    if not _unchecked():
        _C.check_entries(t, name, required, what)


def check_no_overlap(a: Any, a_name: str, b: Any, b_name: str) -> None:
    """a and b share no memory (nothing when on two devices)."""
    if not _unchecked():
        _C.check_no_overlap(a, a_name, b, b_name)


def check_outputs_alias_nothing(outputs: Sequence, inputs: Sequence) -> None:
    """No output shares memory with another output or an input; each a sequence of (tensor or
    None, name)."""
    if not _unchecked():
        _C.check_outputs_alias_nothing(outputs, inputs)


# A config object's numbers (MappingGroup, PersistentMappings, ModelConfig, GroupConfig, the
# drafting plans): checked when it is made, naming the field, as the ops name theirs.

def check_positive(value: int, name: str) -> None:
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")


def check_non_negative(value: int, name: str) -> None:
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")


def check_int32_range(value: int, name: str, lowest: int) -> None:
    """A size that int32 index math must hold: in [lowest, 2^31 - 1]."""
    if not lowest <= value <= INT32_MAX:
        raise ValueError(f"{name} must be in [{lowest}, 2^31 - 1], got {value}")


def check_cp_rank(cp_size: int, cp_rank: int, size_name: str, rank_name: str = "cp_rank") -> None:
    check_positive(cp_size, size_name)
    if not 0 <= cp_rank < cp_size:
        raise ValueError(f"{rank_name} must be in [0, {size_name} = {cp_size}), got {cp_rank}")
