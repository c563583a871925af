"""pcp_partition: the PCP layout of every rank. The worked examples (vLLM 0.33's PCPManager run
on them), the cross-rank properties on random batches (P = 1..4, both shard modes, DCP 1 and 2)
against a token-by-token expectation, rank(k), copy_to into stable buffers, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from pcp_expectations import expected_layout

import specops

T, F = True, False


def layout(q, c, f, P, **kw):
    return specops.pcp_partition(torch.tensor(q, dtype=torch.int32), torch.tensor(c, dtype=torch.int32),
                                 torch.tensor(f, dtype=torch.bool), P, **kw)


def rank_lists(lay, k):
    r = lay.rank(k)
    return dict(req=r.local_to_global_batch_req_idx.tolist(), lens=r.local_num_scheduled_tokens.tolist(),
                lqsl=r.local_query_start_loc.tolist(), start=r.local_start_pos.tolist(),
                upper=r.local_seq_lens_cpu_upper_bound.tolist(), num_tokens=r.num_tokens)


@pytest.fixture(params=["native", "reference"])
def host_backend(request):
    with specops.backend(request.param):
        yield request.param


def test_example_1_one_fresh_prefill(host_backend):
    lay = layout([7], [0], [T], 2, shard_decode_requests=True)
    assert lay.padded_num_tokens == 4 and lay.per_rank_num_tokens == [3, 4]
    assert lay.padded_gather_idx.tolist() == [0, 1, 6, 0, 2, 3, 4, 5]
    assert lay.gathered_kv_write_mask.tolist() == [T, T, T, F, T, T, T, T]
    assert lay.hidden_restore_idx.tolist() == [0, 1, 4, 5, 6, 7, 2]
    assert rank_lists(lay, 0)["lqsl"] == [0, 2, 3] and rank_lists(lay, 0)["start"] == [0, 6]
    assert rank_lists(lay, 1)["lqsl"] == [0, 2, 4] and rank_lists(lay, 1)["start"] == [2, 4]
    assert lay.padded_gather_idx.dtype == torch.int64 and lay.hidden_restore_idx.dtype == torch.int64
    assert lay.rank(0).local_start_pos.dtype == torch.int32


def test_example_2_dcp_replicates_the_decode(host_backend):
    lay = layout([1, 7], [10, 0], [F, T], 2, dcp_world_size=2)
    assert lay.padded_num_tokens == 5
    assert rank_lists(lay, 0)["lqsl"] == [0, 1, 3, 4] and rank_lists(lay, 0)["start"] == [10, 0, 6]
    assert rank_lists(lay, 1)["lqsl"] == [0, 1, 3, 5] and rank_lists(lay, 1)["start"] == [10, 2, 4]
    assert lay.padded_gather_idx.tolist() == [0, 1, 2, 7, 0, 0, 3, 4, 5, 6]
    assert lay.gathered_kv_write_mask.tolist() == [T, T, T, T, F, F, T, T, T, T]
    assert lay.hidden_restore_idx.tolist() == [0, 1, 2, 6, 7, 8, 9, 3]
    assert lay.replicated.tolist() == [T, F]


def test_example_3_sharded_decodes_and_a_continued_prefill(host_backend):
    lay = layout([1, 1, 9, 1], [10, 20, 4, 30], [F, F, T, F], 2, shard_decode_requests=True)
    r0, r1 = rank_lists(lay, 0), rank_lists(lay, 1)
    assert r0["req"] == [0, 3, 2] and r0["lqsl"] == [0, 1, 2, 5] and r0["start"] == [10, 30, 4]
    assert r1["req"] == [1, 2, 2] and r1["lqsl"] == [0, 1, 4, 7] and r1["start"] == [20, 7, 10]
    assert r0["upper"] == [11, 31, 7] and r1["upper"] == [21, 10, 13]
    assert lay.padded_num_tokens == 7
    assert lay.padded_gather_idx.tolist() == [0, 11, 2, 3, 4, 0, 0, 1, 5, 6, 7, 8, 9, 10]
    assert lay.gathered_kv_write_mask.tolist() == [T] * 5 + [F, F] + [T] * 7
    assert lay.hidden_restore_idx.tolist() == [0, 7, 2, 3, 4, 8, 9, 10, 11, 12, 13, 1]


def test_example_4_short_prefills_replicated_under_dcp(host_backend):
    lay = layout([3, 2], [0, 5], [T, T], 2, dcp_world_size=2, padded_num_tokens=8)
    assert lay.padded_gather_idx.tolist() == [0, 1, 2, 3, 4, 0, 0, 0] * 2
    assert lay.gathered_kv_write_mask.tolist() == [T] * 5 + [F] * 11
    assert lay.hidden_restore_idx.tolist() == [0, 1, 2, 3, 4]
    assert lay.replicated.tolist() == [T, T]


def test_one_rank_puts_decodes_first(host_backend):
    lay = layout([3, 1, 2], [0, 5, 9], [T, F, T], 1)
    assert lay.padded_gather_idx.tolist() == [3, 0, 1, 2, 4, 5]
    # C = 2 chunks even on one rank: each prefill is two segments, as in vLLM.
    assert rank_lists(lay, 0)["req"] == [1, 0, 0, 2, 2]


def test_a_rank_without_tokens_gets_one_empty_segment(host_backend):
    lay = layout([1, 0], [12, 3], [F, F], 2, shard_decode_requests=True)
    assert rank_lists(lay, 1) == dict(req=[0], lens=[0], lqsl=[0, 0], start=[12], upper=[12], num_tokens=0)
    assert lay.per_rank_num_tokens == [1, 0]


def test_shard_with_dcp_is_rejected_naming_both(host_backend):
    # vLLM's layout for this batch writes no KV for tokens 1 and 2 (docs/conformance.md).
    with pytest.raises(ValueError, match="shard_decode_requests.*dcp_world_size"):
        layout([1, 2], [10, 0], [F, T], 2, shard_decode_requests=True, dcp_world_size=2)


def test_numpy_inputs_and_int64_counts(host_backend):
    lay = specops.pcp_partition(np.array([1, 7]), np.array([10, 0]), np.array([False, True]), 2, dcp_world_size=2)
    assert lay.hidden_restore_idx.tolist() == [0, 1, 2, 6, 7, 8, 9, 3]


BAD = [
    ("pcp_world_size", dict(P=0)),
    ("dcp_world_size", dict(dcp_world_size=0)),
    ("num_computed_tokens", dict(c=[0])),
    ("is_prefilling", dict(f=[T, T, F])),
    ("num_scheduled_tokens", dict(q=[3, -1])),
    ("num_computed_tokens", dict(c=[-2, 0])),
    ("padded_num_tokens", dict(padded_num_tokens=2)),
    ("padded_num_tokens", dict(padded_num_tokens=-3)),
    ("num_computed_tokens", dict(c=[2**31 - 2, 0])),
]


@pytest.mark.parametrize("argument,change", BAD, ids=[f"{a}-{i}" for i, (a, _) in enumerate(BAD)])
def test_bad_input_names_the_argument(host_backend, argument, change):
    call = dict(q=[3, 4], c=[0, 2], f=[T, T], P=2)
    call.update(change)
    kw = {k: v for k, v in call.items() if k not in ("q", "c", "f", "P")}
    with pytest.raises(ValueError, match=argument):
        layout(call["q"], call["c"], call["f"], call["P"], **kw)


def test_bad_dtype_and_device_are_named():
    with pytest.raises(ValueError, match="is_prefilling"):
        specops.pcp_partition(torch.tensor([1]), torch.tensor([0]), torch.tensor([1]), 2)
    with pytest.raises(ValueError, match="num_scheduled_tokens"):
        specops.pcp_partition(torch.tensor([1.0]), torch.tensor([0]), torch.tensor([True]), 2)
    with pytest.raises(ValueError, match="num_computed_tokens"):
        specops.pcp_partition(torch.tensor([1]), torch.tensor([[0]]), torch.tensor([True]), 2)


@st.composite
def pcp_batches(draw, max_reqs=7):
    kinds = draw(st.lists(st.sampled_from(["decode", "spec", "prefill", "short", "empty"]), max_size=max_reqs))
    q, c, f = [], [], []
    for kind in kinds:
        q.append({"decode": 1, "spec": draw(st.integers(2, 4)), "prefill": draw(st.integers(1, 40)),
                  "short": draw(st.integers(1, 5)), "empty": 0}[kind])
        c.append(draw(st.integers(0, 50)))
        f.append(kind in ("prefill", "short") or (kind == "empty" and draw(st.booleans())))
    return q, c, f


def check_layout_properties(lay, q, c, f, P, shard):
    """The cross-rank properties 1-5 of docs/pcp.md on one layout."""
    T_ = sum(q)
    L = lay.padded_num_tokens
    gather, mask, restore = lay.padded_gather_idx.tolist(), lay.gathered_kv_write_mask.tolist(), \
        lay.hidden_restore_idx.tolist()
    assert len(gather) == len(mask) == P * L and len(restore) == T_
    written = sorted(g for g, m in zip(gather, mask) if m)
    assert written == list(range(T_)), "every token's KV written exactly once"
    for t in range(T_):
        assert gather[restore[t]] == t and mask[restore[t]], f"restore of token {t}"
    starts = [sum(q[:r]) for r in range(len(q))]
    covered = [[0] * n for n in q]
    for k in range(P):
        rank = lay.rank(k)
        lqsl = rank.local_query_start_loc.tolist()
        n = len(lqsl) - 1
        assert lqsl[0] == 0 and lqsl[-1] == rank.num_tokens == lay.per_rank_num_tokens[k]
        for i in range(n):
            r = rank.local_to_global_batch_req_idx[i].item()
            for o in range(lqsl[i], lqsl[i + 1]):
                token = gather[k * L + o]
                query_offset = token - starts[r]
                assert 0 <= query_offset < q[r]
                covered[r][query_offset] += 1
                # positions are global
                assert rank.local_start_pos[i].item() + (o - lqsl[i]) == c[r] + query_offset
            assert rank.local_seq_lens_cpu_upper_bound[i].item() == rank.local_start_pos[i].item() + lqsl[i + 1] - lqsl[i]
    for r in range(len(q)):
        copies = 1 if (not lay.replicated[r] or shard) else P
        assert covered[r] == [copies] * q[r], f"coverage of request {r}"


@settings(max_examples=examples(60))
@given(batch=pcp_batches(), P=st.integers(1, 4), shard=st.booleans(), dcp=st.sampled_from([1, 2]),
       pad=st.integers(0, 3), padded=st.booleans())
def test_properties_and_expectation_on_random_batches(batch, P, shard, dcp, pad, padded):
    q, c, f = batch
    if shard and dcp > 1:
        with pytest.raises(ValueError, match="shard_decode_requests"):
            layout(q, c, f, P, shard_decode_requests=shard, dcp_world_size=dcp)
        return
    expected = expected_layout(q, c, f, P, shard, dcp)
    L = expected.L + pad if padded else None
    expected = expected_layout(q, c, f, P, shard, dcp, L)
    results = {}
    for name in ("native", "reference"):
        with specops.backend(name):
            results[name] = layout(q, c, f, P, shard_decode_requests=shard, dcp_world_size=dcp, padded_num_tokens=L)
    for name, lay in results.items():
        check_layout_properties(lay, q, c, f, P, shard)
        assert lay.padded_num_tokens == expected.L, name
        assert lay.padded_gather_idx.tolist() == expected.gather, name
        assert lay.gathered_kv_write_mask.tolist() == expected.mask, name
        assert lay.hidden_restore_idx.tolist() == expected.restore, name
        assert lay.replicated.tolist() == expected.replicated, name
        for k in range(P):
            segs = expected.ranks[k].segments or [(0, 0, 0)]
            got = rank_lists(lay, k)
            assert got["req"] == [r for r, _, _ in segs], (name, k)
            assert got["lens"] == [b - a for _, a, b in segs], (name, k)
            first = c[0] if c else 0
            assert got["start"] == ([c[r] + a for r, a, _ in segs] if expected.ranks[k].segments else [first])


def test_garbage_padding_rows_do_not_reach_the_restore():
    """all_gather(local)[restore] == global whatever the padding rows of each rank hold."""
    torch.manual_seed(0)
    q, c, f = [1, 9, 1, 5, 0, 3], [4, 0, 8, 2, 7, 1], [F, T, F, T, T, F]
    for P, shard in ((2, True), (3, False), (4, True)):
        lay = layout(q, c, f, P, shard_decode_requests=shard, padded_num_tokens=20)
        hidden = torch.randn(sum(q), 3)
        L = lay.padded_num_tokens
        gathered = torch.full((P * L, 3), float("nan"))
        for k in range(P):
            rank = lay.rank(k)
            gathered[k * L:k * L + rank.num_tokens] = hidden[rank.local_gather_idx[:rank.num_tokens]]
        assert torch.equal(gathered.index_select(0, lay.hidden_restore_idx), hidden)


def test_copy_to_fills_given_buffers_in_place():
    lay = layout([1, 7], [10, 0], [F, T], 2, dcp_world_size=2)
    gather, mask, restore = torch.full((16,), 99), torch.ones(16, dtype=torch.bool), torch.full((12,), 99)
    addresses = (gather.data_ptr(), mask.data_ptr(), restore.data_ptr())
    moved = lay.copy_to("cpu", padded_gather_idx=gather, gathered_kv_write_mask=mask, hidden_restore_idx=restore)
    assert (moved.padded_gather_idx.data_ptr(), moved.gathered_kv_write_mask.data_ptr(),
            moved.hidden_restore_idx.data_ptr()) == addresses
    assert gather[:10].tolist() == lay.padded_gather_idx.tolist() and gather[10:].tolist() == [99] * 6
    assert mask[:10].tolist() == lay.gathered_kv_write_mask.tolist()
    assert restore[:8].tolist() == lay.hidden_restore_idx.tolist()
    fresh = lay.copy_to(torch.device("cpu"))
    assert torch.equal(fresh.padded_gather_idx, lay.padded_gather_idx)
    assert fresh.padded_gather_idx.data_ptr() != lay.padded_gather_idx.data_ptr()


@pytest.mark.parametrize("name,buffer", [
    ("padded_gather_idx", torch.zeros(4, dtype=torch.int64)),
    ("gathered_kv_write_mask", torch.zeros(16, dtype=torch.int64)),
    ("hidden_restore_idx", torch.zeros(20, dtype=torch.int32)),
])
def test_copy_to_rejects_a_wrong_buffer(name, buffer):
    lay = layout([1, 7], [10, 0], [F, T], 2, dcp_world_size=2)
    with pytest.raises(ValueError, match=name):
        lay.copy_to("cpu", **{name: buffer})


def test_rank_out_of_range_is_rejected():
    with pytest.raises(ValueError, match="k must be"):
        layout([3], [0], [T], 2).rank(2)


def test_the_fast_entry_returns_the_schemas_tensors():
    """FastOp converts a Tensor[] return (pcp_partition's) as torch.ops does."""
    from specops.ops.pcp_partition import _NATIVE

    args = (torch.tensor([1, 7], dtype=torch.int32), torch.tensor([10, 0], dtype=torch.int32),
            torch.tensor([F, T]), 2, False, 2, -1)
    fast, generic = _NATIVE(*args), torch.ops.specops.pcp_partition.default(*args)
    assert isinstance(fast, list) and len(fast) == len(generic) == 7
    for a, b in zip(fast, generic):
        assert a.dtype == b.dtype and torch.equal(a, b)
