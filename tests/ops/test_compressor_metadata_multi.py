"""compressor_metadata_multi: compressor_metadata for every group and step in one call. A case
worked by hand, random calls (0 to 6 groups: past one launch's 4) against the single op for
every (group, step) on every backend and byte-equal across backends, the launches, opcheck,
compile, and bad input that names its argument and writes nothing, in any group."""

from __future__ import annotations

import pytest
import torch
from conftest import BACKENDS, examples
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import assert_same

import specops
from specops.triton_kernels import compressor_metadata_multi as multi_kernel
from specops.triton_kernels._groups import MAX_GROUPS

I32 = torch.int32
FLAT, PAIRS = 1, 2
OUTPUTS = ("compress_cos", "compress_sin", "slot_mappings")


def _rope(rows: int, dim: int, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    values = torch.arange(rows * dim, dtype=torch.float32).reshape(rows, dim)
    return values.to(dtype), (values * 0.5).to(dtype)


def _outputs(steps: int, rows: int, dim: int, fmt: int, dtype=torch.float32) -> dict[str, torch.Tensor]:
    return dict(compress_cos=torch.full((steps, rows, 1, 1, dim), 7.0, dtype=dtype),
                compress_sin=torch.full((steps, rows, 1, 1, dim), 7.0, dtype=dtype),
                slot_mappings=torch.full((steps, rows) if fmt == FLAT else (steps, rows, 2), 0x0BADF00D, dtype=I32))


def _call(groups: list[dict], cu_seqlens: torch.Tensor, start_pos: torch.Tensor, num_reqs: int) -> dict:
    """The wrapper's keywords from per-group dicts (rope, table, block_size, fmt, ratio, outputs)."""
    call = dict(rope_cos=[g["rope"][0] for g in groups], rope_sin=[g["rope"][1] for g in groups],
                cu_seqlens=cu_seqlens, start_pos=start_pos, kv_block_tables=[g["table"] for g in groups],
                kv_block_sizes=[g["block_size"] for g in groups], slot_mapping_formats=[g["fmt"] for g in groups],
                compress_ratios=[g["ratio"] for g in groups], num_reqs_actual=num_reqs)
    call.update({name: [g["out"][name] for g in groups] for name in OUTPUTS})
    return call


def _hand_call() -> dict:
    # Group 0: C4, rope_dim 2, block size 16, (block, offset) pairs; group 1: C128, rope_dim 4,
    # block size 2, flat slots. Step 0: request 0 has 8 tokens from 0, request 1 one token from
    # 127; step 1: one token from 8 and one from 255.
    groups = [dict(rope=_rope(300, 2), table=torch.tensor([[3, 4], [7, 8]], dtype=I32), block_size=16, fmt=PAIRS,
                   ratio=4, out=_outputs(2, 4, 2, PAIRS)),
              dict(rope=_rope(300, 4), table=torch.tensor([[5, 6], [9, -1]], dtype=I32), block_size=2, fmt=FLAT,
                   ratio=128, out=_outputs(2, 2, 4, FLAT))]
    return _call(groups, torch.tensor([[0, 8, 9], [0, 1, 2]], dtype=I32), torch.tensor([[0, 127], [8, 255]], dtype=I32),
                 2)


def test_hand_computed_groups_and_steps(backend):
    call = _hand_call()
    cos, sin, slots = specops.compressor_metadata_multi(**call)
    assert [t.data_ptr() for t in cos] == [t.data_ptr() for t in call["compress_cos"]]
    # C4, step 0: request 0 completes groups 0 and 1 (block 3, offsets 0 and 1; RoPE rows 0 and
    # 4), request 1 group 31 (128 // 4 - 127 // 4 = 1: block index 1 of its row, block 8, offset
    # 15; RoPE row 124), then one fill row. Step 1: 9 // 4 - 8 // 4 = 0 for request 0; request 1
    # completes group 63, block index 3, past its table's width 2: invalid; then fill rows.
    assert slots[0].tolist() == [[[3, 0], [3, 1], [8, 15], [-1, 15]], [[-1, 15]] * 4]
    assert cos[0][0, :, 0, 0].tolist() == [[0, 1], [8, 9], [248, 249], [1, 1]]
    assert sin[0][0, :, 0, 0].tolist() == [[0, 0.5], [4, 4.5], [124, 124.5], [0, 0]]
    assert cos[0][1].eq(1).all() and sin[0][1].eq(0).all()
    # C128: step 0, request 1 completes group 0 (block 9, offset 0: slot 18; RoPE row 0); step 1
    # group 1 (offset 1: slot 19; RoPE row 128). Request 0 completes none.
    assert slots[1].tolist() == [[18, -1], [19, -1]]
    assert cos[1][:, :, 0, 0].tolist() == [[[0, 1, 2, 3], [1, 1, 1, 1]], [[512, 513, 514, 515], [1, 1, 1, 1]]]
    assert sin[1][:, 1].eq(0).all() and sin[1][1, 0, 0, 0].tolist() == [256, 256.5, 257, 257.5]


def test_no_groups_writes_nothing(backend):
    cu, start = torch.tensor([[0, 4]], dtype=I32), torch.tensor([[0]], dtype=I32)
    assert specops.compressor_metadata_multi([], [], cu, start, [], [], [], [], 1, compress_cos=[], compress_sin=[],
                                             slot_mappings=[]) == ([], [], [])
    with pytest.raises(ValueError, match="compress_cos"):
        specops.compressor_metadata_multi([], [], cu, start, [], [], [], [], 1, compress_sin=[], slot_mappings=[],
                                          compress_cos=[torch.zeros(1, 1, 1, 1, 2)])


@st.composite
def calls(draw):
    """Random groups (mixed ratios, formats, rope_dims, block sizes; tables with -1 entries and
    widths too small) over random steps (negative starts, zero-length requests), every 2-D input
    a view of a wider buffer."""
    seed = draw(st.integers(0, 2**16))
    generator = torch.Generator().manual_seed(seed)
    num_groups, steps, reqs = draw(st.integers(0, 6)), draw(st.integers(1, 4)), draw(st.integers(0, 4))
    lengths = torch.randint(0, 300, (steps, reqs), generator=generator)
    lengths[torch.rand(steps, reqs, generator=generator) < 0.3] = 0
    cu = torch.full((steps, reqs + 3), 99, dtype=I32)
    cu[:, 0] = 0
    cu[:, 1:reqs + 1] = lengths.cumsum(1)
    start = torch.randint(-3, 700, (steps, reqs + 2), generator=generator).to(I32)
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16]))
    groups = []
    for _ in range(num_groups):
        dim, fmt = draw(st.sampled_from([1, 2, 4, 8])), draw(st.sampled_from([FLAT, PAIRS]))
        wide = torch.randint(-1, 50, (max(reqs, 1) + 1, draw(st.integers(0, 8)) + 2), generator=generator).to(I32)
        groups.append(dict(rope=_rope(draw(st.integers(1, 1100)), dim, dtype), table=wide[:max(reqs, 1), 1:-1],
                           block_size=draw(st.sampled_from([1, 16, 128])), fmt=fmt,
                           ratio=draw(st.sampled_from([4, 128])),
                           out=_outputs(steps, draw(st.integers(0, 50)), dim, fmt, dtype)))
    return _call(groups, cu[:, :reqs + 1 + draw(st.integers(0, 2))], start[:, :reqs + draw(st.integers(0, 2))], reqs)


def _copied(call: dict) -> dict:
    return {name: [t.clone() for t in value] if isinstance(value, list) and value and
            isinstance(value[0], torch.Tensor) else value for name, value in call.items()}


def _single_op(call: dict, g: int, s: int):
    """What compressor_metadata writes for group g, step s (native)."""
    rows = call["compress_cos"][g].shape[1]
    with specops.backend("native"):
        return specops.compressor_metadata(
            call["rope_cos"][g], call["rope_sin"][g], call["cu_seqlens"][s], call["start_pos"][s],
            call["kv_block_tables"][g], call["kv_block_sizes"][g], call["slot_mapping_formats"][g],
            call["compress_ratios"][g], rows, call["num_reqs_actual"])


@settings(max_examples=examples(12), deadline=None)
@given(call=calls())
def test_every_group_and_step_is_the_single_op_on_every_backend(call):
    results = {}
    for name in BACKENDS:
        results[name] = _copied(call)
        with specops.backend(name):
            specops.compressor_metadata_multi(**results[name])
    for g in range(len(call["rope_cos"])):
        for s in range(call["cu_seqlens"].shape[0]):
            single = _single_op(call, g, s)
            for name in BACKENDS:
                for output, expected in zip(OUTPUTS, single):
                    actual = results[name][output][g][s]
                    assert_same(actual.view(torch.int32) if actual.dtype == torch.float32 else
                                actual.view(torch.int16) if actual.dtype == torch.bfloat16 else actual,
                                expected.view(torch.int32) if expected.dtype == torch.float32 else
                                expected.view(torch.int16) if expected.dtype == torch.bfloat16 else expected,
                                f"{name} {output}[{g}][{s}]")


class _CountedKernel:
    """The multi kernel with its launches counted."""

    def __init__(self, kernel):
        self.kernel, self.launches = kernel, 0

    def __getitem__(self, grid):
        self.launches += 1
        return self.kernel[grid]


@pytest.mark.parametrize("num_groups", [1, 4, 5, 6])
def test_one_op_call_and_one_launch_per_four_groups(num_groups, monkeypatch):
    generator = torch.Generator().manual_seed(num_groups)
    groups = [dict(rope=_rope(600, 4), table=torch.randint(0, 9, (2, 3), generator=generator).to(I32),
                   block_size=16, fmt=g % 2 + 1, ratio=(4, 128)[g % 2], out=_outputs(3, 6, 4, g % 2 + 1))
              for g in range(num_groups)]
    cu = torch.tensor([[0, 8, 140]] * 3, dtype=I32)
    call = _call(groups, cu, torch.tensor([[0, 124], [8, 130], [3, 0]], dtype=I32), 2)
    counted = _CountedKernel(multi_kernel._compressor_metadata_multi_kernel)
    monkeypatch.setattr(multi_kernel, "_compressor_metadata_multi_kernel", counted)
    with specops.backend("triton"):
        specops.compressor_metadata_multi(**call)
    assert counted.launches == -(-num_groups // MAX_GROUPS)
    single = _single_op(call, num_groups - 1, 2)
    assert_same(call["slot_mappings"][-1][2], single.slot_mapping, "the last group's last step")


def _opcheck_args():
    call = _hand_call()
    return tuple(call[name] for name in ("rope_cos", "rope_sin", "cu_seqlens", "start_pos", "kv_block_tables",
                                         "kv_block_sizes", "slot_mapping_formats", "compress_ratios", "num_reqs_actual",
                                         *OUTPUTS))


def test_opcheck():
    torch.library.opcheck(torch.ops.specops.compressor_metadata_multi.default, _opcheck_args())


def test_compiles_without_graph_break():
    call = _hand_call()
    expected = _copied(call)
    specops.compressor_metadata_multi(**expected)

    def step(cu_seqlens):
        cos, _, slots = specops.compressor_metadata_multi(**{**call, "cu_seqlens": cu_seqlens + 0})
        return cos[1] * 2, slots[0] + 1

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    cos, slots = compiled(call["cu_seqlens"])
    assert_same(cos, expected["compress_cos"][1] * 2)
    assert_same(slots, expected["slot_mappings"][0] + 1)


def _four_groups() -> dict:
    groups = [dict(rope=_rope(600, 4), table=torch.tensor([[3, 4], [5, 6]], dtype=I32), block_size=16, fmt=PAIRS,
                   ratio=4, out=_outputs(2, 4, 4, PAIRS)) for _ in range(4)]
    return _call(groups, torch.tensor([[0, 8, 9], [0, 1, 2]], dtype=I32), torch.tensor([[0, 127], [8, 255]], dtype=I32),
                 2)


def _set(name: str, g: int, value):
    return lambda call: call[name].__setitem__(g, value(call) if callable(value) else value)


def _shared_storage(output: str, other: str, g: int = 3, other_g: int = 0):
    """output[g] over the bytes of other[other_g] (both keep their shapes and dtypes)."""
    def change(call):
        target, source = call[output][g], call[other][other_g] if other_g is not None else call[other]
        buffer = torch.zeros(max(target.numel() * target.element_size(), source.numel() * source.element_size()),
                             dtype=torch.uint8)
        call[output][g] = buffer[:target.numel() * target.element_size()].view(target.dtype).view(target.shape)
        placed = buffer[:source.numel() * source.element_size()].view(source.dtype).view(source.shape)
        placed.copy_(source)
        if other_g is None:
            call[other] = placed
        else:
            call[other][other_g] = placed
    return change


BAD_INPUTS = [
    (r"kv_block_tables\[3\]", _set("kv_block_tables", 3, torch.tensor([[3, 4]], dtype=I32))),
    (r"slot_mappings\[3\]", _set("slot_mappings", 3, torch.zeros(2, 4, 2, dtype=torch.int64))),
    (r"slot_mapping_formats\[3\]", lambda call: call.update(slot_mapping_formats=[2, 2, 2, 3])),
    (r"kv_block_sizes\[3\]", lambda call: call.update(kv_block_sizes=[16, 16, 16, 0])),
    (r"compress_ratios\[3\]", lambda call: call.update(compress_ratios=[4, 4, 4, -4])),
    (r"rope_cos\[3\]", _set("rope_cos", 3, lambda call: call["rope_cos"][3].to(torch.bfloat16))),
    (r"rope_sin\[3\]", _set("rope_sin", 3, lambda call: call["rope_sin"][3][:500])),
    (r"compress_sin\[3\]", _set("compress_sin", 3, torch.zeros(2, 5, 1, 1, 4))),
    (r"compress_cos\[3\]", _set("compress_cos", 3, torch.zeros(3, 4, 1, 1, 4))),
    (r"compress_ratios", lambda call: call.update(compress_ratios=[4, 4, 4])),
    (r"start_pos", lambda call: call.update(start_pos=call["start_pos"][:1])),
    (r"cu_seqlens", lambda call: call.update(cu_seqlens=call["cu_seqlens"][0])),
    (r"num_reqs_actual", lambda call: call.update(num_reqs_actual=3)),
    (r"compress_cos\[3\] must not share memory with compress_sin\[0\]",
     _shared_storage("compress_cos", "compress_sin")),
    (r"slot_mappings\[3\] must not share memory with slot_mappings\[1\]",
     _shared_storage("slot_mappings", "slot_mappings", 3, 1)),
    (r"slot_mappings\[3\] must not share memory with kv_block_tables\[0\]",
     _shared_storage("slot_mappings", "kv_block_tables")),
    (r"compress_sin\[3\] must not share memory with rope_cos\[2\]", _shared_storage("compress_sin", "rope_cos", 3, 2)),
    (r"slot_mappings\[3\] must not share memory with cu_seqlens",
     _shared_storage("slot_mappings", "cu_seqlens", 3, None)),
]


@pytest.mark.parametrize("pattern,change", BAD_INPUTS, ids=[str(i) for i in range(len(BAD_INPUTS))])
def test_bad_input_names_the_argument_and_writes_no_group(backend, pattern, change):
    """A bad group 3 (or a bad shared argument) leaves every output untouched, groups 0 to 2 too."""
    call = _four_groups()
    change(call)
    before = {name: [t.clone() for t in call[name]] for name in OUTPUTS}
    with pytest.raises(ValueError, match=pattern):
        specops.compressor_metadata_multi(**call)
    for name in OUTPUTS:
        for g, (t, b) in enumerate(zip(call[name], before[name])):
            assert torch.equal(t, b), f"a rejected call wrote {name}[{g}]"
