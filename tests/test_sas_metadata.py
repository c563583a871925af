"""sas_metadata (SPEC 3.5): hand-computed schedules, every invariant on random batches under every
backend and every core count, identical words across implementations, opcheck, compile, bad input."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sas_checker import check_schedule, kv_tile, spec_items
from strategies import assert_same, attention_batches, query_start_loc_of

import specops
from specops.reference.sas_metadata import sas_metadata as reference_op

INT32_MAX = 2**31 - 1
VERSION = 0x5A5


def call(query_lens, kv_lens, out=None, **kwargs):
    return specops.sas_metadata(query_start_loc_of(query_lens), torch.tensor(kv_lens, dtype=torch.int32),
                                out=out, **kwargs)


def reference_words(query_lens, kv_lens, *, num_heads_q, num_heads_kv, head_dim, window_left=-1, window_right=0,
                    num_cube_cores=24, num_vector_cores=48):
    out = torch.full((1024,), 77, dtype=torch.int32)
    reference_op(query_start_loc_of(query_lens), torch.tensor(kv_lens, dtype=torch.int32), num_heads_q, num_heads_kv,
                 head_dim, window_left, window_right, num_cube_cores, num_vector_cores, out)
    return out


def words_at(out, start, count=8):
    return out[start: start + count].tolist()


def test_one_decode_split_over_two_cores(backend):
    # One token at position 299 sees KV [0, 300): 5 chunks of 64 (head_dim 512), cost 6. A cap
    # of ceil(6 / 2) = 3 cannot fit (3 pieces of 2 chunks), so the cap is 4: core 0 takes 3
    # chunks, core 1 the other 2 plus a second fixed cost; total 4 + 3 = 7.
    out = call([1], [300], num_heads_q=1, num_heads_kv=1, head_dim=512, num_cube_cores=2, num_vector_cores=2)
    assert words_at(out, 0) == [VERSION, 2, 2, 128, 64, 7, 1, 2]
    assert words_at(out, 16) == [1, 0, 0, 0, 0, 0, 192, 0]
    assert words_at(out, 24) == [1, 0, 0, 192, 0, 0, 300, 1]
    # One split item over two slots; V / S = 2 entries wanted, but the item has 1 row.
    assert words_at(out, 32) == [1, 0, 0, 0, 2, 0, 1, 0]
    assert out[40:].tolist() == [0] * (1024 - 40)


def test_sliding_window_tiles_and_kv_heads(backend):
    # 4 tokens x 64 query heads per KV head = 256 rows: tile 0 holds tokens 0-1 (positions
    # 996-997), tile 1 tokens 2-3. window_left 100: tile 0 sees [896, 998), tile 1 [898, 1000),
    # one chunk of 256 each (head_dim 128). 2 KV heads: 4 items of cost 2 on 4 cores, none split.
    out = call([4], [1000], num_heads_q=128, num_heads_kv=2, head_dim=128, window_left=100, window_right=0,
               num_cube_cores=4, num_vector_cores=8)
    assert words_at(out, 0) == [VERSION, 4, 8, 128, 256, 8, 0, 0]
    assert words_at(out, 16) == [1, 0, 0, 896, 0, 0, 998, -1]
    assert words_at(out, 24) == [1, 0, 1, 898, 0, 1, 1000, -1]
    assert words_at(out, 32) == [1, 1, 0, 896, 1, 0, 998, -1]
    assert words_at(out, 40) == [1, 1, 1, 898, 1, 1, 1000, -1]
    assert out[48:].tolist() == [0] * (1024 - 48)


def test_item_over_three_cores_and_rows_of_a_partial_tile(backend):
    # A tile of 3 tokens x 5 heads = 15 rows sees [0, 640) with unbounded windows: 10 chunks,
    # cost 11 on 3 cores. A cap of 4 holds 3 + 3 + 3 chunks, too few, so the cap is 5: pieces of
    # 4, 4 and 2 chunks.
    # The middle core holds one split piece, first and last at once; slots 0, 1, 2.
    out = call([3], [640], num_heads_q=5, num_heads_kv=1, head_dim=512, window_left=-1, window_right=-1,
               num_cube_cores=3, num_vector_cores=7)
    assert words_at(out, 0) == [VERSION, 3, 7, 128, 64, 13, 1, 3]
    assert words_at(out, 16) == [1, 0, 0, 0, 0, 0, 256, 0]
    assert words_at(out, 24) == [1, 0, 0, 256, 0, 0, 512, 1]
    assert words_at(out, 32) == [1, 0, 0, 512, 0, 0, 640, 2]
    # 7 vector cores for 15 rows: 3 + 2 + 2 + 2 + 2 + 2 + 2.
    fd = [words_at(out, 40 + 8 * v) for v in range(7)]
    assert [e[5:7] for e in fd] == [[0, 3], [3, 2], [5, 2], [7, 2], [9, 2], [11, 2], [13, 2]]
    assert all(e[:5] == [1, 0, 0, 0, 3] and e[7] == 0 for e in fd)


def test_empty_batch_and_batches_without_work(backend):
    for query_lens, kv_lens in [([], []), ([0, 0], [5, 0]), ([3], [0])]:
        out = torch.full((1024,), 9, dtype=torch.int32)
        call(query_lens, kv_lens, out=out, num_heads_q=8, num_heads_kv=2, head_dim=64, num_cube_cores=5,
             num_vector_cores=6)
        assert words_at(out, 0) == [VERSION, 5, 6, 128, 512, 0, 0, 0]
        assert out[8:].tolist() == [0] * (1024 - 8)


SHAPES = dict(
    kv_heads=st.sampled_from([1, 2, 4]),
    group=st.sampled_from([1, 3, 16, 64, 128]),
    head_dim=st.sampled_from([1, 128, 192, 512, 576]),
    window_left=st.sampled_from([-1, 0, 1, 127, 1000]),
    window_right=st.sampled_from([-1, 0, 1, 7]),
)


def _check_against_reference(batch, kv_heads, group, head_dim, window_left, window_right, cores, vectors):
    query_lens, kv_lens = batch
    kwargs = dict(num_heads_q=kv_heads * group, num_heads_kv=kv_heads, head_dim=head_dim, window_left=window_left,
                  window_right=window_right, num_cube_cores=cores, num_vector_cores=vectors)
    out = torch.full((1024,), -5, dtype=torch.int32)
    call(query_lens, kv_lens, out=out, **kwargs)
    check_schedule(out.tolist(), query_lens=query_lens, kv_lens=kv_lens, **kwargs)
    assert_same(out, reference_words(query_lens, kv_lens, **kwargs), specops.current_backend())


@settings(max_examples=12)
@given(batch=attention_batches(max_reqs=5, max_prefill=40, max_context=1500), cores=st.integers(1, 36),
       extra_vectors=st.integers(0, 72), **SHAPES)
def test_every_backend_keeps_the_invariants_and_matches_the_reference(backend, batch, kv_heads, group, head_dim,
                                                                      window_left, window_right, cores, extra_vectors):
    vectors = min(72, cores + extra_vectors)
    _check_against_reference(batch, kv_heads, group, head_dim, window_left, window_right, cores, vectors)


@pytest.mark.parametrize("cores", range(1, 37))
@settings(max_examples=6)
@given(batch=attention_batches(max_reqs=10), vectors_choice=st.sampled_from(["equal", "max", "between"]), **SHAPES)
def test_invariants_for_every_core_count(cores, batch, vectors_choice, kv_heads, group, head_dim, window_left,
                                         window_right):
    vectors = {"equal": cores, "max": 72, "between": (cores + 72) // 2}[vectors_choice]
    _check_against_reference(batch, kv_heads, group, head_dim, window_left, window_right, cores, vectors)


@pytest.mark.parametrize("num_reqs,query_len", [(256, 1), (1024, 4)])
def test_large_decode_batches(num_reqs, query_len):
    generator = torch.Generator().manual_seed(num_reqs)
    kv_lens = (torch.randint(0, 8192, (num_reqs,), generator=generator) + query_len).tolist()
    _check_against_reference(([query_len] * num_reqs, kv_lens), 1, 64, 512, -1, 0, 24, 48)


def test_packed_and_long_requests(backend):
    # 70 requests cross several of the Triton kernel's packed blocks; a 300-token prefill with 2
    # KV heads and 64 query heads each has 300 items, more than one block of lanes holds.
    generator = torch.Generator().manual_seed(5)
    query_lens = torch.randint(0, 5, (70,), generator=generator).tolist() + [300] + [2] * 3
    kv_lens = [q + int(c) for q, c in zip(query_lens, torch.randint(0, 3000, (74,), generator=generator))]
    for cores, window_left in [(24, -1), (7, 128)]:
        _check_against_reference((query_lens, kv_lens), 2, 64, 576, window_left, 0, cores, 48)


def _optimal_max_cost(chunks: list[int], cores: int) -> int:
    """The smallest maximum core cost of any contiguous schedule, by trying every cut."""
    stream = [(i, k) for i, c in enumerate(chunks) for k in range(c)]  # chunk k of item i
    best = None
    for cuts in itertools.combinations_with_replacement(range(len(stream) + 1), cores - 1):
        bounds = [0, *cuts, len(stream)]
        costs = [len({i for i, _ in stream[a:z]}) + (z - a) for a, z in zip(bounds, bounds[1:])]
        best = max(costs) if best is None else min(best, max(costs))
    return best


@settings(max_examples=25)
@given(kv_lens=st.lists(st.integers(1, 6 * 64), min_size=1, max_size=4), cores=st.integers(1, 4))
def test_max_core_cost_is_optimal_among_contiguous_schedules(kv_lens, cores):
    query_lens = [1] * len(kv_lens)
    kwargs = dict(num_heads_q=1, num_heads_kv=1, head_dim=512, num_cube_cores=cores, num_vector_cores=cores)
    out = call(query_lens, kv_lens, **kwargs)
    found = check_schedule(out.tolist(), query_lens=query_lens, kv_lens=kv_lens, window_left=-1, window_right=0,
                           **kwargs)
    chunks = [-(-kv // kv_tile(512)) for kv in kv_lens]
    assert max(found.core_costs) == _optimal_max_cost(chunks, cores)


def test_checker_catches_broken_schedules():
    # The checker is the oracle of the random tests: a corrupted word must fail it.
    query_lens, kv_lens = [1, 200, 1], [900, 1400, 4000]
    kwargs = dict(num_heads_q=16, num_heads_kv=2, head_dim=512, window_left=-1, window_right=0,
                  num_cube_cores=6, num_vector_cores=72)
    words = call(query_lens, kv_lens, **kwargs).tolist()
    check_schedule(words, query_lens=query_lens, kv_lens=kv_lens, **kwargs)
    fd_start = 16 + 8 * 6
    first_idle_fd = fd_start + 8 * sum(words[fd_start + 8 * v] for v in range(72))
    assert first_idle_fd < fd_start + 8 * 72  # the last split item has 8 rows: not every vector core merges
    corruptions = {
        "total cost": (5, 1), "split count": (6, 1), "slot count": (7, -1), "kv_start": (16 + 8 + 3, 64),
        "kv_end": (16 + 6, -1), "ws_start": (16 + 8 + 7, 1), "FD rows": (fd_start + 6, 1),
        "FD slots": (fd_start + 4, 1), "FD item": (fd_start + 2, 1), "idle FD": (first_idle_fd + 3, 1),
        "header padding": (9, 1), "word past the entries": (1000, 1),
    }
    for what, (word, delta) in corruptions.items():
        broken = list(words)
        broken[word] += delta
        with pytest.raises(AssertionError):
            check_schedule(broken, query_lens=query_lens, kv_lens=kv_lens, **kwargs)
            pytest.fail(f"the checker missed a corrupted {what}")


def test_tokens_before_position_zero_see_nothing(backend):
    # 6 tokens, 4 KV tokens: positions -2 .. 3. With window_left 1 the tokens at -2 and -1 see
    # nothing, the others [0, 1), [0, 2), [1, 3), [2, 4): the tile sees their union [0, 4).
    out = call([6], [4], num_heads_q=1, num_heads_kv=1, head_dim=64, window_left=1, window_right=0,
               num_cube_cores=1, num_vector_cores=1)
    assert words_at(out, 16) == [1, 0, 0, 0, 0, 0, 4, -1]
    assert [(i.m, i.lo, i.hi, i.rows) for i in spec_items([6], [4], 1, 1, 1, 0)] == [(0, 0, 4, 6)]


def test_decode_sas_metadata_reads_every_field():
    out = call([3], [640], num_heads_q=5, num_heads_kv=1, head_dim=512, window_left=-1, window_right=-1,
               num_cube_cores=3, num_vector_cores=7)
    schedule = specops.decode_sas_metadata(out)
    assert schedule.header == specops.SASHeader(VERSION, 3, 7, 128, 64, 13, 1, 3)
    assert len(schedule.fa) == 3 and len(schedule.fd) == 7
    assert schedule.fa[1] == specops.FAEntry(1, True, 0, 0, 256, 0, 0, 512, 1)
    assert schedule.fd[6] == specops.FDEntry(6, True, 0, 0, 0, 3, 13, 2)
    text = str(schedule)
    assert "total cost 13" in text and "FA  1: (bn2 0, m 0) kv 256 .. (bn2 0, m 0) kv 512  ws 1" in text
    assert "FD  6: (bn2 0, m 0) slots [0, 3) rows [13, 15)" in text
    assert "idle: 0 cube cores, 0 vector cores" in text

    idle = specops.decode_sas_metadata(call([1], [10], num_heads_q=1, num_heads_kv=1, head_dim=64))
    assert [entry.enabled for entry in idle.fa] == [True] + [False] * 23
    assert "FA  0: (bn2 0, m 0) kv 0 .. (bn2 0, m 0) kv 10  ws -" in str(idle)
    with pytest.raises(ValueError, match="layout version"):
        specops.decode_sas_metadata(torch.zeros(1024, dtype=torch.int32))
    with pytest.raises(ValueError, match="1024"):
        specops.decode_sas_metadata(out[:512])


def _overflowing_cost():
    # 64 tiles that each see 2^31 - 1 tokens in 2^25 chunks: the total cost passes int32.
    return dict(query_lens=[64], kv_lens=[INT32_MAX], num_heads_q=128, num_heads_kv=1, head_dim=1 << 20,
                window_left=-1, window_right=-1)


UNSCHEDULABLE = [
    ("cu_seqlens_q", dict(query_lens=[3, -2, 4], kv_lens=[10, 10, 10], num_heads_q=4, num_heads_kv=1, head_dim=64)),
    ("seqused_kv", dict(query_lens=[3, 2], kv_lens=[10, -1], num_heads_q=4, num_heads_kv=1, head_dim=64)),
    ("query rows", dict(query_lens=[(1 << 24) + 1], kv_lens=[5], num_heads_q=128, num_heads_kv=1, head_dim=64)),
    ("int32 total cost", _overflowing_cost()),
]


@pytest.mark.parametrize("what,batch", UNSCHEDULABLE, ids=[w for w, _ in UNSCHEDULABLE])
def test_unschedulable_values(what, batch):
    """The host op raises and writes nothing; device paths write the all-zero buffer."""
    batch = dict(batch)
    query_lens, kv_lens = batch.pop("query_lens"), batch.pop("kv_lens")
    cu = torch.tensor([0, *itertools.accumulate(query_lens)], dtype=torch.int32)
    kv = torch.tensor(kv_lens, dtype=torch.int32)
    out = torch.full((1024,), 3, dtype=torch.int32)
    with pytest.raises(ValueError, match=what):
        specops.sas_metadata(cu, kv, out=out, **batch)
    assert out.tolist() == [3] * 1024
    for name in ("triton", "reference"):
        if name in specops.available_backends():
            with specops.backend(name):
                specops.sas_metadata(cu, kv, out=out, **batch)
            assert out.tolist() == [0] * 1024, name
            out.fill_(3)


def test_windows_wider_than_int32_are_unbounded(backend):
    wide = call([5, 1], [700, 90], num_heads_q=2, num_heads_kv=1, head_dim=64, window_left=1 << 40,
                window_right=1 << 40)
    unbounded = call([5, 1], [700, 90], num_heads_q=2, num_heads_kv=1, head_dim=64, window_left=-1,
                     window_right=-1)
    assert_same(wide, unbounded)


def _opcheck_args():
    cu = query_start_loc_of([1, 0, 37, 4])
    kv = torch.tensor([500, 20, 2000, 0], dtype=torch.int32)
    return (cu, kv, 32, 4, 128, 256, 0, 5, 9, torch.zeros(1024, dtype=torch.int32))


def test_opcheck():
    torch.library.opcheck(torch.ops.specops.sas_metadata.default, _opcheck_args())


def test_compiles_without_graph_break():
    cu, kv, heads_q, heads_kv, head_dim, left, right, cores, vectors, out = _opcheck_args()

    def step(cu, kv, out):
        specops.sas_metadata(cu, kv + 0, num_heads_q=heads_q, num_heads_kv=heads_kv, head_dim=head_dim,
                             window_left=left, window_right=right, num_cube_cores=cores, num_vector_cores=vectors,
                             out=out)
        return out + 1

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    expected = step(cu, kv, out.clone())
    actual = compiled(cu, kv, out)
    assert_same(actual, expected)
    assert_same(out + 1, expected)


def _valid_call():
    return dict(cu_seqlens_q=torch.tensor([0, 2, 3], dtype=torch.int32),
                seqused_kv=torch.tensor([100, 7], dtype=torch.int32),
                num_heads_q=8, num_heads_kv=2, head_dim=128, window_left=-1, window_right=0,
                num_cube_cores=4, num_vector_cores=8)


BAD_INPUTS = [
    ("num_heads_q", dict(num_heads_q=7)),
    ("num_heads_q", dict(num_heads_q=0)),
    ("num_heads_q", dict(num_heads_q=1 << 32)),
    ("num_heads_kv", dict(num_heads_kv=0)),
    ("head_dim", dict(head_dim=0)),
    ("num_cube_cores", dict(num_cube_cores=37)),
    ("num_cube_cores", dict(num_cube_cores=0)),
    ("num_vector_cores", dict(num_vector_cores=73)),
    ("num_vector_cores", dict(num_vector_cores=3)),
    ("window_left", dict(window_left=-2)),
    ("window_right", dict(window_right=-5)),
    ("seqused_kv", dict(seqused_kv=torch.tensor([100], dtype=torch.int32))),
    ("seqused_kv", dict(seqused_kv=torch.tensor([100, 7], dtype=torch.int64))),
    ("seqused_kv", dict(seqused_kv=torch.tensor([[100, 7]], dtype=torch.int32))),
    ("cu_seqlens_q", dict(cu_seqlens_q=torch.tensor([0, 2, 3], dtype=torch.int64))),
    ("cu_seqlens_q", dict(cu_seqlens_q=torch.zeros(0, dtype=torch.int32))),
    ("out", dict(out=torch.zeros(1023, dtype=torch.int32))),
    ("out", dict(out=torch.zeros(1024, dtype=torch.int64))),
]


@pytest.mark.parametrize("argument,change", BAD_INPUTS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(BAD_INPUTS)])
def test_bad_input_names_the_argument_and_writes_nothing(backend, argument, change):
    arguments = _valid_call()
    arguments.update(change)
    out = arguments.pop("out", torch.full((1024,), 55, dtype=torch.int32))
    before = out.clone()
    with pytest.raises(ValueError, match=argument):
        specops.sas_metadata(**arguments, out=out)
    assert torch.equal(out, before)


def test_allocates_the_output_when_absent():
    arguments = _valid_call()
    out = specops.sas_metadata(**arguments)
    assert out.dtype == torch.int32 and out.shape == (1024,)
    into = torch.empty(1024, dtype=torch.int32)
    assert specops.sas_metadata(**arguments, out=into).data_ptr() == into.data_ptr()
    assert_same(into, out)
