"""The sas family's host-planned route on a real device: what no CPU stand-in can show.

`check_host_planned_copies(device)` is for the device check (`make device-check`). On a CUDA GPU
or an Ascend NPU, with host length tensors and the output on `device`, it checks for each family
member (sas_metadata, kv_quant_sas_metadata, lightning_indexer_metadata) and for sgl-kernel-npu's
call form (`sparse_attn_sharedkv_metadata_host`):

1. the words: equal to the host op's on the same arguments;
2. no host wait: with the current stream busy (a long chain of matmuls enqueued first), `calls`
   host-planned calls return while that work is still running (an event recorded after it has
   not completed), so none of them waited for the stream;
3. no early reuse of the staging: those `calls` calls, each with other lengths and into an
   output of its own, back to back while the stream is busy, each leave their own words once the
   stream drains. Pinned staging released right after its non-blocking copy is handed out again
   only when the copy's event has completed (torch's caching host allocator): a block reused
   early would give some outputs a later call's words.

It returns a report (a dict of figures) and raises AssertionError on any failure. Nothing here
runs on the CPU machine (the tests stand a device in: tests/device_stand_in.py).
"""

from __future__ import annotations

import time

import torch

import specops

# Cores and SoC passed explicitly: the check is about the copy, not the device's counts.
_PLATFORM = dict(num_cube_cores=24, num_vector_cores=48)


def _calls(batch: int, seed: int) -> dict[str, tuple]:
    """One call of each member (the wrapper, its keyword arguments) on host int32 lengths of `batch`
    decode requests; `seed` varies the KV lengths, so that each call has words of its own."""
    generator = torch.Generator().manual_seed(seed)
    kv = torch.randint(1, 200_000, (batch,), generator=generator, dtype=torch.int32)
    starts = torch.arange(0, 2 * batch + 1, 2, dtype=torch.int32)  # two tokens a request
    return {
        "sas_metadata": (specops.sas_metadata, dict(
            num_heads_q=64, num_heads_kv=1, head_dim=512, cu_seqlens_q=starts, seqused_kv=kv, batch_size=batch,
            cmp_topk=512, cmp_ratio=4, ori_win_left=127, layout_q="TND", soc_version="Ascend910B1", **_PLATFORM)),
        "kv_quant_sas_metadata": (specops.kv_quant_sas_metadata, dict(
            num_heads_q=64, num_heads_kv=1, head_dim=512, kv_quant_mode=1, cu_seqlens_q=starts, seqused_kv=kv,
            batch_size=batch, cmp_topk=512, cmp_ratio=4, layout_q="TND", soc_version="Ascend950PR_9599",
            **_PLATFORM)),
        "lightning_indexer_metadata": (specops.lightning_indexer_metadata, dict(
            num_heads_q=64, num_heads_k=1, head_dim=128, query_quant_mode=0, key_quant_mode=0,
            actual_seq_lengths_query=starts[1:].clone(), actual_seq_lengths_key=kv, batch_size=batch,
            layout_query="TND", layout_key="PA_BSND", cmp_ratio=4, soc_version="Ascend910B1", **_PLATFORM)),
        "sparse_attn_sharedkv_metadata_host": (specops.sparse_attn_sharedkv_metadata_host, dict(
            num_heads_q=64, num_heads_kv=1, head_dim=512, layout_q="TND", layout_kv="PA_ND", cu_seqlens_q=starts,
            seqused_kv=kv, batch_size=batch, cmp_topk=512, cmp_ratio=4, soc_version="Ascend910B1", **_PLATFORM)),
    }


def _host_words(op, arguments: dict) -> torch.Tensor:
    if op is specops.sparse_attn_sharedkv_metadata_host:
        return op(**arguments, device="cpu")
    return op(**arguments, out=torch.empty(1024, dtype=torch.int32))


def _busy(device: torch.device, module, seconds: float) -> None:
    """Enqueue about `seconds` of work on the current stream of `device`."""
    a = torch.randn(4096, 4096, device=device)
    module.synchronize(device)
    start = time.perf_counter()
    for _ in range(4):
        a = torch.tanh(a @ a)
    module.synchronize(device)
    per_step = max((time.perf_counter() - start) / 4, 1e-5)
    for _ in range(max(4, int(seconds / per_step))):
        a = torch.tanh(a @ a)


def check_host_planned_copies(device: str | torch.device, *, calls: int = 64, batch: int = 64,
                              busy_seconds: float = 0.5) -> dict:
    """See the module docstring. `device`: "cuda", "cuda:1", "npu:0", ..."""
    if str(device).startswith("npu"):
        import torch_npu  # noqa: F401  (registers the npu device with torch)
    device = torch.device(device)
    module = torch.get_device_module(device)
    report: dict[str, object] = {"device": str(device)}
    for name, (op, arguments) in _calls(batch, seed=0).items():
        words = op(**arguments, device=device)
        assert words.device.type == device.type, f"{name}: words on {words.device}, not {device}"
        assert torch.equal(words.cpu(), _host_words(op, arguments)), f"{name}: the words differ from the host op's"

        per_call = [_calls(batch, seed=1 + i)[name][1] for i in range(calls)]
        expected = [_host_words(op, call) for call in per_call]
        outs = [torch.full((1024,), -1, dtype=torch.int32, device=device) for _ in range(calls)]
        module.synchronize(device)
        _busy(device, module, busy_seconds)
        busy_done = module.Event()
        busy_done.record()
        start = time.perf_counter()
        if op is specops.sparse_attn_sharedkv_metadata_host:
            results = [op(**call, device=device) for call in per_call]
        else:
            results = [op(**call, out=out) for call, out in zip(per_call, outs)]
        host_seconds = time.perf_counter() - start
        still_busy = not busy_done.query()
        module.synchronize(device)
        assert still_busy, (f"{name}: the stream had drained when {calls} host-planned calls returned "
                            f"({host_seconds * 1e3:.2f} ms): a call waited for the device, or the busy work was "
                            "too short")
        wrong = [i for i, (got, want) in enumerate(zip(results, expected)) if not torch.equal(got.cpu(), want)]
        assert not wrong, f"{name}: calls {wrong[:8]} ended with other words (staging reused before its copy ran?)"
        report[name] = {"calls": calls, "host_us_per_call": round(host_seconds / calls * 1e6, 2)}
    return report
