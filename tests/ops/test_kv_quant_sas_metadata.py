"""kv_quant_sas_metadata: the golden vectors of the A5 AI-CPU kernel on every backend, the layout
(9-word entries, core pairs, s2_max_num) worked by hand, agreement with sas_metadata where the
kernels agree, the decoder, opcheck and compile; the golden vectors come
from golden_cases.py."""

from __future__ import annotations

import pytest
import torch
from golden_cases import SAS_TENSORS as TENSORS
from golden_cases import UNTOUCHED, check_golden_schedule, check_schedule_compiles, golden_cases, tensor_call
from golden_cases import with_words
from strategies import query_start_loc_of

import specops
from specops.bench.kv_quant_sas_metadata import python_kv_quant_sas_metadata

GOLDEN = golden_cases("kv_quant_sas_metadata.jsonl")

_KERNEL_MESSAGE_ARGUMENT = [
    (r"^num_heads_q should", "num_heads_q"),
    (r"^num_heads_kv should", "num_heads_kv"),
    (r"^ori_mask_mode should", "ori_mask_mode"),
    (r"^ori_win_left should", "ori_win_left"),
    (r"^layout_q must", "layout_q"),
    (r"^layout_kv must", "layout_kv"),
    (r"^For layout_query (TND|BSND), layout_key", "layout_kv"),
    (r"cmpRatio_ should", "cmp_ratio"),
    (r"^cmp_topk should", "cmp_topk"),
    (r"^batch_size should", "batch_size"),
    (r"^max_seqlen_q should", "max_seqlen_q"),
    (r"cu_seqlens_q must be provided", "cu_seqlens_q"),
    (r"^seqused_kv must be provided", "seqused_kv"),
    (r"^AIC num or AIV num should not be 0, but got 0 and", "num_cube_cores"),
    (r"^AIC num or AIV num should not be 0, but got \d+ and 0", "num_vector_cores"),
    (r"^harness: kernel read past the end of seqused_kv", "seqused_kv"),
    (r"^harness: .*FA entries", "num_cube_cores"),
    (r"^harness: num_heads_q 128 on Ascend950 halves aic_core_num", "num_cube_cores"),
]


@pytest.mark.parametrize("case,source", GOLDEN)
def test_golden(backend, case, source):
    """Each accepted call gives the kernel's words exactly; each rejected or undefined call a
    ValueError naming the argument, with out untouched (every undefined call here is refused by
    its arguments or shapes, which every backend checks)."""
    check_golden_schedule(specops.kv_quant_sas_metadata, case, source, TENSORS, _KERNEL_MESSAGE_ARGUMENT)


@pytest.mark.parametrize("case,source", with_words(GOLDEN))
def test_golden_python_restatement(case, source):
    """The bench's plain-Python restatement, an implementation apart from the three."""
    assert case is not None, source
    assert python_kv_quant_sas_metadata(**tensor_call(case["args"], TENSORS)) == case["words"]


def _a5(**change):
    call = dict(cu_seqlens_q=query_start_loc_of([3]), seqused_kv=torch.tensor([10000], dtype=torch.int32),
                layout_q="TND", has_cmp_kv=False, cmp_ratio=1, num_cube_cores=24, num_vector_cores=48,
                soc_version="Ascend950PR_9599")
    call.update(change)
    return call


def test_paired_entries_worked_by_hand(backend):
    # 128 heads on Ascend950: 4 cube cores plan 2 pairs. One request of 3 tokens at positions
    # 9997..9999, window (127, 0), no compressed KV: one-token tiles (128 rows) of 128 KV tokens,
    # one S2 block of 128: 6 * 8 + 10 * 2 = 68 each, 204 in all. Pair 0: limit max(204 // 2,
    # 68) = 102; the batch 204 > 102 + 34; tile 0: 68 <= 136, taken; tile 1: 136 > 136? no,
    # 136 <= 136: taken; tile 2: 204 > 136: pair 0 ends at (0, 2) with 2 blocks. Pair 1 takes
    # the rest, 1 block. Word 8 of every entry of both pairs: 2.
    out = specops.kv_quant_sas_metadata(128, 1, 512, 1, **_a5(num_cube_cores=4, num_vector_cores=8))
    words = out.tolist()
    assert words[0:9] == words[9:18] == [1, 0, 0, 0, 0, 2, 0, 0, 2]
    assert words[18:27] == words[27:36] == [1, 0, 2, 0, 1, 0, 0, 0, 2]
    assert words[36:] == [0] * (1024 - 36)
    schedule = specops.decode_kv_quant_sas_metadata(out, num_cube_cores=4, num_vector_cores=8)
    assert schedule.fa[1].s2_max_num == 2 and schedule.fa[3].bn2_end == 1 and not schedule.fd[0].core_enable


def test_disabled_pairs_write_words_0_and_8(backend):
    # 8 cube cores: 4 pairs, one used; the three others write only enable 0 and word 8.
    out = specops.kv_quant_sas_metadata(128, 1, 512, 1, **_a5(cu_seqlens_q=query_start_loc_of([1]),
                                                               num_cube_cores=8, num_vector_cores=8)).tolist()
    assert out[0:9] == out[9:18] == [1, 0, 0, 0, 1, 0, 0, 0, 1]
    for entry in range(2, 8):
        assert out[9 * entry: 9 * entry + 9] == [0] * 8 + [1]
    assert out[72:] == [0] * (1024 - 72)


def test_64_heads_on_ascend950_match_the_a2_kernels_ascend950_path(backend):
    # METADATA_FAMILY: with 64 heads on Ascend950 the FA ranges are those of the A2/A3 kernel's
    # Ascend950 path; the words differ only by the entry width. ori_win_right is ignored here.
    call = dict(cu_seqlens_q=query_start_loc_of([2, 5, 1]), seqused_kv=torch.tensor([900, 4000, 77], dtype=torch.int32),
                layout_q="TND", cmp_ratio=4, cmp_topk=0, num_cube_cores=6, num_vector_cores=12)
    sas = specops.sas_metadata(64, 1, 512, **call, ori_win_left=127, soc_version="Ascend950PR").tolist()
    kvq = specops.kv_quant_sas_metadata(64, 1, 512, 1, **call, ori_win_right=5,
                                        soc_version="Ascend950PR_9599").tolist()
    assert [sas[8 * c: 8 * c + 8] for c in range(6)] == [kvq[9 * c: 9 * c + 8] for c in range(6)]
    assert [kvq[9 * c + 8] for c in range(6)] == [0] * 6


def test_zero_requests_give_the_empty_schedule(backend):
    # METADATA_FAMILY section 6: cu_seqlens_q = [0] and a one-element seqused_kv (never read).
    out = specops.kv_quant_sas_metadata(64, 1, 512, 1, cu_seqlens_q=torch.tensor([0], dtype=torch.int32),
                                        seqused_kv=torch.tensor([0], dtype=torch.int32), layout_q="TND",
                                        has_cmp_kv=False, num_cube_cores=24, num_vector_cores=48,
                                        soc_version="Ascend950PR_9599")
    assert out.tolist() == [1] + [0] * 1023


@pytest.mark.parametrize("argument,change", [
    ("seqused_kv", dict(seqused_kv=torch.tensor([10, -1], dtype=torch.int32),
                        cu_seqlens_q=query_start_loc_of([1, 1]))),
    ("cu_seqlens_q", dict(cu_seqlens_q=torch.tensor([0, 3, 2], dtype=torch.int32),
                          seqused_kv=torch.tensor([9, 9], dtype=torch.int32))),
])
def test_invalid_values(argument, change):
    """The host op raises naming the argument and writes nothing; the device paths write zeros."""
    out = torch.full((1024,), UNTOUCHED, dtype=torch.int32)
    with pytest.raises(ValueError, match=rf"\b{argument}\b"):
        specops.kv_quant_sas_metadata(64, 1, 512, 1, **_a5(**change), out=out)
    assert out.eq(UNTOUCHED).all()
    for name in ("triton", "reference"):
        with specops.backend(name):
            specops.kv_quant_sas_metadata(64, 1, 512, 1, **_a5(**change), out=out)
        assert out.tolist() == [0] * 1024, name
        out.fill_(UNTOUCHED)


def _schema_args(out: torch.Tensor) -> tuple:
    cu = query_start_loc_of([1, 0, 7, 3])
    kv = torch.tensor([500, 20, 2000, 0], dtype=torch.int32)
    # heads, head_dim, kv_quant_mode, the five tensors, batch_size .. rope_head_dim, cmp_ratio ..
    # ori_win_right, layout codes (TND, PA_ND), has_ori_kv, has_cmp_kv, cores, ascend950, out
    return (128, 1, 512, 1, cu, None, None, None, kv, 4, 7, 2000, 0, 512, 0, 0, 4, 4, 3, 127, 0, 1, 0, True, True,
            8, 16, True, out)


def test_opcheck():
    torch.library.opcheck(torch.ops.specops.kv_quant_sas_metadata.default,
                          _schema_args(torch.zeros(1024, dtype=torch.int32)))


def test_compiles_without_graph_break():
    cu, kv = query_start_loc_of([1, 0, 7, 3]), torch.tensor([500, 20, 2000, 0], dtype=torch.int32)

    def step(cu, kv, out):
        specops.kv_quant_sas_metadata(128, 1, 512, 1, cu_seqlens_q=cu, seqused_kv=kv + 0, cmp_ratio=4, cmp_topk=512,
                                      layout_q="TND", num_cube_cores=8, num_vector_cores=16,
                                      soc_version="Ascend950PR_9599", out=out)
        return out + 1

    check_schedule_compiles(step, cu, kv)


def test_decoder_checks_its_arguments():
    words = torch.zeros(1024, dtype=torch.int32)
    with pytest.raises(ValueError, match="1024"):
        specops.decode_kv_quant_sas_metadata(words[:9])
    with pytest.raises(ValueError, match="num_cube_cores"):
        specops.decode_kv_quant_sas_metadata(words, num_cube_cores=37)
