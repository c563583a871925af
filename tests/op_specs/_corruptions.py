"""Draw helpers and corruptions that more than one op's spec uses (guard-band fuzzing).

A corruption is `apply(draw, call) -> bool`: it edits a valid call in place and returns True when
the native op must reject the result (see `Corruption` in _spec.py). The names keep their
leading underscore: Hypothesis derives its labels from the code of the draw functions, so
renaming them would change which examples the derandomized suites draw.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from hypothesis import strategies as st

from ._spec import I32, INT32_MAX, Call

def _seed(draw) -> torch.Generator:
    return torch.Generator().manual_seed(draw(st.integers(0, 2**16)))


def _pick(draw, n: int) -> int:
    return draw(st.integers(0, n - 1))


def _any_entry(draw, call: Call, name: str) -> int | None:
    tensor = call.get(name)
    return None if tensor is None or tensor.numel() == 0 else _pick(draw, tensor.numel())


def _one_entry(name: str, values: Callable[[Call], st.SearchStrategy[int]], *, native_raises: bool,
               where: Callable[[Callable, Call], int | None] | None = None) -> Callable[[Callable, Call], bool]:
    """A corruption: the entry where(draw, call) (default: any) of the tensor `name` set to a value
    drawn from values(call). With no such entry the call stays valid (the native op must not raise)."""
    def apply(draw, call: Call) -> bool:
        index = where(draw, call) if where is not None else _any_entry(draw, call, name)
        if index is None:
            return False
        call[name][index] = draw(values(call))
        return native_raises
    return apply


def _tokens_below_real(name: str) -> Callable[[Callable, Call], bool]:
    """A token count (num_tokens, num_input_tokens) below query_start_loc[R]."""
    def apply(draw, call: Call) -> bool:
        real = int(call["query_start_loc"][-1])
        if real == 0:
            return False
        call[name] = draw(st.integers(0, real - 1))
        return True
    return apply


def _negative(call: Call) -> st.SearchStrategy[int]:
    return st.integers(-1000, -1)


def _with_idx_mapping(call: Call, num_reqs: int) -> torch.Tensor:
    if call["idx_mapping"] is None:
        call["idx_mapping"] = torch.arange(num_reqs, dtype=I32)
    return call["idx_mapping"]


def _negative_block_ids(draw, call: Call | list, table: str | int = "block_table") -> bool:
    block_table = call[table]
    if block_table.numel():
        generator = _seed(draw)
        hit = torch.rand(block_table.shape, generator=generator) < 0.3
        block_table[hit] = -torch.randint(1, INT32_MAX, (int(hit.sum()),), dtype=I32, generator=generator)
    return False


def _query_start_loc_past(num_tokens: Callable[[Call], int]) -> Callable[[Callable, Call], bool]:
    """query_start_loc[R] past the tokens the call has room for: requests that run off the end."""
    def apply(draw, call: Call) -> bool:
        qsl = call["query_start_loc"]
        qsl[-1] = max(int(qsl[-1]), num_tokens(call)) + draw(st.integers(1, 3))
        return True
    return apply


def _decreasing(name: str, first: int = 0) -> Callable[[Callable, Call], bool]:
    """Offsets (query_start_loc, cu_lens) that go backwards at an index >= first (index 0: a
    start below 0)."""
    def apply(draw, call: Call) -> bool:
        offsets = call[name]
        if offsets.numel() <= first:
            return False
        k = first + _pick(draw, offsets.numel() - first)
        offsets[k] = (offsets[k - 1] if k else 0) - draw(st.integers(1, 5))
        return True
    return apply


def _extreme_entries(draw, t: torch.Tensor) -> None:
    """A few entries of `t` at its dtype's extremes (or just inside them)."""
    if t.numel():
        info = torch.iinfo(t.dtype)
        for _ in range(draw(st.integers(1, 3))):
            t[_pick(draw, t.numel())] = draw(st.sampled_from([info.min, info.max, info.min + 1, info.max - 1, -2]))


def _extreme(*names: str) -> Callable[[Callable, Call], bool]:
    """Extreme values in the named tensors: int32 sums wrap alike on every path, and a row index
    out of every range takes the host value."""
    def apply(draw, call: Call) -> bool:
        _extreme_entries(draw, call[draw(st.sampled_from(names))])
        return False
    return apply
