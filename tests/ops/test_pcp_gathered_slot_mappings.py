"""pcp_gathered_slot_mappings: every group's KV slots of the gathered stream. The worked examples
(vLLM's _convert_to_gathered_slot_mappings), random layouts on every backend against an
independent expectation, more groups than one launch holds, out-of-range values on the device
paths, opcheck, compile, bad input."""

from __future__ import annotations

import pytest
import torch
from conftest import device_backends, examples
from hypothesis import given, settings
from hypothesis import strategies as st
from pcp_expectations import expected_gathered_slots
from strategies import assert_rejected_without_writes, assert_same
from test_pcp_partition import layout, pcp_batches

import specops

STALE = 4321
T, F = True, False


def test_example_2_two_groups(backend):
    lay = layout([1, 7], [10, 0], [F, T], 2, dcp_world_size=2)
    slots = [100 + torch.arange(8), 200 + torch.arange(8)]
    out = specops.pcp_gathered_slot_mappings(slots, lay.padded_gather_idx, lay.gathered_kv_write_mask)
    assert out[0].tolist() == [100, 101, 102, 107, -1, -1, 103, 104, 105, 106]
    assert out[1].tolist() == [200, 201, 202, 207, -1, -1, 203, 204, 205, 206]


def test_example_3_from_a_2d_tensor_into_int32_buffers(backend):
    lay = layout([1, 1, 9, 1], [10, 20, 4, 30], [F, F, T, F], 2, shard_decode_requests=True)
    slots = torch.stack([100 + torch.arange(12), 200 + torch.arange(12)]).int()
    buffers = torch.full((2, 16), STALE, dtype=torch.int32)
    out = specops.pcp_gathered_slot_mappings(slots, lay.padded_gather_idx, lay.gathered_kv_write_mask, out=buffers)
    assert out[0].tolist() == [100, 111, 102, 103, 104, -1, -1, 101, 105, 106, 107, 108, 109, 110, -1, -1]
    assert out[1].tolist()[:9] == [200, 211, 202, 203, 204, -1, -1, 201, 205]
    assert out[0].data_ptr() == buffers[0].data_ptr()


def test_num_tokens_padded_stops_the_padding(backend):
    lay = layout([7], [0], [T], 2, shard_decode_requests=True)
    buffer = torch.full((12,), STALE)
    specops.pcp_gathered_slot_mappings([torch.arange(7)], lay.padded_gather_idx, lay.gathered_kv_write_mask,
                                       out=[buffer], num_tokens_padded=10)
    assert buffer.tolist() == [0, 1, 6, -1, 2, 3, 4, 5, -1, -1, STALE, STALE]


@settings(max_examples=examples(25))
@given(batch=pcp_batches(), P=st.integers(1, 4), shard=st.booleans(), dcp=st.sampled_from([1, 2]),
       num_groups=st.integers(1, 6), extra=st.integers(0, 3), dtype=st.sampled_from([torch.int64, torch.int32]),
       seed=st.integers(0, 2**16))
def test_every_group_matches_the_expectation(backend, batch, P, shard, dcp, num_groups, extra, dtype, seed):
    q, c, f = batch
    lay = layout(q, c, f, P, shard_decode_requests=shard and dcp == 1, dcp_world_size=dcp)
    gen = torch.Generator().manual_seed(seed)
    J = lay.padded_gather_idx.numel()
    # Group 5 onwards goes to a second launch on the Triton path (4 groups per launch).
    slots = [torch.randint(-1, 10**6, (sum(q) + extra,), generator=gen).to(dtype) for _ in range(num_groups)]
    out = [torch.full((J + g % 3,), STALE, dtype=dtype) for g in range(num_groups)]
    specops.pcp_gathered_slot_mappings(slots, lay.padded_gather_idx, lay.gathered_kv_write_mask, out=out)
    for g in range(num_groups):
        expected = expected_gathered_slots(slots[g].tolist(), lay.padded_gather_idx.tolist(),
                                           lay.gathered_kv_write_mask.tolist(), out[g].numel())
        assert_same(out[g], torch.tensor(expected, dtype=dtype), f"group {g}")
        # Every token's slot appears exactly once: the writes of the gathered stream are the
        # global slot mapping's.
        written = sorted(out[g][:J][lay.gathered_kv_write_mask].tolist())
        assert written == sorted(slots[g][:sum(q)].tolist())


def test_out_of_range_indices_write_pad_on_the_device_paths():
    gather = torch.tensor([0, 3, -2, 2**40, 1])
    mask = torch.tensor([T, T, T, T, F])
    for name in device_backends():
        with specops.backend(name):
            out = specops.pcp_gathered_slot_mappings([torch.tensor([7, 8, 9]), torch.empty(0, dtype=torch.int64)],
                                                     gather, mask)
        assert out[0].tolist() == [7, -1, -1, -1, -1], name
        assert out[1].tolist() == [-1] * 5, name


def test_an_empty_stream_pads_everything(backend):
    buffer = torch.full((4,), STALE)
    specops.pcp_gathered_slot_mappings([torch.arange(3)], torch.empty(0, dtype=torch.int64),
                                       torch.empty(0, dtype=torch.bool), out=[buffer])
    assert buffer.tolist() == [-1] * 4


def _opcheck_args():
    lay = layout([1, 7], [10, 0], [F, T], 2, dcp_world_size=2)
    return ([100 + torch.arange(8), (200 + torch.arange(8)).int()], lay.padded_gather_idx, lay.gathered_kv_write_mask,
            [torch.empty(12, dtype=torch.int64), torch.empty(10, dtype=torch.int32)], -1)


def test_opcheck():
    torch.library.opcheck(torch.ops.specops.pcp_gathered_slot_mappings.default, _opcheck_args())


def test_compiles_without_graph_break():
    slots, gather, mask, out, _ = _opcheck_args()

    def step(a, b, out0, out1):
        specops.pcp_gathered_slot_mappings([a + 1, b], gather, mask, out=[out0, out1])
        return out0 * 2, out1

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    expected = step(slots[0], slots[1], out[0].clone(), out[1].clone())
    got = compiled(slots[0], slots[1], out[0], out[1])
    for a, b in zip(got, expected):
        assert_same(a, b)


def _call():
    lay = layout([1, 7], [10, 0], [F, T], 2, dcp_world_size=2)
    return dict(slot_mappings=[100 + torch.arange(8), 200 + torch.arange(8)], padded_gather_idx=lay.padded_gather_idx,
                gathered_kv_write_mask=lay.gathered_kv_write_mask,
                out=[torch.full((10,), STALE), torch.full((11,), STALE)])


BAD = [
    ("out", lambda call: call.update(out=[torch.full((10,), STALE)])),
    ("out\\[1\\]", lambda call: call.update(out=[call["out"][0], torch.full((9,), STALE)])),
    ("out\\[0\\]", lambda call: call.update(out=[torch.full((10,), STALE, dtype=torch.int32), call["out"][1]])),
    ("gathered_kv_write_mask", lambda call: call.update(gathered_kv_write_mask=call["gathered_kv_write_mask"][:9])),
    ("padded_gather_idx", lambda call: call.update(padded_gather_idx=call["padded_gather_idx"].int())),
    ("num_tokens_padded", lambda call: call.update(num_tokens_padded=11)),
    ("num_tokens_padded", lambda call: call.update(num_tokens_padded=9)),
    ("out\\[1\\]", lambda call: call.update(out=[call["out"][0], call["out"][0]])),
]


@pytest.mark.parametrize("argument,change", BAD, ids=[f"{a}-{i}" for i, (a, _) in enumerate(BAD)])
def test_bad_input_names_the_argument_and_writes_nothing(backend, argument, change):
    call = _call()
    before = [t.clone() for t in call["out"]]
    change(call)
    kept = call["out"]
    with pytest.raises((ValueError, RuntimeError), match=argument):
        specops.pcp_gathered_slot_mappings(**call)
    for t, b in zip(kept, before):
        if t.numel() == b.numel() and t.dtype == b.dtype:
            assert torch.equal(t, b)


def test_an_output_sharing_a_slot_mapping_is_rejected(backend):
    call = _call()
    shared = torch.full((20,), STALE)
    call["slot_mappings"][0] = shared[:8]
    call["out"][0] = shared[4:14]
    with pytest.raises(ValueError, match="out\\[0\\].*slot_mappings\\[0\\]"):
        specops.pcp_gathered_slot_mappings(**call)


def test_native_rejects_a_masked_in_index_past_a_slot_mapping_and_writes_nothing():
    call = _call()
    call["padded_gather_idx"] = call["padded_gather_idx"].clone()
    call["padded_gather_idx"][3] = 8
    with specops.backend("native"):
        with pytest.raises(ValueError, match="padded_gather_idx"):
            specops.pcp_gathered_slot_mappings(**call)
    assert call["out"][0].tolist() == [STALE] * 10
    # A masked-out copy's index is never read.
    call["padded_gather_idx"][3] = 7
    call["padded_gather_idx"][4] = 99
    with specops.backend("native"):
        out = specops.pcp_gathered_slot_mappings(**call)
    assert out[0][4].item() == -1
