"""sas_metadata: the golden vectors of the AI-CPU kernel on every backend, schedules
worked by hand, the layout's invariants on random calls, the Python restatement, invalid values,
opcheck, compile, the decoder; the golden vectors come
from golden_cases.py."""

from __future__ import annotations

import pytest
import torch
from conftest import BACKENDS, examples
from hypothesis import given, settings
from hypothesis import strategies as st
from golden_cases import SAS_TENSORS as TENSORS
from golden_cases import UNTOUCHED, check_golden_schedule, check_schedule_compiles, golden_cases, tensor_call
from golden_cases import PLATFORM, with_words
from sas_checker import check_call
from strategies import assert_same, query_start_loc_of, sas_calls

import specops
from specops.reference.sas_metadata_python import python_sas_metadata

GOLDEN = golden_cases("sas_metadata.jsonl")


# The argument each of the kernel's rejection messages is about.
_KERNEL_MESSAGE_ARGUMENT = [
    (r"^num_heads_kv should", "num_heads_kv"),
    (r"^ori_mask_mode should", "ori_mask_mode"),
    (r"^ori_win_left should", "ori_win_left"),
    (r"^ori_win_right should", "ori_win_right"),
    (r"^layout_q must", "layout_q"),
    (r"^layout_kv must", "layout_kv"),
    (r"cmpRatio_ should", "cmp_ratio"),
    (r"^cmp_topk should", "cmp_topk"),
    (r"cu_seqlens_q must be provided", "cu_seqlens_q"),
    (r"^seqused_kv must be provided", "seqused_kv"),
    (r"^AIC num or AIV num should not be 0, but got 0 and", "num_cube_cores"),
    (r"^AIC num or AIV num should not be 0, but got \d+ and 0", "num_vector_cores"),
]


@pytest.mark.parametrize("case,source", GOLDEN)
def test_golden(backend, case, source):
    """Each accepted call gives the kernel's words exactly; each rejected call a ValueError
    naming the argument the kernel names, with out untouched."""
    check_golden_schedule(specops.sas_metadata, case, source, TENSORS, _KERNEL_MESSAGE_ARGUMENT)


@pytest.mark.parametrize("case,source", with_words(GOLDEN))
def test_golden_python_restatement(case, source):
    """The bench's straightforward restatement, an implementation apart from the three."""
    assert case is not None, source
    assert python_sas_metadata(**tensor_call(case["args"], TENSORS)) == case["words"]


def _entries(out: torch.Tensor) -> list[list[int]]:
    """The enabled FA entries."""
    words = out.tolist()
    return [words[8 * c: 8 * c + 8] for c in range(36) if words[8 * c] == 1]


def test_decode_split_by_tiles_worked_by_hand(backend):
    # One request, 3 tokens at KV positions 9997..9999, 64 heads: 3 M tiles (one token's heads
    # each). Window (127, 0): each tile sees 128 tokens, one S2 block: 6 * ceil(64 / 16) +
    # 10 * ceil(128 / 64) = 44, last block 44; the batch costs 132, its last block 44.
    # Core 0: limit max(132 // 24, 44) = 44. The batch: 132 > 44 + 44 // 2. Tile 0: 44 <= 66,
    # taken; tile 1: 88 > 66: the core ends at (0, 1). Core 1: unassigned 88, limit 44: tile 1
    # taken, ends at (0, 2). Core 2: unassigned 44, the rest of the batch, 44 <= 66: ends at (1, 0).
    out = specops.sas_metadata(64, 1, 512, cu_seqlens_q=query_start_loc_of([3]), seqused_kv=torch.tensor(
        [10000], dtype=torch.int32), batch_size=1, max_seqlen_q=3, max_seqlen_kv=10000, ori_win_left=127,
        layout_q="TND", has_cmp_kv=False, **PLATFORM)
    assert _entries(out) == [[1, 0, 0, 0, 0, 1, 0, 0], [1, 0, 1, 0, 0, 2, 0, 0], [1, 0, 2, 0, 1, 0, 0, 0]]
    assert out[24:].tolist() == [0] * 1000


def test_whole_batches_within_half_a_block_over_the_limit(backend):
    # Two cores; batches of 1, 2 and 1 tokens with 300 KV tokens (causal, 64 heads): every
    # tile sees up to its own position, one S2 block of 298..300 tokens: 24 + 10 * 5 = 74,
    # last block 74. Costs 74, 148, 74: total 296. Core 0: limit max(296 // 2, 74) = 148.
    # Batch 0: 74 <= 148 + 37, taken; batch 1: 74 + 148 = 222 > 185; its tile 0: 148 <= 185,
    # taken; its tile 1: 222 > 185: ends at (1, 1). Core 1: the rest, 148 <= 148 + 37: (3, 0).
    out = specops.sas_metadata(64, 1, 512, cu_seqlens_q=query_start_loc_of([1, 2, 1]),
                               seqused_kv=torch.tensor([300, 300, 300], dtype=torch.int32), ori_mask_mode=3,
                               layout_q="TND", has_cmp_kv=False, num_cube_cores=2, num_vector_cores=2,
                               soc_version="Ascend910B1")
    assert _entries(out) == [[1, 0, 0, 0, 1, 1, 0, 0], [1, 1, 1, 0, 3, 0, 0, 0]]
    # Three cores, batches of 2, 1 and 2 tokens: 148, 74, 148, total 370. Core 0: limit
    # max(370 // 3, 74) = 123; batch 0 fits only with the tolerance (148 <= 123 + 37); batch 1:
    # 222 > 160, and so is its tile. Core 1: unassigned 222, limit 111: batch 1 (74 <= 148),
    # then batch 2: 222 > 148; its tile 0: 148 <= 148, taken; tile 1: 222, not. Core 2: the rest.
    out = specops.sas_metadata(64, 1, 512, cu_seqlens_q=query_start_loc_of([2, 1, 2]),
                               seqused_kv=torch.tensor([300, 300, 300], dtype=torch.int32), ori_mask_mode=3,
                               layout_q="TND", has_cmp_kv=False, num_cube_cores=3, num_vector_cores=3,
                               soc_version="Ascend910B1")
    assert _entries(out) == [[1, 0, 0, 0, 1, 0, 0, 0], [1, 1, 0, 0, 2, 1, 0, 0], [1, 2, 1, 0, 3, 0, 0, 0]]


def test_ascend950_tiles_and_compressed_kv_worked_by_hand(backend):
    # Ascend950: M tiles of 64 rows, S2 tiles of 128 tokens. 16 heads, 6 tokens (96 rows) at
    # positions 294..299 of 300, causal, CFA with cmp_ratio 4. Tile 0 = tokens 0..3, sees
    # [0, 297]: 298 tokens in 3 blocks and (297 + 1) // 4 = 74 compressed in 1; cost
    # 24 * 4 + 10 * (5 + 2) = 166, last block (the compressed one) 24 + 10 * 2 = 44. Tile 1 =
    # tokens 4..5, 32 rows: 12 * 4 + 10 * (5 + 2) = 118, last block 12 + 20 = 32. Two cores:
    # limit max(284 // 2, 166) = 166; the batch 284 > 166 + 16; tile 0: 166 <= 188; tile 1:
    # 284 > 182: core 0 ends at (0, 1), core 1 takes the rest (118 <= 166 + 16).
    out = specops.sas_metadata(16, 1, 512, cu_seqlens_q=query_start_loc_of([6]),
                               seqused_kv=torch.tensor([300], dtype=torch.int32), ori_mask_mode=3, cmp_ratio=4,
                               cmp_topk=0, layout_q="TND", num_cube_cores=2, num_vector_cores=4,
                               soc_version="Ascend950PR")
    assert _entries(out) == [[1, 0, 0, 0, 0, 1, 0, 0], [1, 0, 1, 0, 1, 0, 0, 0]]


def test_batches_without_work(backend):
    # No batch has both query rows and KV: core 0 covers them all, (0, 0) .. (B, 0). (An empty
    # seqused_kv is "not provided", which PA_ND refuses: no batches take the TND KV layout.)
    for query_lens, kv_lens in [([], []), ([0, 0, 0], [5, 0, 9]), ([3, 2], [0, 0])]:
        out = torch.full((1024,), UNTOUCHED, dtype=torch.int32)
        specops.sas_metadata(8, 1, 128, cu_seqlens_q=query_start_loc_of(query_lens),
                             seqused_kv=torch.tensor(kv_lens, dtype=torch.int32), layout_q="TND",
                             layout_kv="TND" if not kv_lens else "PA_ND", out=out, **PLATFORM)
        assert out.tolist() == [1, 0, 0, 0, len(query_lens)] + [0] * 1019


def test_no_batches_read_no_entry(backend):
    # Without batches no length is read, not even a cumulative tensor's leading entry: a value
    # outside int32 there still gives the empty schedule, not the invalid-values zeros.
    for first in (0, -2**63, 2**40):
        out = torch.full((1024,), UNTOUCHED, dtype=torch.int32)
        specops.sas_metadata(1, 1, 512, cu_seqlens_q=torch.tensor([first]), cu_seqlens_ori_kv=torch.tensor([0]),
                             layout_q="TND", layout_kv="TND", ori_win_left=127, out=out, **PLATFORM)
        assert out.tolist() == [1, 0, 0, 0, 0] + [0] * 1019, first


@settings(max_examples=examples(40))
@given(call=sas_calls())
def test_random_calls_keep_the_layout_invariants_and_agree(call):
    """Native: the invariants of sas_checker and the words of the Python restatement."""
    out = specops.sas_metadata(**call)
    check_call(out.tolist(), call)
    assert out.tolist() == python_sas_metadata(**{k: v for k, v in call.items() if k != "out"})


@pytest.mark.parametrize("other", [b for b in BACKENDS if b != "native"])
@settings(max_examples=examples(8))
@given(call=sas_calls(max_reqs=40, max_prefill=20))
def test_every_backend_writes_the_native_words(other, call):
    expected = specops.sas_metadata(**{**call, "out": None})
    with specops.backend(other):
        specops.sas_metadata(**call)
    assert_same(call["out"], expected, other)


def test_checker_catches_broken_schedules():
    # The checker is the oracle of the random tests: each corruption must fail it.
    call = dict(num_heads_q=64, num_heads_kv=1, head_dim=512, cu_seqlens_q=query_start_loc_of([3, 1, 4, 0, 2]),
                seqused_kv=torch.tensor([900, 50, 4000, 7, 300], dtype=torch.int32), layout_q="TND",
                **{**PLATFORM, "num_cube_cores": 8})
    words = specops.sas_metadata(**call).tolist()
    check_call(words, call)
    used = sum(words[0:64:8])
    assert 2 <= used < 8
    corruptions = {
        "disabled core": (0, -1), "start": (8 + 2, 1), "end": (4, 1), "end past the batches": (8 * (used - 1) + 4, 1),
        "s2 start": (3, 1), "s2 end": (6, 1), "workspace index": (7, 1), "entry of a disabled core": (8 * used + 2, 1),
        "FD entry": (288, 1), "word past the FD entries": (900, 1), "enable word": (8 * used, 1),
    }
    for what, (word, delta) in corruptions.items():
        broken = list(words)
        broken[word] += delta
        with pytest.raises(AssertionError):
            check_call(broken, call)
            pytest.fail(f"the checker missed a corrupted {what}")


def _invalid_values():
    big = torch.full((64,), 2**31 - 1, dtype=torch.int32)
    return [
        ("cu_seqlens_q", dict(cu_seqlens_q=torch.tensor([0, 3, 2], dtype=torch.int32))),
        ("seqused_kv", dict(seqused_kv=torch.tensor([10, -1], dtype=torch.int32))),
        ("seqused_q", dict(seqused_q=torch.tensor([1, -2], dtype=torch.int32))),
        ("seqused_kv", dict(seqused_kv=torch.tensor([10, 2**31], dtype=torch.int64))),
        ("cu_seqlens_q", dict(cu_seqlens_q=torch.tensor([0, 1, 2**31], dtype=torch.int64))),
        ("cu_seqlens_q", dict(cu_seqlens_q=torch.tensor([0, 1, (1 << 25) + 2], dtype=torch.int32))),  # past 2^31 rows
        ("max_seqlen_q", dict(layout_q="BSND", cu_seqlens_q=None, batch_size=2049, max_seqlen_q=1 << 20, num_heads_q=1,
                              seqused_kv=torch.full((2049,), 5, dtype=torch.int32))),  # 2^31 + 2^20 M tiles
        ("seqused_kv", dict(num_heads_q=1 << 30, cu_seqlens_q=query_start_loc_of([1] * 64), seqused_kv=big,
                            ori_mask_mode=0)),  # each tile about 2^50.6, in all past 2^56
    ]


@pytest.mark.parametrize("argument,change", _invalid_values(), ids=[f"{a}-{i}" for i, (a, _) in enumerate(_invalid_values())])
def test_invalid_values(argument, change):
    """The host op raises naming the argument and writes nothing; the device paths (Triton, and
    the reference that stands for them) write 1024 zeros."""
    call = dict(num_heads_q=64, num_heads_kv=1, head_dim=512, cu_seqlens_q=torch.tensor([0, 2, 3], dtype=torch.int32),
                seqused_kv=torch.tensor([10, 20], dtype=torch.int32), layout_q="TND", **PLATFORM)
    call.update(change)
    out = torch.full((1024,), UNTOUCHED, dtype=torch.int32)
    with pytest.raises(ValueError, match=rf"\b{argument}\b"):
        specops.sas_metadata(**call, out=out)
    assert out.eq(UNTOUCHED).all()
    for name in BACKENDS:
        if name != "native":
            with specops.backend(name):
                specops.sas_metadata(**call, out=out)
            assert out.tolist() == [0] * 1024, name
            out.fill_(UNTOUCHED)


def test_none_and_empty_tensors_are_not_provided(backend):
    empty = torch.zeros(0, dtype=torch.int32)
    base = dict(cu_seqlens_q=query_start_loc_of([2, 1]), seqused_kv=torch.tensor([500, 9], dtype=torch.int32),
                layout_q="TND", ori_win_left=127, **PLATFORM)
    expected = specops.sas_metadata(64, 1, 512, **base)
    for name in ("cu_seqlens_ori_kv", "cu_seqlens_cmp_kv", "seqused_q"):
        assert_same(specops.sas_metadata(64, 1, 512, **base, **{name: empty}), expected, name)
    with pytest.raises(ValueError, match="seqused_kv"):
        specops.sas_metadata(64, 1, 512, **{**base, "seqused_kv": empty})


def test_int64_lengths_read_as_int32(backend):
    call = dict(cu_seqlens_q=query_start_loc_of([1, 4, 2]), seqused_kv=torch.tensor([70, 4000, 99999], dtype=torch.int32),
                layout_q="TND", cmp_ratio=128, **PLATFORM)
    expected = specops.sas_metadata(64, 1, 512, **call)
    wide = {k: v.long() if isinstance(v, torch.Tensor) else v for k, v in call.items()}
    assert_same(specops.sas_metadata(64, 1, 512, **wide), expected)


def test_output_goes_to_the_first_tensors_device():
    out = specops.sas_metadata(64, 1, 512, seqused_kv=torch.tensor([10], dtype=torch.int32), batch_size=1,
                               max_seqlen_q=1, **PLATFORM)
    assert out.device.type == "cpu" and out.dtype == torch.int32 and out.shape == (1024,)
    with torch.device("meta"):
        meta = specops.sas_metadata(64, 1, 512, seqused_kv=torch.tensor([10], dtype=torch.int32), batch_size=1,
                                    **PLATFORM)
    assert meta.device.type == "meta"


@pytest.mark.parametrize("argument,value", [("layout_q", "BNSD"), ("layout_q", 1), ("layout_kv", "PA_BSND"),
                                            ("soc_version", 910)])
def test_string_arguments_are_checked_by_the_wrapper(argument, value):
    out = torch.full((1024,), UNTOUCHED, dtype=torch.int32)
    with pytest.raises(ValueError, match=argument):
        specops.sas_metadata(64, 1, 512, seqused_kv=torch.tensor([10], dtype=torch.int32), batch_size=1,
                             **{**PLATFORM, argument: value}, out=out)
    assert out.eq(UNTOUCHED).all()


def _schema_args(out: torch.Tensor) -> tuple:
    cu = query_start_loc_of([1, 0, 7, 3])
    kv = torch.tensor([500, 20, 2000, 0], dtype=torch.int32)
    # num_heads_q .. head_dim, the five tensors, batch_size .. ori_win_right, layout codes (TND,
    # PA_ND), has_ori_kv, has_cmp_kv, cores, ascend950, out
    return (64, 1, 512, cu, None, None, None, kv, 4, 7, 2000, 0, 512, 4, 4, 3, 127, 0, 1, 0, True, True, 5, 9,
            False, out)


def test_opcheck():
    torch.library.opcheck(torch.ops.specops.sas_metadata.default, _schema_args(torch.zeros(1024, dtype=torch.int32)))


def test_compiles_without_graph_break():
    cu, kv = query_start_loc_of([1, 0, 7, 3]), torch.tensor([500, 20, 2000, 0], dtype=torch.int32)

    def step(cu, kv, out):
        specops.sas_metadata(64, 1, 512, cu_seqlens_q=cu, seqused_kv=kv + 0, batch_size=4, max_seqlen_q=7,
                             max_seqlen_kv=2000, cmp_topk=512, layout_q="TND", num_cube_cores=5, num_vector_cores=9,
                             soc_version="Ascend950PR", out=out)
        return out + 1

    check_schedule_compiles(step, cu, kv)


def test_decode_sas_metadata_names_the_header_fields():
    words = torch.zeros(1024, dtype=torch.int32)
    words[0:8] = torch.tensor([1, 0, 0, 0, 2, 3, 0, 0])
    words[8:16] = torch.tensor([1, 2, 3, 0, 5, 0, 0, 0])
    words[288:296] = torch.tensor([1, 4, 6, 2, 3, 16, 8, 0])  # an FD entry, as a later kernel may write
    schedule = specops.decode_sas_metadata(words, num_cube_cores=3, num_vector_cores=2)
    assert schedule.fa[1] == specops.FAEntry(core=1, core_enable=1, bn2_start=2, m_start=3, s2_start=0, bn2_end=5,
                                             m_end=0, s2_end=0, first_fd_data_workspace_idx=0)
    assert not schedule.fa[2].core_enable and len(schedule.fa) == 3 and len(schedule.fd) == 2
    assert schedule.fd[0] == specops.FDEntry(core=0, core_enable=1, bn2_idx=4, m_idx=6, workspace_idx=2,
                                             workspace_num=3, m_start=16, m_num=8)
    text = str(schedule)
    assert "FA  1: (bn2 2, m 3, s2 0) .. (bn2 5, m 0, s2 0)" in text
    assert "FD  0: (bn2 4, m 6) workspace [2, 5) rows [16, 24)" in text
    assert "disabled: 1 of 3 cube cores, 1 of 2 vector cores" in text
    with pytest.raises(ValueError, match="1024"):
        specops.decode_sas_metadata(words[:512])
    with pytest.raises(ValueError, match="num_cube_cores"):
        specops.decode_sas_metadata(words, num_cube_cores=37)
