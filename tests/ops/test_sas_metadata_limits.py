"""sas_metadata at its limits and as vllm-ascend calls it (docs/sas_metadata.md, docs/hardening.md).

- Windows up to the documented 2^62 on both sides: every backend writes the same words, and the
  native op has no signed overflow (`make test-asan` runs this file under UBSan, which aborted
  on `win_left + win_right + 1` before it was computed only where a full window fits).
- batch_size without tensors: every batch is alike, so the native op keeps one row of its cost
  table, not 32 bytes per batch (2^31 - 1 batches without work were std::bad_alloc; 2^24 kept
  512 MiB per thread); a table it cannot allocate is a ValueError naming where B came from.
- The peer's binding: empty tensors of any dtype and shape are "not provided" (checked before the
  dtype), and `device=` places the output.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import BACKENDS
from golden_cases import PLATFORM
from strategies import assert_same, query_start_loc_of

import specops

LIMIT = 2**62
WINDOWS = (0, 1, 127, 2**31 - 1, 2**32, LIMIT - 1, LIMIT)
UNTOUCHED = 0x0BADF00D
# The host paths under test; the Triton kernel has windows past int32 tested apart (below).
HOST_BACKENDS = [backend for backend in BACKENDS if backend != "triton"]


def _words(backend: str, **call) -> torch.Tensor:
    with specops.backend(backend):
        return specops.sas_metadata(64, 1, 512, **{**PLATFORM, **call},
                                    out=torch.full((1024,), UNTOUCHED, dtype=torch.int32))


# Batches where some token sees a full window (a long KV with a decode), none does, and the KV is
# near int32's top: the cost loop takes each of its branches at every window pair.
SHAPES = {
    "decode-and-prefill": dict(cu_seqlens_q=query_start_loc_of([1, 7, 1, 0]),
                               seqused_kv=torch.tensor([5000, 9, 2**31 - 1, 40], dtype=torch.int32), layout_q="TND"),
    "ascend950-compressed": dict(cu_seqlens_q=query_start_loc_of([3, 1]),
                                 seqused_kv=torch.tensor([70000, 600], dtype=torch.int32), layout_q="TND",
                                 cmp_ratio=4, cmp_topk=512, soc_version="Ascend950PR"),
}


@pytest.mark.skipif(not HOST_BACKENDS, reason="no host backend (native, reference) is under test")
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("left,right", list(itertools.product(WINDOWS, WINDOWS)))
def test_windows_up_to_the_limit_agree_on_the_host_paths(shape, left, right):
    call = dict(SHAPES[shape], ori_mask_mode=4, ori_win_left=left, ori_win_right=right)
    results = {backend: _words(backend, **call) for backend in HOST_BACKENDS}
    first = next(iter(results.values()))
    assert first[0] == 1, "some core is enabled"
    for backend, words in results.items():
        assert_same(words, first, f"{backend} at windows ({left}, {right})")


@pytest.mark.skipif("triton" not in BACKENDS, reason="Triton is not under test")
@pytest.mark.parametrize("left,right", [(LIMIT, LIMIT), (LIMIT, 0), (0, LIMIT), (2**32, LIMIT - 1), (127, LIMIT)])
def test_windows_at_the_limit_agree_on_triton(left, right):
    call = dict(SHAPES["decode-and-prefill"], ori_mask_mode=4, ori_win_left=left, ori_win_right=right)
    assert_same(_words("triton", **call), _words("reference", **call), f"windows ({left}, {right})")


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


@pytest.mark.parametrize("backend_name", [b for b in BACKENDS if b != "triton"])
@pytest.mark.parametrize("batch_size,max_seqlen_q,max_seqlen_kv", [(2**24, 0, 4096), (2**24, 3, 0),
                                                                   (2**31 - 1, 0, 4096), (2**31 - 1, 1, 0)])
def test_batch_size_without_work_costs_no_memory(backend_name, batch_size, max_seqlen_q, max_seqlen_kv):
    """Without tensors every batch has max_seqlen_q / max_seqlen_kv: core 0 covers them all (no
    work: no query rows, or no KV), and nothing is kept in proportion to batch_size."""
    before = _rss_bytes()
    words = _words(backend_name, batch_size=batch_size, max_seqlen_q=max_seqlen_q, max_seqlen_kv=max_seqlen_kv,
                   layout_kv="TND", has_cmp_kv=False)
    assert words[:8].tolist() == [1, 0, 0, 0, batch_size, 0, 0, 0]
    assert words[8:].eq(0).all()
    assert _rss_bytes() - before < 64 << 20, "memory kept in proportion to batch_size"


@pytest.mark.parametrize("backend_name", [b for b in BACKENDS if b != "triton"])
def test_equal_batches_with_work_match_per_batch_lengths(backend_name):
    """Equal batches from batch_size (one table row natively) schedule as the same lengths given
    per batch, including the sums that pass 2^31 - 1 tiles or 2^56 in cost."""
    for batch_size, max_seqlen_q, max_seqlen_kv in ((37, 2, 900), (300, 1, 70000), (5, 0, 9)):
        constant = dict(batch_size=batch_size, max_seqlen_q=max_seqlen_q, max_seqlen_kv=max_seqlen_kv,
                        layout_kv="TND", has_cmp_kv=False)
        per_batch = dict(constant, seqused_q=torch.full((batch_size,), max_seqlen_q, dtype=torch.int32),
                         seqused_kv=torch.full((batch_size,), max_seqlen_kv, dtype=torch.int32))
        assert_same(_words(backend_name, **constant), _words(backend_name, **per_batch), f"B = {batch_size}")
    # 2^17 equal batches of 2^14 query tokens: more than 2^31 - 1 M tiles in all.
    with specops.backend("native"), pytest.raises(ValueError, match="max_seqlen_q"):
        specops.sas_metadata(64, 1, 512, batch_size=2**17, max_seqlen_q=2**14, max_seqlen_kv=1, layout_kv="TND",
                             **PLATFORM)


@pytest.mark.skipif(specops.EXTENSION.sanitize, reason="ASan reserves more address space than the limit allows")
def test_a_table_that_cannot_be_allocated_names_the_argument():
    """Under an address-space limit the per-batch table of 2^24 batches (512 MiB) cannot be
    allocated: a ValueError naming seqused_q, where B comes from (once std::bad_alloc)."""
    script = textwrap.dedent("""
        import resource, torch, specops
        seqused_q = torch.ones(2**24, dtype=torch.int32)
        seqused_kv = torch.ones(2**24, dtype=torch.int32)
        with open("/proc/self/statm") as statm:
            used = int(statm.read().split()[0]) * 4096
        resource.setrlimit(resource.RLIMIT_AS, (used + (256 << 20), resource.RLIM_INFINITY))
        try:
            with specops.backend("native"):
                specops.sas_metadata(64, 1, 512, seqused_q=seqused_q, seqused_kv=seqused_kv, num_cube_cores=24,
                                     num_vector_cores=48, soc_version="Ascend910B1")
        except ValueError as error:
            print("ValueError:", error)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert "ValueError: seqused_q describes 16777216 batches" in result.stdout, result.stdout + result.stderr


# ------------------------------------------------------------------ the peer's binding

EMPTY_KINDS = [(torch.float32, (0,)), (torch.float16, (0,)), (torch.bool, (0,)), (torch.int8, (0,)),
               (torch.int64, (0,)), (torch.int32, (0, 3)), (torch.float32, (2, 0))]
TENSORS = ("cu_seqlens_q", "cu_seqlens_ori_kv", "cu_seqlens_cmp_kv", "seqused_q", "seqused_kv")


def _base() -> dict:
    # BSND with the KV lengths from seqused_kv: each tensor left out is then "not provided" with
    # a defined fallback (max_seqlen_q, batch_size), so an empty one must give the same words.
    return dict(seqused_kv=torch.tensor([500, 9], dtype=torch.int32), batch_size=2, max_seqlen_q=1,
                max_seqlen_kv=500, ori_win_left=127, **PLATFORM)


@pytest.mark.parametrize("dtype,shape", EMPTY_KINDS, ids=[f"{str(d)[6:]}{list(s)}" for d, s in EMPTY_KINDS])
@pytest.mark.parametrize("name", [n for n in TENSORS if n != "seqused_kv"])
def test_an_empty_tensor_of_any_dtype_is_not_provided(backend, name, dtype, shape):
    expected = specops.sas_metadata(64, 1, 512, **_base())
    empty = torch.empty(shape, dtype=dtype)
    assert_same(specops.sas_metadata(64, 1, 512, **_base(), **{name: empty}), expected, name)


@pytest.mark.parametrize("dtype,shape", EMPTY_KINDS[:3], ids=[f"{str(d)[6:]}{list(s)}" for d, s in EMPTY_KINDS[:3]])
def test_the_schema_takes_empty_tensors_of_any_dtype(dtype, shape):
    """torch.ops.specops.sas_metadata itself (the native kernel), as a compiled graph calls it."""
    empty = torch.empty(shape, dtype=dtype)
    kv = torch.tensor([500, 9], dtype=torch.int32)
    out, expected = torch.zeros(1024, dtype=torch.int32), torch.zeros(1024, dtype=torch.int32)
    args = [64, 1, 512, None, None, None, None, kv, 2, 1, 500, 0, 0, 4, 4, 3, 127, 0, 0, 0, True, True, 24, 48, False]
    torch.ops.specops.sas_metadata(*args, expected)
    args[3:7] = [empty] * 4
    torch.ops.specops.sas_metadata(*args, out)
    assert_same(out, expected)


def test_an_empty_tensor_still_shares_the_outputs_device(backend):
    out = torch.full((1024,), UNTOUCHED, dtype=torch.int32)
    with pytest.raises(ValueError, match="seqused_q"):
        specops.sas_metadata(64, 1, 512, **_base(), seqused_q=torch.empty(0, device="meta"), out=out)
    assert out.eq(UNTOUCHED).all()


def test_a_non_empty_tensor_of_another_dtype_is_still_rejected(backend):
    out = torch.full((1024,), UNTOUCHED, dtype=torch.int32)
    with pytest.raises(ValueError, match="seqused_q"):
        specops.sas_metadata(64, 1, 512, **_base(), seqused_q=torch.ones(2), out=out)
    assert out.eq(UNTOUCHED).all()


def _dsa_builder_call(seq_lens: torch.Tensor, query_lens: list[int], device: str, cmp_ratio: int) -> dict:
    """The keywords vllm-ascend's DSA metadata builder passes (`_build_sas_metadata`): empty
    float32 placeholders for cu_seqlens_ori_kv and seqused_q (`torch.tensor([], device=...)`),
    the compressed offsets for ratios 4 and 128, and always device=."""
    placeholder = torch.tensor([], device=device)
    call = dict(num_heads_q=64, num_heads_kv=1, head_dim=512, cu_seqlens_q=query_start_loc_of(query_lens),
                cu_seqlens_ori_kv=placeholder, seqused_q=placeholder, seqused_kv=seq_lens,
                max_seqlen_q=max(query_lens), max_seqlen_kv=int(seq_lens.max()), batch_size=len(query_lens),
                ori_mask_mode=4, ori_win_left=127, ori_win_right=0, layout_q="TND", layout_kv="PA_ND",
                has_ori_kv=True, device=device, **PLATFORM)  # the platform's, which the AI-CPU op reads itself
    if cmp_ratio > 1:
        compressed = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(seq_lens.long() // cmp_ratio, 0)])
        call.update(has_cmp_kv=True, cmp_ratio=cmp_ratio, cmp_mask_mode=3, cu_seqlens_cmp_kv=compressed,
                    cmp_topk=512 if cmp_ratio == 4 else 0)
    else:
        call.update(cmp_ratio=1, has_cmp_kv=False)
    return call


@pytest.mark.parametrize("cmp_ratio", [1, 4, 128])
@pytest.mark.parametrize("query_lens", [[1, 1, 1], [2, 2], [9, 1, 40]], ids=["decode", "draft", "prefill"])
def test_the_dsa_builders_call_is_taken(backend, cmp_ratio, query_lens):
    seq_lens = torch.tensor([700 + 37 * i for i in range(len(query_lens))], dtype=torch.int32)
    call = _dsa_builder_call(seq_lens, query_lens, "cpu", cmp_ratio)
    out = specops.sas_metadata(**call)
    assert out.device == torch.device("cpu") and out.dtype == torch.int32
    without = {k: v for k, v in call.items() if k not in ("cu_seqlens_ori_kv", "seqused_q", "cu_seqlens_cmp_kv",
                                                          "device")}
    assert_same(out, specops.sas_metadata(**without))


def test_device_places_the_output_and_must_match_a_given_one(backend):
    kv = torch.tensor([10], dtype=torch.int32)
    assert specops.sas_metadata(64, 1, 512, seqused_kv=kv, batch_size=1, device="cpu",
                                **PLATFORM).device == torch.device("cpu")
    assert specops.sas_metadata(64, 1, 512, seqused_kv=kv, batch_size=1, **PLATFORM,
                                device=torch.device("cpu")).device == torch.device("cpu")
    if backend == "native":  # the Python backends run the reference or the launcher on any device
        meta = specops.sas_metadata(64, 1, 512, seqused_kv=kv.to("meta"), batch_size=1, device="meta", **PLATFORM)
        assert meta.device.type == "meta"
    out = torch.full((1024,), UNTOUCHED, dtype=torch.int32)
    for device in ("meta", "npu:0", "no-such-device", 0):
        with pytest.raises(ValueError, match=r"\bdevice\b"):
            specops.sas_metadata(64, 1, 512, seqused_kv=kv, batch_size=1, device=device, out=out, **PLATFORM)
        assert out.eq(UNTOUCHED).all()
