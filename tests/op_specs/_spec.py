"""The op table's vocabulary: how an op is described once for the hardening suites.

An `OpSpec` says how to call an op validly (a fixed small call and a hypothesis strategy of
random calls, both with every output buffer given), which arguments are tensors (dtypes, rank,
whether a row stride is accepted), which changes make a call invalid on every path (metadata:
shapes, sizes, scalars) or on the native path only (values the host op reads and device kernels
cannot check), and which invalid values reach the device kernels in the guard-band fuzzing.
Elements of list arguments are keyed "name[i]" (block_tables[0]), as the errors name them.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable
from typing import Any

import torch
from hypothesis import strategies as st

I32, I64 = torch.int32, torch.int64
INT32_MAX = 2**31 - 1
STALE = 0x0BADF00D  # what an output holds before a call: a value no op computes here
PAST_INT32 = (2**31, 2**40)  # sizes past int32 indexing (OpSpec.allocation_sizes' default bound)

Call = dict[str, Any]


def _split_key(key: str) -> tuple[str, int | None]:
    """"block_tables[1]" -> ("block_tables", 1); "out" -> ("out", None)."""
    if key.endswith("]"):
        name, index = key[:-1].split("[")
        return name, int(index)
    return key, None


def get_arg(call: Call, key: str) -> Any:
    """The argument, or one element of a list argument (None where the call has no such list, or a
    shorter one: a mode's list that the call leaves empty)."""
    name, index = _split_key(key)
    value = call.get(name)
    if index is None or value is None:
        return value
    return value[index] if index < len(value) else None


def set_arg(call: Call, key: str, value: Any) -> None:
    """Replaces an argument, or one element of a list argument (in a copy of the list)."""
    name, index = _split_key(key)
    if index is None:
        call[name] = value
    else:
        call[name] = [value if i == index else item for i, item in enumerate(call[name])]


def tensor_keys(call: Call) -> list[str]:
    """Every tensor of a call, list elements included."""
    keys = []
    for name, value in call.items():
        if isinstance(value, torch.Tensor):
            keys.append(name)
        elif isinstance(value, list):
            keys += [f"{name}[{i}]" for i, item in enumerate(value) if isinstance(item, torch.Tensor)]
    return keys


@dataclasses.dataclass(frozen=True)
class Arg:
    """A tensor argument: accepted dtypes, rank, and whether rows may be strided (a 2-D or 3-D
    view into a wider buffer; the last dimension stays contiguous)."""

    dtypes: tuple[torch.dtype, ...]
    dim: int
    row_stride: bool = False
    # Other ranks the op also takes for the argument ([M] or [L, M], 0-D or [1]): a derived rank
    # change that lands on one of them is a valid call, not a case of the bad-input matrix.
    other_dims: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class Bad:
    """One invalid change to a valid call. `change` edits the call in place; the error must name
    every argument in `names`."""

    label: str
    names: tuple[str, ...]
    change: Callable[[Call], None]


def bad(label: str, names: str | tuple[str, ...], **replace: Any) -> Bad:
    """A Bad that replaces arguments; `names` defaults to the replaced argument."""
    return Bad(label, (names,) if isinstance(names, str) else names, lambda call: call.update(replace))


def bad_with(label: str, names: str | tuple[str, ...], change: Callable[[Call], None]) -> Bad:
    return Bad(label, (names,) if isinstance(names, str) else names, change)


@dataclasses.dataclass(frozen=True)
class Corruption:
    """Invalid values for the guard-band fuzzing. `apply(draw, call)` edits a valid call and
    returns True when the native op must reject the result, False when the values are only
    unusual (PAD rows, negative block ids) and the native op must agree with the reference.

    `device`: "agree": the Triton kernel writes exactly what the reference writes (PAD or the
    documented neutral value where the input is invalid); "bounds": the values written are
    unspecified (the input contradicts itself), only the guard bands are checked."""

    label: str
    apply: Callable[[Callable, Call], bool]
    device: str = "agree"


# Guard-band draws for the kernels Triton's interpreter runs slowest (a call costs tenths of a
# second): fewer than OpSpec's default keeps make test in its time; test-explore draws more.
SLOW_KERNEL_GUARD_EXAMPLES = 10


@dataclasses.dataclass(frozen=True)
class OpSpec:
    name: str  # the schema: torch.ops.specops.<name>
    wrapper: Callable[..., Any]  # the public function, called with keywords
    tensors: dict[str, Arg]  # every tensor argument of the wrapper, outputs included
    outputs: tuple[str, ...]  # the buffers the op writes
    valid_call: Callable[[], Call]  # a small valid call with every output given, fresh tensors
    metadata_errors: Callable[[], list[Bad]]  # rejected on every path, before any write
    value_errors: Callable[[], list[Bad]]  # rejected by the native host op, before any write
    draw_call: st.SearchStrategy[Call]  # random valid calls, every output given
    corruptions: tuple[Corruption, ...]  # invalid values for the device paths
    guard_examples: int = 25  # hypothesis examples per guard-band family (the interpreter is slow)
    # The wrapper's int arguments, when they are not the schema's ints alone (an int[] schema argument).
    scalars: tuple[str, ...] | None = None
    host_tensors: tuple[str, ...] = ()  # host copies that stay on the CPU when the rest is on a device
    # Inputs every backend reads in full before its first write, so they may share memory with
    # an output (the result is as if they had not); every other input, and every other output,
    # sharing memory with an output is rejected (test_bad_input_matrix.py, aliasing family).
    reads_first: tuple[str, ...] = ()
    # Offsets (query_start_loc, cu_lens) that describe the layout of the rest: with extreme values
    # there the input contradicts itself, and the device outputs are unspecified (in bounds).
    offsets: tuple[str, ...] = ()
    # Optional tensors of which a valid call gives only one (two sources of one value): the one
    # the valid call leaves None gets its dtype and rank errors from metadata_errors instead.
    exclusive: tuple[str, ...] = ()
    # Valid calls of the op's other modes, (label, call), whose arguments the calls above do not
    # have (prepare_spec_decode_inputs' request-indexed mode and its gathered tables): compiled
    # for the device targets (tooling/test_kernel_compile.py) and run on the NPU route (tests/ascend).
    mode_calls: Callable[[], list[tuple[str, Call]]] = lambda: []
    # Tensors the op takes in every dtype (move_kv_cache_entries' caches: it moves their bytes),
    # for which the matrix derives no wrong dtype; their Arg.dtypes are the ones calls are drawn in.
    any_dtype: tuple[str, ...] = ()
    # Every size the wrapper allocates an output from when the call leaves the output out, with
    # the values past its bound (typically PAST_INT32); {} for an op that allocates from no
    # argument (only from the sizes of tensors that exist, or a fixed size); None: not described,
    # which tests/hardening/test_allocation_sizes.py rejects (docs/hardening.md, "Sizes an op
    # allocates from").
    allocation_sizes: dict[str, tuple[object, ...]] | None = None


def extreme_values(dtype: torch.dtype) -> tuple[int, ...]:
    """Where int32 index math wraps (and, in int64 tensors, where int32 stops and int64 ends)."""
    values = (-(2**31), -(2**31) + 1, -1, 0, 2**31 - 2, 2**31 - 1)
    if dtype == I64:
        values += (-(2**63), -(2**31) - 1, 2**31, 2**32, 2**63 - 1)
    return values


def t32(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=I32)


def t64(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=I64)


def stale(*shape: int, dtype: torch.dtype = I32) -> torch.Tensor:
    return torch.full(shape, STALE, dtype=dtype)


def names_pattern(name: str) -> str:
    """A regex for `name` as a whole word of an error message (num_reqs does not match num_reqs_padded)."""
    return rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])"


def takes_none(spec: OpSpec, name: str) -> bool:
    """Whether the wrapper's keyword defaults to None (None then means the default)."""
    parameter = inspect.signature(spec.wrapper).parameters.get(name)
    return parameter is not None and parameter.default is None
