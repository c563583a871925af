"""Every op, described once for the hardening tests (see docs/hardening.md).

An `OpSpec` says how to call an op validly (a fixed small call and a hypothesis strategy of
random calls, both with every output buffer given), which arguments are tensors (dtypes, rank,
whether a row stride is accepted), which changes make a call invalid on every path (metadata:
shapes, sizes, scalars) or on the native path only (values the host op reads and device kernels
cannot check), and which invalid values reach the device kernels in the guard-band fuzzing.
Elements of list arguments are keyed "name[i]" (block_tables[0]), as the errors name them.

test_bad_input_matrix.py, test_guard_bands.py and test_steady_state.py derive all their cases
from OP_TABLE. Adding an op is one OpSpec appended to OP_TABLE; test_bad_input_matrix.py fails
for a schema in torch.ops.specops that has no entry here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from hypothesis import strategies as st
from strategies import (
    batch_shapes,
    cp_batches,
    make_batch,
    make_block_source,
    make_correction_inputs,
    make_spec_decode_step,
    make_staged_writes,
    query_start_loc_of,
    sas_calls,
)

import specops

I32, I64 = torch.int32, torch.int64
INT32_MAX = 2**31 - 1
STALE = 0x0BADF00D  # what an output holds before a call: a value no op computes here

Call = dict[str, Any]


def _split_key(key: str) -> tuple[str, int | None]:
    """"block_tables[1]" -> ("block_tables", 1); "out" -> ("out", None)."""
    if key.endswith("]"):
        name, index = key[:-1].split("[")
        return name, int(index)
    return key, None


def get_arg(call: Call, key: str) -> Any:
    name, index = _split_key(key)
    return call.get(name) if index is None else call[name][index]


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
    guard_examples: int = 40  # hypothesis examples per guard-band family (the interpreter is slow)
    # The wrapper's int arguments, when they are not the schema's (a packed int[] schema argument).
    scalars: tuple[str, ...] | None = None
    host_tensors: tuple[str, ...] = ()  # host copies that stay on the CPU when the rest is on a device
    # Inputs every backend reads in full before its first write, so they may share memory with
    # an output (the result is as if they had not); every other input, and every other output,
    # sharing memory with an output is rejected (test_bad_input_matrix.py, aliasing family).
    reads_first: tuple[str, ...] = ()
    # Offsets (query_start_loc, cu_lens) that describe the layout of the rest: with extreme values
    # there the input contradicts itself, and the device outputs are unspecified (in bounds).
    offsets: tuple[str, ...] = ()


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


# ------------------------------------------------------------------ compute_slot_mapping (3.1)

def _slot_valid() -> Call:
    return dict(query_start_loc=t32(0, 2, 3), positions=t64(0, 17, 5),
                block_table=torch.tensor([[1, 2], [3, 4], [5, 6]], dtype=I32), block_size=16,
                out=stale(5, dtype=I64), blocks_per_kv_block=1, cp_world_size=1, cp_rank=0, cp_interleave=1,
                idx_mapping=t32(2, 0), num_tokens_padded=4, num_blocks=t32(2, 1, 2))


def _slot_metadata() -> list[Bad]:
    return [
        bad("R+1 = 0 entries", "query_start_loc", query_start_loc=torch.zeros(0, dtype=I32)),
        bad("one request more than idx_mapping", ("idx_mapping", "query_start_loc"), query_start_loc=t32(0, 2, 3, 3)),
        bad("out smaller than T", ("num_tokens_padded", "out"), out=stale(2, dtype=I64), num_tokens_padded=None),
        bad("num_tokens_padded < T", "num_tokens_padded", num_tokens_padded=2),
        bad("num_tokens_padded > out", ("num_tokens_padded", "out"), num_tokens_padded=6),
        bad("block_size 0", "block_size", block_size=0),
        bad("block_size -16", "block_size", block_size=-16),
        bad("blocks_per_kv_block 0", "blocks_per_kv_block", blocks_per_kv_block=0),
        bad("cp_world_size 0", "cp_world_size", cp_world_size=0),
        bad("cp_rank = cp_world_size", ("cp_rank", "cp_world_size"), cp_rank=1),
        bad("cp_rank -1", "cp_rank", cp_rank=-1),
        bad("cp_interleave 0", "cp_interleave", cp_interleave=0),
        bad("cp_interleave not dividing the block", "cp_interleave", cp_interleave=3),
        bad("virtual block past int32", ("block_size", "cp_world_size"), block_size=2**30, cp_world_size=2),
        bad("num_blocks shorter than the table", ("num_blocks", "block_table"), num_blocks=t32(2, 1)),
    ]


def _slot_values() -> list[Bad]:
    return [
        bad("position past the block table", "positions", positions=t64(0, 32, 5)),
        # Request 0 reads row 2, which holds one block: position 17 needs a second.
        bad("position past the row's allocated blocks", ("positions", "num_blocks"), num_blocks=t32(2, 1, 1)),
        bad("negative position", "positions", positions=t64(0, -1, 5)),
        bad("position past int32", "positions", positions=t64(0, 2**31, 5)),
        bad("idx_mapping past the block table", "idx_mapping", idx_mapping=t32(3, 0)),
        bad("query_start_loc decreasing", "query_start_loc", query_start_loc=t32(0, 4, 3)),
        bad("query_start_loc[0] != 0", "query_start_loc", query_start_loc=t32(1, 2, 3)),
        bad("query_start_loc[R] != T", ("query_start_loc", "positions"), positions=t64(0, 17, 5, 6),
            num_tokens_padded=4),
        # Row 2, position 0: block 2^28 of 16 tokens is slot 2^32, which an int32 out would hold as 0.
        bad("a slot past an int32 out", "out", out=stale(5, dtype=I32),
            block_table=torch.tensor([[1, 2], [3, 4], [2**28, 6]], dtype=I32)),
    ]


@st.composite
def _slot_draw(draw) -> Call:
    query_lens, context_lens = draw(batch_shapes(max_reqs=5, max_query_len=5, max_context=120))
    block_size = draw(st.sampled_from([1, 4, 16]))
    blocks_per_kv_block = draw(st.sampled_from([1, 2]))
    world = draw(st.sampled_from([1, 2, 3]))
    interleave = draw(st.sampled_from([1, 2, 4]))
    if (block_size * blocks_per_kv_block) % interleave:
        interleave = 1
    batch = make_batch(_seed(draw), query_lens=query_lens, context_lens=context_lens,
                       tokens_per_block_row=block_size * blocks_per_kv_block * world,
                       columns_per_block=blocks_per_kv_block, extra_rows=2,
                       with_idx_mapping=draw(st.booleans()), unmapped_fraction=0.3)
    idx_mapping = batch.idx_mapping
    if idx_mapping is not None:
        idx_mapping = idx_mapping.to(draw(st.sampled_from([I32, I64])))
    padded = batch.num_tokens + draw(st.integers(0, 4))
    untouched = draw(st.integers(0, 2))  # entries past num_tokens_padded: never written
    # Every column counted as allocated, or no counts: the positions stay valid.
    num_blocks = (torch.full((batch.block_table.size(0),), batch.block_table.size(1), dtype=I32)
                  if draw(st.booleans()) else None)
    return dict(query_start_loc=batch.query_start_loc, positions=batch.positions.to(draw(st.sampled_from([I64, I32]))),
                block_table=batch.block_table, block_size=block_size, num_blocks=num_blocks,
                out=stale(padded + untouched, dtype=draw(st.sampled_from([I64, I32]))),
                blocks_per_kv_block=blocks_per_kv_block, cp_world_size=world, cp_rank=_pick(draw, world),
                cp_interleave=interleave, idx_mapping=idx_mapping, num_tokens_padded=padded)


def _slot_token_with_row(draw, call: Call) -> int | None:
    """A token whose request reads a row of the table (mapping it to row 0 if it had none)."""
    num_tokens = call["positions"].numel()
    if num_tokens == 0:
        return None
    token = _pick(draw, num_tokens)
    if call["idx_mapping"] is not None:
        request = int(torch.searchsorted(call["query_start_loc"][1:], token, right=True))
        if not 0 <= int(call["idx_mapping"][request]) < call["block_table"].size(0):
            call["idx_mapping"][request] = 0
    return token


def _slot_local_position(call: Call, virtual_block: int) -> int:
    """A position in `virtual_block` that this CP rank stores."""
    block = call["block_size"] * call["blocks_per_kv_block"]
    return virtual_block * block * call["cp_world_size"] + call["cp_rank"] * call["cp_interleave"]


def _slot_positions_past_table(call: Call) -> st.SearchStrategy[int]:
    first_uncovered = call["block_table"].size(1) // call["blocks_per_kv_block"]
    return st.integers(0, 3).map(lambda k: _slot_local_position(call, first_uncovered + k))


def _slot_more_positions_than_tokens(draw, call: Call) -> bool:
    """T past query_start_loc[R]: tokens outside every request (with R = 0, a batch of none)."""
    extra = draw(st.integers(1, 3))
    call["positions"] = torch.cat([call["positions"], torch.zeros(extra, dtype=call["positions"].dtype)])
    call["num_tokens_padded"] += extra
    call["out"] = stale(call["out"].numel() + extra, dtype=call["out"].dtype)
    return True


def _with_idx_mapping(call: Call, num_reqs: int) -> torch.Tensor:
    if call["idx_mapping"] is None:
        call["idx_mapping"] = torch.arange(num_reqs, dtype=I32)
    return call["idx_mapping"]


def _slot_idx_past_table(draw, call: Call) -> bool:
    num_reqs = call["query_start_loc"].numel() - 1
    if num_reqs == 0:
        return False
    _with_idx_mapping(call, num_reqs)[_pick(draw, num_reqs)] = call["block_table"].size(0) + draw(st.integers(0, 5))
    return True


def _slot_negative_idx(draw, call: Call) -> bool:
    num_reqs = call["query_start_loc"].numel() - 1
    if num_reqs:
        _with_idx_mapping(call, num_reqs)[_pick(draw, num_reqs)] = -draw(st.integers(1, 5))
    return False


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


SLOT_MAPPING = OpSpec(
    name="compute_slot_mapping",
    wrapper=specops.compute_slot_mapping,
    tensors=dict(query_start_loc=Arg((I32,), 1), positions=Arg((I64, I32), 1),
                 block_table=Arg((I32,), 2, row_stride=True), idx_mapping=Arg((I32, I64), 1), out=Arg((I64, I32), 1),
                 num_blocks=Arg((I32,), 1)),
    outputs=("out",),
    valid_call=_slot_valid,
    metadata_errors=_slot_metadata,
    value_errors=_slot_values,
    offsets=("query_start_loc",),
    draw_call=_slot_draw(),
    corruptions=(
        Corruption("position past the block table", _one_entry(
            "positions", _slot_positions_past_table, native_raises=True, where=_slot_token_with_row)),
        Corruption("negative position", _one_entry("positions", _negative, native_raises=True,
                                                   where=_slot_token_with_row)),
        Corruption("idx_mapping past the block table", _slot_idx_past_table),
        Corruption("negative idx_mapping", _slot_negative_idx),
        Corruption("negative block ids", _negative_block_ids),
        Corruption("query_start_loc[R] past T", _query_start_loc_past(lambda call: call["positions"].numel()),
                   device="bounds"),
        Corruption("T past query_start_loc[R]", _slot_more_positions_than_tokens, device="bounds"),
    ),
)


# ------------------------------------------------------------------- gather_block_tables (3.3)

def _gather_valid() -> Call:
    # Row 1's first scheduled position is 9: with reach 3 and block_size 2, its entries below
    # (9 - 3) // 2 = 3 are NULL.
    return dict(src_block_table=torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]], dtype=I32),
                num_blocks=t32(2, 4, 0), idx_mapping=t64(1, -1, 0), out=stale(5, 4), num_reqs_padded=4,
                num_computed_tokens=t32(0, 9, 4), sliding_window_reach=3, block_size=2)


def _gather_metadata() -> list[Bad]:
    return [
        bad("num_blocks shorter than the table", ("num_blocks", "src_block_table"), num_blocks=t32(2, 4)),
        bad("out with fewer rows than R", ("num_reqs_padded", "out"), out=stale(2, 4), num_reqs_padded=None),
        bad("num_reqs_padded < R", "num_reqs_padded", num_reqs_padded=2),
        bad("num_reqs_padded > out rows", ("num_reqs_padded", "out"), num_reqs_padded=6),
        bad("num_computed_tokens shorter than the table", ("num_computed_tokens", "src_block_table"),
            num_computed_tokens=t32(0, 9)),
        bad("sliding_window_reach -1", "sliding_window_reach", sliding_window_reach=-1),
        bad("sliding_window_reach past int32", "sliding_window_reach", sliding_window_reach=2**31),
        bad("a reach without block_size", ("block_size", "sliding_window_reach"), block_size=None),
        bad("block_size 0", "block_size", block_size=0),
        bad("block_size past int32", "block_size", block_size=2**31),
    ]


def _gather_values() -> list[Bad]:
    return [
        bad("idx_mapping past the table", "idx_mapping", idx_mapping=t64(3, -1, 0)),
        bad("num_blocks past the columns", "num_blocks", num_blocks=t32(2, 5, 0)),
        bad("negative num_blocks", "num_blocks", num_blocks=t32(-1, 4, 0)),
        bad("out narrower than a row's blocks", ("num_blocks", "out"), out=stale(5, 3)),
        bad("negative num_computed_tokens", "num_computed_tokens", num_computed_tokens=t32(0, -9, 4)),
    ]


@st.composite
def _gather_draw(draw) -> Call:
    src_rows, cols = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    out_cols = draw(st.integers(1, 8))
    num_reqs = draw(st.integers(0, 6))
    generator = _seed(draw)
    table, _ = make_block_source(generator, src_rows, cols)
    num_blocks = torch.randint(0, min(cols, out_cols) + 1, (src_rows,), dtype=I32, generator=generator)
    idx_mapping = torch.randint(-1, src_rows, (num_reqs,), generator=generator).to(draw(st.sampled_from([I32, I64])))
    padded = num_reqs + draw(st.integers(0, 3))
    call = dict(src_block_table=table, num_blocks=num_blocks, idx_mapping=idx_mapping,
                out=stale(padded + draw(st.integers(0, 2)), out_cols), num_reqs_padded=padded)
    if draw(st.booleans()):  # a sliding-window group
        block_size = draw(st.sampled_from([1, 4]))
        call.update(num_computed_tokens=torch.randint(0, 8 * block_size, (src_rows,), dtype=I32, generator=generator),
                    sliding_window_reach=draw(st.sampled_from([0, 1, 5])), block_size=block_size)
    return call


def _gather_count_out_of_range(draw, call: Call) -> bool:
    num_reqs = call["idx_mapping"].numel()
    if num_reqs == 0:
        return False
    request = _pick(draw, num_reqs)
    row = _pick(draw, call["src_block_table"].size(0))
    call["idx_mapping"][request] = row
    most = min(call["src_block_table"].size(1), call["out"].size(1))
    call["num_blocks"][row] = draw(st.sampled_from([most + 1, most + 100, INT32_MAX, -1, -INT32_MAX]))
    return True


def _gather_negative_first_position(draw, call: Call) -> bool:
    """A mapped row whose first position is negative: the host op rejects it where it masks."""
    num_reqs = call["idx_mapping"].numel()
    if num_reqs == 0 or call.get("num_computed_tokens") is None:
        return False
    request = _pick(draw, num_reqs)
    row = _pick(draw, call["src_block_table"].size(0))
    call["idx_mapping"][request] = row
    call["num_computed_tokens"][row] = draw(st.sampled_from([-1, -7, -INT32_MAX - 1]))
    return call["sliding_window_reach"] > 0


GATHER = OpSpec(
    name="gather_block_tables",
    wrapper=specops.gather_block_tables,
    tensors=dict(src_block_table=Arg((I32,), 2, row_stride=True), num_blocks=Arg((I32,), 1),
                 idx_mapping=Arg((I32, I64), 1), out=Arg((I32,), 2, row_stride=True),
                 num_computed_tokens=Arg((I32,), 1)),
    outputs=("out",),
    valid_call=_gather_valid,
    metadata_errors=_gather_metadata,
    value_errors=_gather_values,
    draw_call=_gather_draw(),
    corruptions=(
        Corruption("idx_mapping past the table", _one_entry(
            "idx_mapping", lambda call: st.integers(0, 5).map(lambda k: call["src_block_table"].size(0) + k),
            native_raises=True)),
        Corruption("negative idx_mapping", _one_entry("idx_mapping", _negative, native_raises=False)),
        Corruption("num_blocks outside [0, columns]", _gather_count_out_of_range),
        Corruption("negative num_computed_tokens", _gather_negative_first_position),
    ),
)


# ------------------------------------------------------------------- apply_staged_writes (3.3)

def _apply_valid() -> Call:
    return dict(table=torch.full((3, 4), 9, dtype=I32), rows=t64(2, 0), starts=t32(1, 0), cu_lens=t32(0, 3, 4),
                values=t32(5, 6, 7, 8))


def _apply_metadata() -> list[Bad]:
    return [
        bad("starts shorter than rows", ("starts", "rows"), starts=t32(1)),
        bad("cu_lens without K + 1 entries", ("cu_lens", "rows"), cu_lens=t32(0, 3)),
    ]


def _apply_values() -> list[Bad]:
    return [
        bad("row past the table", "rows", rows=t64(3, 0)),
        bad("negative row", "rows", rows=t64(-1, 0)),
        bad("write past the last column", "starts", starts=t32(2, 0)),
        bad("negative start", "starts", starts=t32(-1, 0)),
        bad("cu_lens[0] != 0", "cu_lens", cu_lens=t32(1, 3, 4)),
        bad("cu_lens decreasing", "cu_lens", cu_lens=t32(0, 3, 2)),
        bad("cu_lens[K] past values", ("cu_lens", "values"), cu_lens=t32(0, 3, 5)),
        bad("table narrower than a write", ("starts", "table"), table=torch.full((3, 3), 9, dtype=I32)),
    ]


@st.composite
def _apply_draw(draw) -> Call:
    table_rows, table_cols = draw(st.integers(1, 6)), draw(st.integers(1, 8))
    generator = _seed(draw)
    rows, starts, cu_lens, values = make_staged_writes(generator, table_rows, table_cols)
    unused = torch.randint(1, 1 << 20, (draw(st.integers(0, 3)),), dtype=I32, generator=generator)
    table = torch.randint(1, 1 << 20, (table_rows, table_cols), dtype=I32, generator=generator)
    return dict(table=table, rows=rows.to(draw(st.sampled_from([I32, I64]))), starts=starts, cu_lens=cu_lens,
                values=torch.cat([values, unused]))


def _apply_start_out_of_range(draw, call: Call) -> bool:
    num_writes = call["rows"].numel()
    if num_writes == 0:
        return False
    k = _pick(draw, num_writes)
    length = int(call["cu_lens"][k + 1] - call["cu_lens"][k])
    call["starts"][k] = draw(st.sampled_from([-1, -(2**31), call["table"].size(1) - length + 1, INT32_MAX]))
    return True


def _apply_cu_lens_past_values(draw, call: Call) -> bool:
    call["cu_lens"][-1] = call["values"].numel() + draw(st.integers(1, 4))
    return True


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


APPLY = OpSpec(
    name="apply_staged_writes",
    wrapper=specops.apply_staged_writes,
    tensors=dict(table=Arg((I32,), 2, row_stride=True), rows=Arg((I32, I64), 1), starts=Arg((I32,), 1),
                 cu_lens=Arg((I32,), 1), values=Arg((I32,), 1)),
    outputs=("table",),
    valid_call=_apply_valid,
    metadata_errors=_apply_metadata,
    value_errors=_apply_values,
    offsets=("cu_lens",),
    draw_call=_apply_draw(),
    corruptions=(
        Corruption("row outside the table", _one_entry(
            "rows", lambda call: st.sampled_from([-1, -(2**31), call["table"].size(0), call["table"].size(0) + 7]),
            native_raises=True)),
        Corruption("start outside the row", _apply_start_out_of_range),
        Corruption("cu_lens[K] past values", _apply_cu_lens_past_values),
        # Write boundaries that go backwards: which values land where is unspecified.
        Corruption("cu_lens decreasing", _decreasing("cu_lens"), device="bounds"),
    ),
)


# ------------------------------------------------------------ format_slot_mapping_blocks (3.4)

def _format_valid() -> Call:
    return dict(slot_mapping=t64(0, 17, -1, 40), block_size=16, out=stale(6, 2, dtype=I64))


def _format_metadata() -> list[Bad]:
    return [
        bad("out with fewer rows than slots", "out", out=stale(3, 2, dtype=I64)),
        bad("out with 3 columns", "out", out=stale(6, 3, dtype=I64)),
        bad("block_size 0", "block_size", block_size=0),
    ]


@st.composite
def _format_draw(draw) -> Call:
    generator = _seed(draw)
    num_slots = draw(st.integers(0, 20))
    slots = torch.randint(0, 1 << 20, (num_slots,), generator=generator)
    slots[torch.rand(num_slots, generator=generator) < 0.2] = specops.PAD_SLOT_ID
    slot_dtype = draw(st.sampled_from([I64, I32]))
    return dict(slot_mapping=slots.to(slot_dtype), block_size=draw(st.sampled_from([1, 3, 4, 16, 100])),
                out=stale(num_slots + draw(st.integers(0, 3)), 2, dtype=draw(st.sampled_from([I64, I32]))))


def _format_extreme_slots(draw, call: Call) -> bool:
    slots = call["slot_mapping"]
    if slots.numel():
        info = torch.iinfo(slots.dtype)
        slots[_pick(draw, slots.numel())] = draw(st.sampled_from([info.min, info.max, -2, -info.max // 3]))
    return False


FORMAT = OpSpec(
    name="format_slot_mapping_blocks",
    wrapper=specops.format_slot_mapping_blocks,
    tensors=dict(slot_mapping=Arg((I64, I32), 1), out=Arg((I64, I32), 2, row_stride=True)),
    outputs=("out",),
    valid_call=_format_valid,
    metadata_errors=_format_metadata,
    value_errors=lambda: [],  # every int is a slot: negative ones floor-divide like PAD
    draw_call=_format_draw(),
    corruptions=(Corruption("slots at the dtype's extremes", _format_extreme_slots),),
)


# ------------------------------------------------------------ format_slot_mapping_blocks_multi

def _format_multi_valid() -> Call:
    return dict(slot_mappings=[t64(0, 17, -1, 40, 99), t32(5, 19, -1, -11)], block_sizes=[16, 10], num_slots=4,
                out=[stale(5, 2, dtype=I64), stale(4, 2)])


def _format_multi_metadata() -> list[Bad]:
    shared = stale(8, 2, dtype=I64)
    return [
        bad("one block size for two slot mappings", ("block_sizes", "slot_mappings"), block_sizes=[16]),
        bad("three outputs for two slot mappings", ("out", "slot_mappings"),
            out=[stale(5, 2, dtype=I64), stale(4, 2), stale(4, 2)]),
        bad("block_sizes[1] 0", "block_sizes[1]", block_sizes=[16, 0]),
        bad("num_slots -1", "num_slots", num_slots=-1),
        bad("num_slots past slot_mappings[1]", ("slot_mappings[1]", "num_slots"), num_slots=5),
        bad("out[1] with fewer rows than num_slots", ("out[1]", "num_slots"), out=[stale(5, 2, dtype=I64), stale(3, 2)]),
        bad("out[0] with 3 columns", "out[0]", out=[stale(5, 3, dtype=I64), stale(4, 2)]),
        bad("outputs sharing memory", ("out[1]", "out[0]"), out=[shared[:5], shared[3:7]]),
    ]


@st.composite
def _format_multi_draw(draw) -> Call:
    generator = _seed(draw)
    num_groups = draw(st.integers(1, 3))
    num_slots = draw(st.integers(0, 20))
    slot_mappings, out = [], []
    for _ in range(num_groups):
        slots = torch.randint(0, 1 << 20, (num_slots + draw(st.integers(0, 2)),), generator=generator)
        slots[torch.rand(slots.numel(), generator=generator) < 0.2] = specops.PAD_SLOT_ID
        slot_mappings.append(slots.to(draw(st.sampled_from([I64, I32]))))
        out.append(stale(num_slots + draw(st.integers(0, 3)), 2, dtype=draw(st.sampled_from([I64, I32]))))
    return dict(slot_mappings=slot_mappings, block_sizes=[draw(st.sampled_from([1, 3, 4, 16, 100])) for _ in out],
                num_slots=num_slots, out=out)


def _format_multi_extreme_slots(draw, call: Call) -> bool:
    for slots in call["slot_mappings"]:
        _format_extreme_slots(draw, dict(slot_mapping=slots))
    return False


FORMAT_MULTI = OpSpec(
    name="format_slot_mapping_blocks_multi",
    wrapper=specops.format_slot_mapping_blocks_multi,
    tensors={"slot_mappings[0]": Arg((I64, I32), 1), "slot_mappings[1]": Arg((I64, I32), 1),
             "out[0]": Arg((I64, I32), 2, row_stride=True), "out[1]": Arg((I64, I32), 2, row_stride=True)},
    outputs=("out[0]", "out[1]"),
    valid_call=_format_multi_valid,
    metadata_errors=_format_multi_metadata,
    value_errors=lambda: [],  # every int is a slot: negative ones floor-divide like PAD
    draw_call=_format_multi_draw(),
    corruptions=(Corruption("slots at the dtype's extremes", _format_multi_extreme_slots),),
    scalars=("num_slots", "block_sizes"),
)


# -------------------------------------------------------------------- dspark_swa_indices (3.4)

def _dspark_valid() -> Call:
    # Request 0: 2 tokens, seq_len 6, window 2 -> positions 2..5 (visible 4); request 1: 1 token,
    # seq_len 8 -> positions 5..7. block_size 4, two blocks per row: positions < 8.
    return dict(block_table=torch.tensor([[1, 2], [3, 4], [5, 6]], dtype=I32), query_start_loc=t32(0, 2, 3),
                seq_lens=t32(6, 8), window=2, num_speculative_tokens=1, block_size=4, num_tokens=4, width=4,
                cp_size=1, cp_rank=0, out=stale(5, 1, 4), out_lens=stale(5))


def _dspark_metadata() -> list[Bad]:
    return [
        bad("R+1 = 0 entries", "query_start_loc", query_start_loc=torch.zeros(0, dtype=I32)),
        bad("block_table with fewer rows than R", "block_table", block_table=torch.tensor([[1, 2]], dtype=I32)),
        bad("seq_lens longer than R", ("seq_lens", "query_start_loc"), seq_lens=t32(6, 8, 1)),
        bad("out with fewer rows than tokens", "out", out=stale(3, 1, 4)),
        bad("out narrower than width", ("out", "width"), out=stale(5, 1, 3)),
        bad("out with 2 in its middle dimension", "out", out=stale(5, 2, 4)),
        bad("out_lens with fewer entries than tokens", "out_lens", out_lens=stale(3)),
        bad("window -1", "window", window=-1),
        bad("num_speculative_tokens -1", "num_speculative_tokens", num_speculative_tokens=-1),
        bad("block_size 0", "block_size", block_size=0),
        bad("width below window + num_speculative_tokens", "width", width=2, out=stale(5, 1, 2)),
        bad("num_tokens -1", "num_tokens", num_tokens=-1),
        bad("num_tokens past int32", "num_tokens", num_tokens=INT32_MAX),
        bad("cp_size 0", "cp_size", cp_size=0),
        bad("cp_rank = cp_size", ("cp_rank", "cp_size"), cp_rank=1),
    ]


def _dspark_values() -> list[Bad]:
    return [
        bad("negative seq_len", "seq_lens", seq_lens=t32(-1, 8)),
        bad("seq_len past the block table", "seq_lens", seq_lens=t32(6, 9)),
        bad("query_start_loc decreasing", "query_start_loc", query_start_loc=t32(0, 4, 3)),
        bad("query_start_loc[0] != 0", "query_start_loc", query_start_loc=t32(1, 2, 3)),
        bad("num_tokens below query_start_loc[R]", ("num_tokens", "query_start_loc"), num_tokens=2),
        bad("width below what a request sees", "width", width=3, out=stale(5, 1, 3)),
        # Request 0 sees positions 2..5: block 2^29 of 4 tokens puts them past 2^31 - 1.
        bad("a slot past int32", ("out", "block_table"), block_table=torch.tensor([[2**29, 2], [3, 4], [5, 6]], dtype=I32)),
    ]


def _dspark_visible(call: Call) -> list[int]:
    """Entries each request with tokens sees (what the width must hold)."""
    qsl, seq_lens = call["query_start_loc"].tolist(), call["seq_lens"].tolist()
    visible = []
    for r, seq_len in enumerate(seq_lens):
        query_len = qsl[r + 1] - qsl[r]
        if query_len > 0:
            visible.append(seq_len - max(seq_len - query_len - call["window"], 0))
    return visible


def _dspark_rows(call: Call) -> int:
    return -(-call["num_tokens"] // call["cp_size"])


@st.composite
def _dspark_draw(draw) -> Call:
    batch = draw(cp_batches(max_reqs=5, max_query_len=6, max_context=40, block_size=4))
    call = dict(block_table=batch.block_table, query_start_loc=batch.query_start_loc, seq_lens=batch.seq_lens,
                window=draw(st.integers(0, 10)), num_speculative_tokens=draw(st.integers(0, 4)), block_size=4,
                num_tokens=batch.num_input_tokens, cp_size=batch.cp_size, cp_rank=_pick(draw, batch.cp_size))
    least = max([1, call["window"] + call["num_speculative_tokens"], *_dspark_visible(call)])
    call["width"] = least + draw(st.integers(0, 3))
    rows = _dspark_rows(call) + draw(st.integers(0, 2))
    call.update(out=stale(rows, 1, call["width"]), out_lens=stale(rows))
    return call


def _dspark_request_with_tokens(draw, call: Call) -> int | None:
    qsl = call["query_start_loc"]
    with_tokens = (qsl[1:] > qsl[:-1]).nonzero().flatten().tolist()
    return draw(st.sampled_from(with_tokens)) if with_tokens else None


def _dspark_seq_len_past_table(draw, call: Call) -> bool:
    request = _dspark_request_with_tokens(draw, call)
    if request is None:
        return False
    covered = call["block_table"].size(1) * call["block_size"]
    call["seq_lens"][request] = covered + draw(st.integers(1, 20))
    # The width follows, or the request would also see more than the width holds.
    call["width"] = max([call["width"], *_dspark_visible(call)])
    call.update(out=stale(call["out"].size(0), 1, call["width"]))
    return True


def _dspark_width_below_visible(draw, call: Call) -> bool:
    call["width"] = max(1, call["window"] + call["num_speculative_tokens"])
    call.update(out=stale(call["out"].size(0), 1, call["width"]))
    return any(v > call["width"] for v in _dspark_visible(call))


DSPARK = OpSpec(
    name="dspark_swa_indices",
    wrapper=specops.dspark_swa_indices,
    tensors=dict(block_table=Arg((I32,), 2, row_stride=True), query_start_loc=Arg((I32,), 1),
                 seq_lens=Arg((I32,), 1), out=Arg((I32,), 3, row_stride=True), out_lens=Arg((I32,), 1)),
    outputs=("out", "out_lens"),
    valid_call=_dspark_valid,
    metadata_errors=_dspark_metadata,
    value_errors=_dspark_values,
    offsets=("query_start_loc",),
    draw_call=_dspark_draw(),
    corruptions=(
        Corruption("negative seq_len", _one_entry("seq_lens", _negative, native_raises=True,
                                                  where=_dspark_request_with_tokens)),
        Corruption("seq_len past the block table", _dspark_seq_len_past_table),
        Corruption("negative block ids", _negative_block_ids),
        Corruption("num_tokens below query_start_loc[R]", _tokens_below_real("num_tokens")),
        Corruption("width below what a request sees", _dspark_width_below_visible),
        Corruption("query_start_loc[R] past num_tokens", _query_start_loc_past(lambda call: call["num_tokens"]),
                   device="bounds"),
    ),
)


# -------------------------------------------------------------------- dspark_swa_indices_multi

def _dspark_multi_valid() -> Call:
    # _dspark_valid's batch for two groups: group 1 has block size 2 and window 1 (request 0 sees
    # positions 3..5, request 1 positions 6, 7).
    single = _dspark_valid()
    return dict(block_tables=[single["block_table"], torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8], [9, 9, 9, 9]], dtype=I32)],
                query_start_loc=single["query_start_loc"], seq_lens=single["seq_lens"], windows=[2, 1],
                num_speculative_tokens=1, block_sizes=[4, 2], num_tokens=4, widths=[4, 3], cp_size=1, cp_rank=0,
                out=[stale(5, 1, 4), stale(4, 1, 3)], out_lens=[stale(5), stale(4)])


def _dspark_multi_metadata() -> list[Bad]:
    shared = stale(12)
    return [
        bad("one window for two tables", ("windows", "block_tables"), windows=[2]),
        bad("three widths for two tables", ("widths", "block_tables"), widths=[4, 3, 3]),
        bad("one block size for two tables", ("block_sizes", "block_tables"), block_sizes=[4]),
        bad("one output for two tables", ("out", "block_tables"), out=[stale(5, 1, 4)]),
        bad("one out_lens for two tables", ("out_lens", "block_tables"), out_lens=[stale(5)]),
        bad("R+1 = 0 entries", "query_start_loc", query_start_loc=torch.zeros(0, dtype=I32)),
        bad("seq_lens longer than R", ("seq_lens", "query_start_loc"), seq_lens=t32(6, 8, 1)),
        bad("block_tables[1] with fewer rows than R", "block_tables[1]",
            block_tables=[torch.tensor([[1, 2], [3, 4]], dtype=I32), torch.tensor([[1, 2, 3, 4]], dtype=I32)]),
        bad("windows[1] -1", "windows[1]", windows=[2, -1]),
        bad("block_sizes[0] 0", "block_sizes[0]", block_sizes=[0, 2]),
        bad("widths[1] below windows[1] + num_speculative_tokens", "widths[1]", widths=[4, 1],
            out=[stale(5, 1, 4), stale(4, 1, 1)]),
        bad("num_speculative_tokens -1", "num_speculative_tokens", num_speculative_tokens=-1),
        bad("num_tokens -1", "num_tokens", num_tokens=-1),
        bad("num_tokens past int32", "num_tokens", num_tokens=INT32_MAX),
        bad("cp_size 0", "cp_size", cp_size=0),
        bad("cp_rank = cp_size", ("cp_rank", "cp_size"), cp_rank=1),
        bad("out[1] narrower than widths[1]", ("out[1]", "widths[1]"), out=[stale(5, 1, 4), stale(4, 1, 2)]),
        bad("out[0] with fewer rows than tokens", "out[0]", out=[stale(3, 1, 4), stale(4, 1, 3)]),
        bad("out_lens[1] with fewer entries than tokens", "out_lens[1]", out_lens=[stale(5), stale(3)]),
        bad("out_lens sharing memory", ("out_lens[1]", "out_lens[0]"), out_lens=[shared[:5], shared[4:8]]),
    ]


def _dspark_multi_values() -> list[Bad]:
    return [
        bad("negative seq_len", "seq_lens", seq_lens=t32(-1, 8)),
        bad("seq_len past block_tables[1]", "block_tables[1]",
            block_tables=[torch.tensor([[1, 2], [3, 4], [5, 6]], dtype=I32), torch.tensor([[1, 2], [3, 4]], dtype=I32)]),
        bad("query_start_loc decreasing", "query_start_loc", query_start_loc=t32(0, 4, 3)),
        bad("num_tokens below query_start_loc[R]", ("num_tokens", "query_start_loc"), num_tokens=2),
        bad("widths[1] below what a request sees", "widths[1]", windows=[2, 3], widths=[4, 4],
            out=[stale(5, 1, 4), stale(4, 1, 4)]),
    ]


def _dspark_multi_as_groups(call: Call) -> list[Call]:
    """The single-op view of each group (what _dspark_visible and the corruptions read)."""
    return [dict(call, block_table=table, window=window, block_size=block_size, width=width)
            for table, window, block_size, width in zip(call["block_tables"], call["windows"], call["block_sizes"],
                                                        call["widths"])]


@st.composite
def _dspark_multi_draw(draw) -> Call:
    batch = draw(cp_batches(max_reqs=5, max_query_len=6, max_context=40, block_size=4))
    num_groups = draw(st.integers(1, 3))
    call = dict(query_start_loc=batch.query_start_loc, seq_lens=batch.seq_lens,
                num_speculative_tokens=draw(st.integers(0, 4)), num_tokens=batch.num_input_tokens,
                cp_size=batch.cp_size, cp_rank=_pick(draw, batch.cp_size), block_tables=[], windows=[],
                block_sizes=[], widths=[])
    generator = _seed(draw)
    for _ in range(num_groups):
        block_size = draw(st.sampled_from([2, 4]))
        cols = batch.block_table.size(1) * 4 // block_size
        call["block_tables"].append(
            torch.randint(0, 1 << 12, (batch.block_table.size(0), cols), dtype=I32, generator=generator))
        call["block_sizes"].append(block_size)
        call["windows"].append(draw(st.integers(0, 10)))
    for group in _dspark_multi_as_groups(dict(call, widths=[0] * num_groups)):
        least = max([1, group["window"] + call["num_speculative_tokens"], *_dspark_visible(group)])
        call["widths"].append(least + draw(st.integers(0, 3)))
    rows = _dspark_rows(call)
    call["out"] = [stale(rows + draw(st.integers(0, 2)), 1, width) for width in call["widths"]]
    call["out_lens"] = [stale(rows + draw(st.integers(0, 2))) for _ in call["widths"]]
    return call


def _dspark_multi_seq_len_past_a_table(draw, call: Call) -> bool:
    request = _dspark_request_with_tokens(draw, call)
    if request is None:
        return False
    covered = min(t.size(1) * b for t, b in zip(call["block_tables"], call["block_sizes"]))
    call["seq_lens"][request] = covered + draw(st.integers(1, 20))
    _dspark_multi_fit_widths(call)
    return True


def _dspark_multi_fit_widths(call: Call) -> None:
    """Widths (and outputs) that hold what every request sees, so that only one thing is wrong."""
    for g, group in enumerate(_dspark_multi_as_groups(call)):
        width = max([group["width"], *_dspark_visible(group)])
        if width != call["widths"][g]:
            call["widths"] = [width if i == g else w for i, w in enumerate(call["widths"])]
            call["out"] = [stale(call["out"][g].size(0), 1, width) if i == g else t for i, t in enumerate(call["out"])]


def _dspark_multi_negative_block_ids(draw, call: Call) -> bool:
    for g in range(len(call["block_tables"])):
        _negative_block_ids(draw, call["block_tables"], g)
    return False


def _dspark_multi_width_below_visible(draw, call: Call) -> bool:
    g = _pick(draw, len(call["widths"]))
    width = max(1, call["windows"][g] + call["num_speculative_tokens"])
    call["widths"] = [width if i == g else w for i, w in enumerate(call["widths"])]
    call["out"] = [stale(call["out"][g].size(0), 1, width) if i == g else t for i, t in enumerate(call["out"])]
    return any(v > width for v in _dspark_visible(_dspark_multi_as_groups(call)[g]))


DSPARK_MULTI = OpSpec(
    name="dspark_swa_indices_multi",
    wrapper=specops.dspark_swa_indices_multi,
    tensors={"block_tables[0]": Arg((I32,), 2, row_stride=True), "block_tables[1]": Arg((I32,), 2, row_stride=True),
             "query_start_loc": Arg((I32,), 1), "seq_lens": Arg((I32,), 1),
             "out[0]": Arg((I32,), 3, row_stride=True), "out[1]": Arg((I32,), 3, row_stride=True),
             "out_lens[0]": Arg((I32,), 1), "out_lens[1]": Arg((I32,), 1)},
    outputs=("out[0]", "out[1]", "out_lens[0]", "out_lens[1]"),
    valid_call=_dspark_multi_valid,
    metadata_errors=_dspark_multi_metadata,
    value_errors=_dspark_multi_values,
    offsets=("query_start_loc",),
    draw_call=_dspark_multi_draw(),
    corruptions=(
        Corruption("negative seq_len", _one_entry("seq_lens", _negative, native_raises=True,
                                                  where=_dspark_request_with_tokens)),
        Corruption("seq_len past a block table", _dspark_multi_seq_len_past_a_table),
        Corruption("negative block ids", _dspark_multi_negative_block_ids),
        Corruption("num_tokens below query_start_loc[R]", _tokens_below_real("num_tokens")),
        Corruption("a width below what a request sees", _dspark_multi_width_below_visible),
        Corruption("query_start_loc[R] past num_tokens", _query_start_loc_past(lambda call: call["num_tokens"]),
                   device="bounds"),
    ),
    guard_examples=25,
    scalars=("windows", "num_speculative_tokens", "block_sizes", "num_tokens", "widths", "cp_size", "cp_rank"),
)


# --------------------------------------------------------------------- cp_local_metadata (3.4)

def _cp_valid() -> Call:
    return dict(query_start_loc=t32(0, 2, 3, 7), seq_lens=t32(5, 3, 10), num_input_tokens=8, cp_size=2, cp_rank=1,
                causal=True, local_query_start_loc=stale(5), local_seq_lens=stale(4), start_pos=stale(4),
                query_start_loc_cpu=t32(0, 2, 3, 7), seq_lens_cpu=t32(5, 3, 10))


def _cp_metadata() -> list[Bad]:
    return [
        bad("R+1 = 0 entries", "query_start_loc", query_start_loc=torch.zeros(0, dtype=I32)),
        bad("seq_lens shorter than R", ("seq_lens", "query_start_loc"), seq_lens=t32(5, 3)),
        bad("local_query_start_loc shorter than R + 1", "local_query_start_loc", local_query_start_loc=stale(3)),
        bad("local_seq_lens shorter than R", "local_seq_lens", local_seq_lens=stale(2)),
        bad("start_pos shorter than R", "start_pos", start_pos=stale(2)),
        bad("query_start_loc_cpu of another length", "query_start_loc_cpu", query_start_loc_cpu=t32(0, 2, 3)),
        bad("seq_lens_cpu of another length", "seq_lens_cpu", seq_lens_cpu=t32(5, 3)),
        bad("num_input_tokens -1", "num_input_tokens", num_input_tokens=-1),
        bad("num_input_tokens past int32", "num_input_tokens", num_input_tokens=INT32_MAX),
        bad("cp_size 0", "cp_size", cp_size=0),
        bad("cp_rank = cp_size", ("cp_rank", "cp_size"), cp_rank=2),
        bad("cp_rank -1", "cp_rank", cp_rank=-1),
    ]


def _cp_values() -> list[Bad]:
    return [
        bad("query_start_loc decreasing", "query_start_loc", query_start_loc=t32(0, 3, 2, 7)),
        bad("query_start_loc[0] != 0", "query_start_loc", query_start_loc=t32(1, 2, 3, 7)),
        bad("negative seq_len", "seq_lens", seq_lens=t32(5, -1, 10)),
        bad("num_input_tokens below query_start_loc[R]", ("num_input_tokens", "query_start_loc"), num_input_tokens=6),
    ]


@st.composite
def _cp_draw(draw) -> Call:
    batch = draw(cp_batches(max_reqs=6, max_query_len=8, max_context=40))
    num_reqs = batch.num_reqs
    return dict(query_start_loc=batch.query_start_loc, seq_lens=batch.seq_lens,
                num_input_tokens=batch.num_input_tokens, cp_size=batch.cp_size, cp_rank=_pick(draw, batch.cp_size),
                causal=draw(st.booleans()),
                local_query_start_loc=stale(num_reqs + 1 + draw(st.integers(0, 2))),
                local_seq_lens=stale(num_reqs + draw(st.integers(0, 2))),
                start_pos=stale(num_reqs + draw(st.integers(0, 2))))


def _cp_query_start_loc_out_of_order(draw, call: Call) -> bool:
    qsl = call["query_start_loc"]
    k = _pick(draw, qsl.numel())
    qsl[k] = qsl[k] + draw(st.sampled_from([-3, -1, 1, 5]))
    # Not decreasing anywhere, still starting at 0 and within num_input_tokens: the values are
    # valid after all.
    return bool(qsl[0] != 0 or (qsl[1:] < qsl[:-1]).any() or qsl[-1] > call["num_input_tokens"])


CP_LOCAL = OpSpec(
    name="cp_local_metadata",
    wrapper=specops.cp_local_metadata,
    tensors=dict(query_start_loc=Arg((I32,), 1), seq_lens=Arg((I32,), 1), local_query_start_loc=Arg((I32,), 1),
                 local_seq_lens=Arg((I32,), 1), start_pos=Arg((I32,), 1), query_start_loc_cpu=Arg((I32,), 1),
                 seq_lens_cpu=Arg((I32, I64), 1)),
    outputs=("local_query_start_loc", "local_seq_lens", "start_pos"),
    valid_call=_cp_valid,
    metadata_errors=_cp_metadata,
    value_errors=_cp_values,
    draw_call=_cp_draw(),
    host_tensors=("query_start_loc_cpu", "seq_lens_cpu"),
    reads_first=("query_start_loc_cpu", "seq_lens_cpu"),  # the host maxima are computed before the op
    corruptions=(
        Corruption("negative seq_len", _one_entry("seq_lens", _negative, native_raises=True)),
        Corruption("query_start_loc out of order", _cp_query_start_loc_out_of_order),
        Corruption("num_input_tokens below query_start_loc[R]", _tokens_below_real("num_input_tokens")),
    ),
)



# ------------------------------------------------------------------------ dcp_local_seq_lens

def _dcp_valid() -> Call:
    return dict(seq_lens=t32(1, 4, 5, 9), cp_world_size=2, cp_rank=1, cp_interleave=4, out=stale(6))


def _dcp_metadata() -> list[Bad]:
    return [
        bad("out shorter than R", "out", out=stale(3)),
        bad("out of another dtype than seq_lens", ("out", "seq_lens"), out=stale(6, dtype=I64)),
        bad_with("out sharing seq_lens", ("out", "seq_lens"), lambda call: call.update(out=call["seq_lens"])),
        bad("cp_world_size 0", "cp_world_size", cp_world_size=0),
        bad("cp_rank = cp_world_size", ("cp_rank", "cp_world_size"), cp_rank=2),
        bad("cp_rank -1", "cp_rank", cp_rank=-1),
        bad("cp_interleave 0", "cp_interleave", cp_interleave=0),
        bad("a round past int32", ("cp_world_size", "cp_interleave"), cp_interleave=2**30),
    ]


@st.composite
def _dcp_draw(draw) -> Call:
    dtype = draw(st.sampled_from([I32, I64]))
    seq_lens = torch.tensor(draw(st.lists(st.integers(0, 300), max_size=8)), dtype=dtype)
    world = draw(st.integers(1, 4))
    return dict(seq_lens=seq_lens, cp_world_size=world, cp_rank=_pick(draw, world),
                cp_interleave=draw(st.sampled_from([1, 2, 16])),
                out=stale(seq_lens.numel() + draw(st.integers(0, 2)), dtype=dtype))


def _dcp_huge_lengths(draw, call: Call) -> bool:
    """Lengths at the top of the dtype: valid, every path computes them alike."""
    seq_lens = call["seq_lens"]
    if seq_lens.numel():
        info = torch.iinfo(seq_lens.dtype)
        seq_lens[_pick(draw, seq_lens.numel())] = draw(st.sampled_from([info.max, info.max - 1, info.max // 3]))
    return False


DCP_LOCAL = OpSpec(
    name="dcp_local_seq_lens",
    wrapper=specops.dcp_local_seq_lens,
    tensors=dict(seq_lens=Arg((I32, I64), 1), out=Arg((I32, I64), 1)),
    outputs=("out",),
    valid_call=_dcp_valid,
    metadata_errors=_dcp_metadata,
    value_errors=lambda: [bad("negative seq_len", "seq_lens", seq_lens=t32(1, -4, 5, 9))],
    draw_call=_dcp_draw(),
    corruptions=(
        Corruption("negative seq_len", _one_entry("seq_lens", _negative, native_raises=True)),
        Corruption("lengths at the top of the dtype", _dcp_huge_lengths),
    ),
)

# -------------------------------------------------------------------------- sas_metadata (3.5)

def _sas_valid() -> Call:
    # Every tensor given: seqused_q sets B and the query lengths, seqused_kv the KV lengths (the
    # cumulative ones are the kernel's fallbacks and go unread here).
    return dict(num_heads_q=64, num_heads_kv=1, head_dim=512, cu_seqlens_q=t32(0, 2, 3), cu_seqlens_ori_kv=t32(0, 10, 310),
                cu_seqlens_cmp_kv=t32(0, 2, 77), seqused_q=t32(2, 1), seqused_kv=t32(10, 300), batch_size=2,
                max_seqlen_q=2, max_seqlen_kv=300, ori_topk=0, cmp_topk=512, cmp_ratio=4, ori_mask_mode=4,
                cmp_mask_mode=3, ori_win_left=127, ori_win_right=0, layout_q="TND", layout_kv="PA_ND",
                has_ori_kv=True, has_cmp_kv=True, num_cube_cores=4, num_vector_cores=8, soc_version="Ascend910B1",
                out=stale(1024))


def _sas_metadata() -> list[Bad]:
    # The AI-CPU kernel's own refusals, the inputs it has no defined answer for, and the int32
    # range of the attributes it reads as int32.
    return [
        bad("out of 1023 words", "out", out=stale(1023)),
        bad("num_heads_q 0", "num_heads_q", num_heads_q=0),
        bad("num_heads_q past int32", "num_heads_q", num_heads_q=2**31),
        bad("num_heads_q 16 with layout_kv BSND", "num_heads_q", num_heads_q=16, layout_q="BSND", layout_kv="BSND"),
        bad("num_heads_kv 2", "num_heads_kv", num_heads_kv=2),
        bad("head_dim past int32", "head_dim", head_dim=2**31),
        bad("batch_size -1", "batch_size", batch_size=-1),
        bad("max_seqlen_q -1", "max_seqlen_q", max_seqlen_q=-1),
        bad("max_seqlen_kv -1", "max_seqlen_kv", max_seqlen_kv=-1),
        bad("ori_topk past int32", "ori_topk", ori_topk=-(2**31) - 1),
        bad("cmp_topk 256", "cmp_topk", cmp_topk=256),
        bad("cmp_ratio 8", "cmp_ratio", cmp_ratio=8),
        bad("ori_mask_mode 1", "ori_mask_mode", ori_mask_mode=1),
        bad("cmp_mask_mode past int32", "cmp_mask_mode", cmp_mask_mode=2**32),
        bad("ori_win_left -1", "ori_win_left", ori_win_left=-1),
        bad("ori_win_left past 2^62", "ori_win_left", ori_win_left=2**62 + 1),
        bad("ori_win_right -1", "ori_win_right", ori_win_right=-1),
        bad("num_cube_cores 0", "num_cube_cores", num_cube_cores=0),
        bad("num_cube_cores 37", "num_cube_cores", num_cube_cores=37),
        bad("num_vector_cores 0", "num_vector_cores", num_vector_cores=0),
        bad("num_vector_cores 73", "num_vector_cores", num_vector_cores=73),
        bad("layout_q BNSD", "layout_q", layout_q="BNSD"),
        bad("layout_kv PA_BSND", "layout_kv", layout_kv="PA_BSND"),
        bad("layout_kv BSND with layout_q TND", "layout_kv", layout_kv="BSND"),
        bad("TND without cu_seqlens_q", "cu_seqlens_q", cu_seqlens_q=None),
        bad("TND with an empty cu_seqlens_q", "cu_seqlens_q", cu_seqlens_q=torch.zeros(0, dtype=I32)),
        bad("PA_ND without seqused_kv", "seqused_kv", seqused_kv=None),
        bad("seqused_kv shorter than B", ("seqused_kv", "seqused_q"), seqused_kv=t32(10)),
        bad("cu_seqlens_ori_kv shorter than B + 1", ("cu_seqlens_ori_kv", "seqused_q"), seqused_kv=None,
            layout_kv="TND", cu_seqlens_ori_kv=t32(0, 10)),
    ]


def _sas_values() -> list[Bad]:
    return [
        bad("cu_seqlens_q decreasing", "cu_seqlens_q", seqused_q=None, cu_seqlens_q=t32(0, 3, 2)),
        bad("negative seqused_q", "seqused_q", seqused_q=t32(2, -1)),
        bad("negative seqused_kv", "seqused_kv", seqused_kv=t32(-1, 300)),
        bad("cu_seqlens_ori_kv decreasing", "cu_seqlens_ori_kv", seqused_kv=None, layout_kv="TND",
            cu_seqlens_ori_kv=t32(0, 10, 9)),
        bad("seqused_kv past int32", "seqused_kv", seqused_kv=t64(10, 2**31)),
        bad("more than 2^31 - 1 query rows", "seqused_q", seqused_q=t32(2, 2**25)),
    ]


def _sas_negative_query_length(draw, call: Call) -> bool:
    """A negative query length where the call reads it: seqused_q, else a decreasing cu_seqlens_q
    (TND); BSND without seqused_q reads no tensor."""
    if call.get("seqused_q") is not None and call["seqused_q"].numel():
        return _one_entry("seqused_q", _negative, native_raises=True)(draw, call)
    if call["layout_q"] == "TND":
        return _decreasing("cu_seqlens_q", first=1)(draw, call)
    return False


SAS = OpSpec(
    name="sas_metadata",
    wrapper=specops.sas_metadata,
    tensors=dict(cu_seqlens_q=Arg((I32, I64), 1), cu_seqlens_ori_kv=Arg((I32, I64), 1),
                 cu_seqlens_cmp_kv=Arg((I32, I64), 1), seqused_q=Arg((I32, I64), 1), seqused_kv=Arg((I32, I64), 1),
                 out=Arg((I32,), 1)),
    outputs=("out",),
    valid_call=_sas_valid,
    metadata_errors=_sas_metadata,
    value_errors=_sas_values,
    draw_call=sas_calls(max_reqs=5, max_prefill=20, max_context=800),
    corruptions=(
        Corruption("negative seqused_kv", _one_entry("seqused_kv", _negative, native_raises=True)),
        Corruption("negative query length", _sas_negative_query_length),
    ),
    guard_examples=10,  # about 0.3 s per interpreted call
    scalars=("num_heads_q", "num_heads_kv", "head_dim", "batch_size", "max_seqlen_q", "max_seqlen_kv", "ori_topk",
             "cmp_topk", "cmp_ratio", "ori_mask_mode", "cmp_mask_mode", "ori_win_left", "ori_win_right",
             "num_cube_cores", "num_vector_cores"),
)


# ------------------------------------------------------------ async token accounting (3.2)

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


CORRECTION_INPUTS = ("prev_positions", "valid_sampled_token_count", "prev_num_draft_tokens", "cpu_num_computed_tokens")
CORRECTION_TENSORS = dict(num_computed_tokens=Arg((I32,), 1), num_accepted_tokens=Arg((I32,), 1),
                          prev_positions=Arg((I32, I64), 1), valid_sampled_token_count=Arg((I32,), 1),
                          prev_num_draft_tokens=Arg((I32,), 1), cpu_num_computed_tokens=Arg((I32,), 1))


def _correction_valid() -> Call:
    return dict(num_computed_tokens=t32(10, 20, 30), num_accepted_tokens=t32(0, 0, 0), prev_positions=t32(1, 0),
                valid_sampled_token_count=t32(1, 2), prev_num_draft_tokens=t32(1, 1), cpu_num_computed_tokens=t32(5, 6))


def _correction_metadata() -> list[Bad]:
    return [
        bad("num_computed_tokens shorter than n", ("num_computed_tokens", "prev_positions"),
            num_computed_tokens=t32(10)),
        bad("num_accepted_tokens shorter than n", ("num_accepted_tokens", "prev_positions"),
            num_accepted_tokens=t32(0)),
        bad("cpu_num_computed_tokens shorter than n", ("cpu_num_computed_tokens", "prev_positions"),
            cpu_num_computed_tokens=t32(5)),
        bad_with("outputs sharing memory", ("num_accepted_tokens", "num_computed_tokens"),
                 lambda call: call.update(num_accepted_tokens=call["num_computed_tokens"][1:])),
    ]


@st.composite
def _correction_draw(draw) -> Call:
    inputs = make_correction_inputs(_seed(draw), num_rows=draw(st.integers(0, 8)),
                                    num_prev_rows=draw(st.integers(0, 8)), extra_buffer_rows=draw(st.integers(0, 2)),
                                    length_jitter=2, prev_dtype=draw(st.sampled_from([I32, I64])))
    return dict(zip(CORRECTION_TENSORS, inputs.args()))


CORRECT_COUNTS = OpSpec(
    name="correct_num_computed_tokens",
    wrapper=specops.correct_num_computed_tokens,
    tensors=CORRECTION_TENSORS,
    outputs=("num_computed_tokens", "num_accepted_tokens"),
    valid_call=_correction_valid,
    metadata_errors=_correction_metadata,
    value_errors=lambda: [],  # any row index is valid: out of range, a row takes the host value
    draw_call=_correction_draw(),
    reads_first=CORRECTION_INPUTS,
    corruptions=(
        Corruption("prev_positions at the dtype's extremes", _extreme("prev_positions")),
        Corruption("counts at int32 extremes", _extreme("num_computed_tokens", "valid_sampled_token_count",
                                                         "prev_num_draft_tokens", "cpu_num_computed_tokens")),
    ),
)


def _seq_lens_valid() -> Call:
    return dict(seq_lens_cpu=t32(5, 6), prev_positions=t32(1, 0), valid_sampled_token_count=t32(1, 1),
                prev_num_draft_tokens=t32(1, 1))


@st.composite
def _seq_lens_draw(draw) -> Call:
    call = draw(_correction_draw())
    # int32, or a runner's int64 host copy.
    seq_lens = call["cpu_num_computed_tokens"].to(draw(st.sampled_from([I32, I64])))
    return dict(seq_lens_cpu=seq_lens, prev_positions=call["prev_positions"],
                valid_sampled_token_count=call["valid_sampled_token_count"],
                prev_num_draft_tokens=call["prev_num_draft_tokens"])


CORRECT_SEQ_LENS = OpSpec(
    name="correct_optimistic_seq_lens",
    wrapper=specops.correct_optimistic_seq_lens,
    tensors=dict(seq_lens_cpu=Arg((I32, I64), 1), prev_positions=Arg((I32, I64), 1),
                 valid_sampled_token_count=Arg((I32,), 1), prev_num_draft_tokens=Arg((I32,), 1)),
    outputs=("seq_lens_cpu",),
    valid_call=_seq_lens_valid,
    metadata_errors=lambda: [bad("seq_lens_cpu shorter than n", ("seq_lens_cpu", "prev_positions"),
                                 seq_lens_cpu=t32(5))],
    value_errors=lambda: [],
    draw_call=_seq_lens_draw(),
    reads_first=("prev_positions", "valid_sampled_token_count", "prev_num_draft_tokens"),
    corruptions=(
        Corruption("prev_positions at the dtype's extremes", _extreme("prev_positions")),
        Corruption("counts at int32 extremes", _extreme("seq_lens_cpu", "valid_sampled_token_count",
                                                         "prev_num_draft_tokens")),
    ),
)


def _positions_valid() -> Call:
    # Request-indexed counts: request 0 reads row 1 (positions 9, 10), request 1 row 0 (4).
    return dict(num_computed_tokens=t32(4, 9), query_start_loc=t32(0, 2, 3), positions=stale(4, dtype=I64),
                seq_lens=stale(3), num_tokens_padded=4, num_reqs_padded=3, idx_mapping=t32(1, 0))


def _positions_metadata() -> list[Bad]:
    shared = torch.zeros(8, dtype=I32)
    return [
        bad("R+1 = 0 entries", "query_start_loc", query_start_loc=torch.zeros(0, dtype=I32)),
        bad("num_computed_tokens shorter than R", ("num_computed_tokens", "query_start_loc"),
            num_computed_tokens=t32(4), idx_mapping=None),
        bad("idx_mapping of another length than R", ("idx_mapping", "query_start_loc"), idx_mapping=t32(1)),
        bad("num_tokens_padded -1", "num_tokens_padded", num_tokens_padded=-1),
        bad("num_tokens_padded past positions", ("num_tokens_padded", "positions"), num_tokens_padded=5),
        bad("num_reqs_padded < R", "num_reqs_padded", num_reqs_padded=1),
        bad("num_reqs_padded past seq_lens", ("num_reqs_padded", "seq_lens"), num_reqs_padded=4),
        bad("outputs sharing memory", ("positions", "seq_lens"), positions=shared[:4], seq_lens=shared[3:6]),
        bad_with("an output sharing an input", ("seq_lens", "num_computed_tokens"),
                 lambda call: call.update(seq_lens=call["num_computed_tokens"], num_reqs_padded=2)),
    ]


def _positions_values() -> list[Bad]:
    return [
        bad("query_start_loc decreasing", "query_start_loc", query_start_loc=t32(0, 3, 2)),
        bad("query_start_loc[0] != 0", "query_start_loc", query_start_loc=t32(1, 2, 3)),
        bad("query_start_loc[R] past num_tokens_padded", ("num_tokens_padded", "query_start_loc"),
            query_start_loc=t32(0, 2, 5)),
        bad("positions shorter than T", ("num_tokens_padded", "positions"), positions=stale(2, dtype=I64),
            num_tokens_padded=None),
        bad("idx_mapping past num_computed_tokens", ("idx_mapping", "num_computed_tokens"), idx_mapping=t32(2, 0)),
    ]


@st.composite
def _positions_draw(draw) -> Call:
    query_lens = draw(st.lists(st.integers(0, 5), max_size=6))
    generator = _seed(draw)
    num_reqs, num_tokens = len(query_lens), sum(query_lens)
    tokens_padded, reqs_padded = num_tokens + draw(st.integers(0, 3)), num_reqs + draw(st.integers(0, 2))
    num_counts = num_reqs + draw(st.integers(0, 2))
    idx_mapping = None
    if num_counts and draw(st.booleans()):  # request-indexed counts
        idx_mapping = torch.randint(-1, num_counts, (num_reqs,), generator=generator).to(draw(st.sampled_from([I32, I64])))
    return dict(num_computed_tokens=torch.randint(0, 1000, (num_counts,), dtype=I32, generator=generator),
                query_start_loc=query_start_loc_of(query_lens),
                positions=stale(tokens_padded + draw(st.integers(0, 2)), dtype=draw(st.sampled_from([I64, I32]))),
                seq_lens=stale(reqs_padded + draw(st.integers(0, 2))), num_tokens_padded=tokens_padded,
                num_reqs_padded=reqs_padded, idx_mapping=idx_mapping)


def _positions_tokens_past_padding(draw, call: Call) -> bool:
    """More tokens than the padded extent: the device kernels write the first num_tokens_padded."""
    qsl = call["query_start_loc"]
    qsl[-1] = max(int(qsl[-1]), call["num_tokens_padded"]) + draw(st.integers(1, 3))
    return True


def _positions_idx_past_counts(draw, call: Call) -> bool:
    num_reqs = call["query_start_loc"].numel() - 1
    if num_reqs == 0:
        return False
    rows = call["num_computed_tokens"].numel()
    _with_idx_mapping(call, num_reqs)[_pick(draw, num_reqs)] = rows + draw(st.integers(0, 5))
    return True


PREPARE_POSITIONS = OpSpec(
    name="prepare_positions_and_seq_lens",
    wrapper=specops.prepare_positions_and_seq_lens,
    tensors=dict(num_computed_tokens=Arg((I32,), 1), query_start_loc=Arg((I32,), 1), positions=Arg((I64, I32), 1),
                 seq_lens=Arg((I32,), 1), idx_mapping=Arg((I32, I64), 1)),
    outputs=("positions", "seq_lens"),
    valid_call=_positions_valid,
    metadata_errors=_positions_metadata,
    value_errors=_positions_values,
    offsets=("query_start_loc",),
    draw_call=_positions_draw(),
    corruptions=(
        Corruption("query_start_loc[R] past num_tokens_padded", _positions_tokens_past_padding),
        Corruption("counts at int32 extremes", _extreme("num_computed_tokens")),
        Corruption("query_start_loc decreasing", _decreasing("query_start_loc"), device="bounds"),
        Corruption("idx_mapping past num_computed_tokens", _positions_idx_past_counts),
    ),
)


def _fused_valid() -> Call:
    # Row 0 continues row 1 (20 + 2 = 22), row 1 is new (host 6): positions 22, 23, 6.
    return dict(num_computed_tokens=t32(10, 20, 30), num_accepted_tokens=t32(0, 0, 0), prev_positions=t32(1, 0),
                valid_sampled_token_count=t32(1, 2), prev_num_draft_tokens=t32(1, 1),
                cpu_num_computed_tokens=t32(5, 6), query_start_loc=t32(0, 2, 3),
                block_tables=[torch.tensor([[1, 2], [3, 4]], dtype=I32),
                              torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]], dtype=I32)],
                block_sizes=[16, 8], positions=stale(4, dtype=I64), seq_lens=stale(3),
                slot_mappings=[stale(4, dtype=I64), stale(4, dtype=I32)], blocks_per_kv_block=[1, 1],
                cp_sharded=[True, False], cp_world_size=1, cp_rank=0, cp_interleave=1, idx_mapping=t32(1, 0),
                num_tokens_padded=4, num_reqs_padded=3, num_blocks=[t32(2, 2), t32(4, 4)])


def _fused_metadata() -> list[Bad]:
    shared = torch.zeros(8, dtype=I64)
    return [
        bad("num_accepted_tokens shorter than n", ("num_accepted_tokens", "prev_positions"),
            num_accepted_tokens=t32(0)),
        bad("cpu_num_computed_tokens shorter than n", ("cpu_num_computed_tokens", "prev_positions"),
            cpu_num_computed_tokens=t32(5)),
        bad("num_computed_tokens shorter than R", ("num_computed_tokens", "query_start_loc"),
            num_computed_tokens=t32(10), prev_positions=t32(0), cpu_num_computed_tokens=t32(5),
            num_accepted_tokens=t32(0)),
        bad("num_tokens_padded past positions", ("num_tokens_padded", "positions"), num_tokens_padded=5),
        bad("num_tokens_padded -1", "num_tokens_padded", num_tokens_padded=-1),
        bad("num_reqs_padded past seq_lens", ("num_reqs_padded", "seq_lens"), num_reqs_padded=4),
        bad("num_reqs_padded < R", "num_reqs_padded", num_reqs_padded=1),
        bad("a slot mapping shorter than num_tokens_padded", ("num_tokens_padded", "slot_mappings[1]"),
            slot_mappings=[stale(4, dtype=I64), stale(3, dtype=I64)]),
        bad("one slot mapping for two tables", ("slot_mappings", "block_tables"), slot_mappings=[stale(4, dtype=I64)]),
        bad("num_blocks for one table of two", ("num_blocks", "block_tables"), num_blocks=[t32(2, 2)]),
        bad("num_blocks[1] shorter than its table", ("num_blocks[1]", "block_tables[1]"),
            num_blocks=[t32(2, 2), t32(4)]),
        bad("block_sizes[1] 0", "block_sizes[1]", block_sizes=[16, 0]),
        bad("three block sizes for two tables", ("block_sizes", "block_tables"), block_sizes=[16, 8, 4]),
        bad("blocks_per_kv_block[0] 0", "blocks_per_kv_block[0]", blocks_per_kv_block=[0, 1]),
        bad("one cp_sharded for two tables", ("cp_sharded", "block_tables"), cp_sharded=[True]),
        bad("one slot_mapping_enabled for two tables", ("slot_mapping_enabled", "block_tables"),
            slot_mapping_enabled=[True]),
        bad("cp_world_size 0", "cp_world_size", cp_world_size=0),
        bad("cp_rank = cp_world_size", ("cp_rank", "cp_world_size"), cp_world_size=2, cp_rank=2),
        bad("cp_interleave 0", "cp_interleave", cp_interleave=0),
        bad("cp_interleave not dividing block_sizes[0]", ("cp_interleave", "block_sizes[0]"), cp_world_size=2,
            cp_interleave=3),
        bad("a virtual block past int32", ("block_sizes[0]", "cp_world_size"), block_sizes=[2**30, 8],
            cp_world_size=2),
        bad("idx_mapping of another length than R", ("idx_mapping", "query_start_loc"), idx_mapping=t32(0)),
        bad("slot mappings sharing memory", ("slot_mappings[1]", "slot_mappings[0]"),
            slot_mappings=[shared[:4], shared[2:6]]),
        bad_with("a slot mapping sharing positions", ("slot_mappings[0]", "positions"),
                 lambda call: call.update(slot_mappings=[call["positions"], stale(4, dtype=I64)])),
    ]


def _fused_values() -> list[Bad]:
    return [
        bad("positions past block_tables[1]", "block_tables[1]",
            block_tables=[torch.tensor([[1, 2], [3, 4]], dtype=I32), torch.tensor([[5], [9]], dtype=I32)]),
        bad("idx_mapping past the tables", ("idx_mapping", "block_tables[0]"), idx_mapping=t32(2, 0)),
        # Request 0 reads row 1, which holds one block of 16: position 22 needs a second.
        bad("positions past a row's allocated blocks", ("positions", "num_blocks[0]"),
            num_blocks=[t32(2, 1), t32(4, 4)]),
        bad("query_start_loc decreasing", "query_start_loc", query_start_loc=t32(0, 3, 2)),
        bad("query_start_loc[0] != 0", "query_start_loc", query_start_loc=t32(1, 2, 3)),
        bad("query_start_loc[R] past num_tokens_padded", ("num_tokens_padded", "query_start_loc"),
            query_start_loc=t32(0, 2, 5)),
        # Request 0 reads row 1; positions 22, 23 in blocks of 8: column 2, id 2^29, slot 2^32 + 6.
        bad("a slot past an int32 slot mapping", "slot_mappings[1]",
            block_tables=[torch.tensor([[1, 2], [3, 4]], dtype=I32),
                          torch.tensor([[5, 6, 7, 8], [9, 10, 2**29, 12]], dtype=I32)]),
    ]


FUSED_GROUPS = [(16, 1, True), (4, 2, False), (8, 1, True)]


@st.composite
def _fused_draw(draw) -> Call:
    world = draw(st.sampled_from([1, 2]))
    groups = draw(st.lists(st.sampled_from(FUSED_GROUPS), max_size=2))
    step = make_spec_decode_step(_seed(draw), num_reqs=draw(st.integers(0, 5)), num_prev_rows=draw(st.integers(0, 6)),
                                 max_query_len=3, groups=groups, cp_world_size=world,
                                 with_idx_mapping=draw(st.booleans()), prev_dtype=draw(st.sampled_from([I32, I64])))
    tokens_padded = step.num_tokens + draw(st.integers(0, 3))
    reqs_padded = step.num_reqs + draw(st.integers(0, 2))
    return dict(
        zip(CORRECTION_TENSORS, step.correction.args()), query_start_loc=step.query_start_loc,
        block_tables=step.block_tables, block_sizes=step.block_sizes,
        positions=stale(tokens_padded + draw(st.integers(0, 1)), dtype=draw(st.sampled_from([I64, I32]))),
        seq_lens=stale(reqs_padded + draw(st.integers(0, 1))),
        slot_mappings=[stale(tokens_padded + draw(st.integers(0, 1)), dtype=draw(st.sampled_from([I64, I32])))
                       for _ in groups],
        blocks_per_kv_block=step.blocks_per_kv_block, cp_sharded=step.cp_sharded,
        slot_mapping_enabled=[draw(st.booleans()) for _ in groups], cp_world_size=world,
        cp_rank=_pick(draw, world), cp_interleave=draw(st.sampled_from([1, 2, 4])), idx_mapping=step.idx_mapping,
        num_tokens_padded=tokens_padded, num_reqs_padded=reqs_padded)


def _fused_request_past_tables(draw, call: Call) -> bool:
    """A request that takes a host count far past every table, its first token stored on this
    rank in every group (2^26 is a multiple of every virtual block here)."""
    qsl = call["query_start_loc"]
    with_tokens = (qsl[1:] > qsl[:-1]).nonzero().flatten().tolist()
    if not with_tokens or not call["block_tables"]:
        return False
    request = draw(st.sampled_from(with_tokens))
    call["prev_positions"][request] = -1
    call["cpu_num_computed_tokens"][request] = 2**26 + call["cp_rank"] * call["cp_interleave"]
    if call["idx_mapping"] is not None and call["idx_mapping"][request] < 0:
        call["idx_mapping"][request] = 0
    return any(call["slot_mapping_enabled"])  # a group without a slot mapping never reads its table


def _fused_idx_past_tables(draw, call: Call) -> bool:
    num_reqs = call["query_start_loc"].numel() - 1
    if num_reqs == 0 or not call["block_tables"]:
        return False
    rows = min(table.size(0) for table in call["block_tables"])
    _with_idx_mapping(call, num_reqs)[_pick(draw, num_reqs)] = rows + draw(st.integers(0, 5))
    return any(call["slot_mapping_enabled"])


def _fused_negative_block_ids(draw, call: Call) -> bool:
    for g in range(len(call["block_tables"])):
        _negative_block_ids(draw, call["block_tables"], g)
    return False


FUSED = OpSpec(
    name="prepare_spec_decode_inputs",
    wrapper=specops.prepare_spec_decode_inputs,
    tensors={**CORRECTION_TENSORS, "query_start_loc": Arg((I32,), 1), "positions": Arg((I64, I32), 1),
             "seq_lens": Arg((I32,), 1), "block_tables[0]": Arg((I32,), 2, row_stride=True),
             "block_tables[1]": Arg((I32,), 2, row_stride=True), "slot_mappings[0]": Arg((I64, I32), 1),
             "slot_mappings[1]": Arg((I64, I32), 1), "idx_mapping": Arg((I32, I64), 1),
             "num_blocks[0]": Arg((I32,), 1), "num_blocks[1]": Arg((I32,), 1)},
    outputs=("num_computed_tokens", "num_accepted_tokens", "positions", "seq_lens", "slot_mappings[0]",
             "slot_mappings[1]"),
    valid_call=_fused_valid,
    metadata_errors=_fused_metadata,
    value_errors=_fused_values,
    offsets=("query_start_loc",),
    draw_call=_fused_draw(),
    reads_first=CORRECTION_INPUTS,  # gathered before the first store; the rest is read while storing
    corruptions=(
        Corruption("a request past every table", _fused_request_past_tables),
        Corruption("idx_mapping past the tables", _fused_idx_past_tables),
        Corruption("negative block ids", _fused_negative_block_ids),
        Corruption("query_start_loc[R] past num_tokens_padded", _positions_tokens_past_padding),
    ),
    scalars=("num_tokens_padded", "num_reqs_padded", "cp_world_size", "cp_rank", "cp_interleave", "block_sizes",
             "blocks_per_kv_block"),
)


# Add an op here (docs/hardening.md, "Adding an op").
OP_TABLE: tuple[OpSpec, ...] = (SLOT_MAPPING, GATHER, APPLY, FORMAT, FORMAT_MULTI, DSPARK, DSPARK_MULTI, CP_LOCAL,
                                DCP_LOCAL, SAS, CORRECT_COUNTS, CORRECT_SEQ_LENS, PREPARE_POSITIONS, FUSED)

# Schemas that are not public ops: reached only through another op's wrapper, covered there.
HOST_HELPERS = {
    "cp_local_max_lens": "the host ints of cp_local_metadata, from its query_start_loc(_cpu)/seq_lens(_cpu)",
    "check_slot_mapping_positions": "compute_slot_mapping's value checks for every group of PersistentMappings.refresh",
}
