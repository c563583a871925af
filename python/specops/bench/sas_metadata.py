"""Benchmark of sas_metadata: the C++ op against the torch reference and against a
straightforward Python restatement of the AI-CPU kernel (what a runner would otherwise run on
the host), at decode batches of 1, 8, 64 and 256 requests with 1..8 query tokens each, for the
two compressed-KV layers of the model (SCFA: cmp_ratio 4, cmp_topk 512; CFA: cmp_ratio 128) and
its sliding-window layer. The empty aten call is the floor a dispatcher call costs.

Beside specops' own call form, sgl-kernel-npu's (`specops.sparse_attn_sharedkv_metadata_host`,
positional, a new output each call, as SGLang calls the port), and the staging's host cost: on a
device, the host-planned call into a device output (the host op, pinned staging and one
non-blocking copy) and the staged copy alone; on the CPU, where nothing can be pinned, the copy
of the 1024 words from a new host block, the floor of that cost."""

from __future__ import annotations

import torch

import specops
import time

from specops.bench._harness import Case, empty_op_call, goal_figure
from specops.ops.registry import OPS
from specops.reference.sas_metadata import sas_metadata as reference_sas_metadata
from specops.reference.sas_metadata_python import python_sas_metadata
from specops.sas_layout import LAYOUT_KV_CODES, LAYOUT_Q_CODES, NUM_WORDS, pinned_words

# A DeepSeek-V4-style layer on one rank: 64 query heads on one shared KV head of 512 dims, a
# 128-token window, 24 cube and 48 vector cores (Ascend 910B).
HEADS = dict(num_heads_q=64, num_heads_kv=1, head_dim=512)
LAYERS = {
    "SCFA": dict(cmp_ratio=4, cmp_topk=512, has_cmp_kv=True),
    "CFA": dict(cmp_ratio=128, cmp_topk=0, has_cmp_kv=True),
    "SWA": dict(cmp_ratio=1, cmp_topk=0, has_cmp_kv=False),
}
BATCHES = [1, 8, 64, 256]
QUICK_BATCHES = [8, 256]
MAX_QUERY_LEN = 8
MAX_CONTEXT = 128 * 1024
# The op's contract: the CFA layer at 256 decodes costs at most this many empty op calls.
GOAL_LAYER, GOAL_BATCH, GOAL_EMPTY_OPS = "CFA", 256, 3.0


def decode_batch(num_reqs: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cu_seqlens_q of num_reqs requests of 1..8 query tokens, and their KV lengths."""
    generator = torch.Generator().manual_seed(seed)
    query_lens = torch.randint(1, MAX_QUERY_LEN + 1, (num_reqs,), generator=generator)
    cu_seqlens_q = torch.zeros(num_reqs + 1, dtype=torch.int32)
    cu_seqlens_q[1:] = torch.cumsum(query_lens, 0)
    seqused_kv = (query_lens + torch.randint(0, MAX_CONTEXT, (num_reqs,), generator=generator)).to(torch.int32)
    return cu_seqlens_q, seqused_kv


# The platform arguments, given: the bench plans for that chip whatever runs it.
PLATFORM = dict(num_cube_cores=24, num_vector_cores=48, soc_version="Ascend910B1")


def _case(layer: str, num_reqs: int, device: torch.device) -> Case:
    cu_seqlens_q, seqused_kv = decode_batch(num_reqs, seed=num_reqs)
    kwargs = dict(**HEADS, cu_seqlens_q=cu_seqlens_q, seqused_kv=seqused_kv, batch_size=num_reqs,
                  max_seqlen_q=int((cu_seqlens_q[1:] - cu_seqlens_q[:-1]).max()), max_seqlen_kv=int(seqused_kv.max()),
                  ori_win_left=127, ori_win_right=0, layout_q="TND", layout_kv="PA_ND", **LAYERS[layer], **PLATFORM)
    out = torch.empty(NUM_WORDS, dtype=torch.int32)
    reference_out = torch.empty_like(out)
    # The reference over the op's argument record: the schema's arguments, the string ones as codes.
    record = OPS["sas_metadata"].arguments(
        **HEADS, cu_seqlens_q=cu_seqlens_q, cu_seqlens_ori_kv=None, cu_seqlens_cmp_kv=None, seqused_q=None,
        seqused_kv=seqused_kv, batch_size=kwargs["batch_size"], max_seqlen_q=kwargs["max_seqlen_q"],
        max_seqlen_kv=kwargs["max_seqlen_kv"], ori_topk=0, cmp_topk=kwargs["cmp_topk"], cmp_ratio=kwargs["cmp_ratio"],
        ori_mask_mode=4, cmp_mask_mode=3, ori_win_left=127, ori_win_right=0, layout_q=LAYOUT_Q_CODES["TND"],
        layout_kv=LAYOUT_KV_CODES["PA_ND"], has_ori_kv=True, has_cmp_kv=kwargs["has_cmp_kv"], num_cube_cores=24,
        num_vector_cores=48, ascend950=False, out=reference_out)

    def run_specops():
        specops.sas_metadata(**kwargs, out=out)

    # sgl-kernel-npu's form, positional as SGLang calls the port: its output on `device`.
    form_args = (HEADS["num_heads_q"], HEADS["num_heads_kv"], HEADS["head_dim"], "TND", "PA_ND", cu_seqlens_q,
                 seqused_kv, num_reqs, kwargs["cmp_topk"], kwargs["cmp_ratio"], 4, 3, 127, 0, True,
                 kwargs["has_cmp_kv"])

    def run_sgl_form():
        return specops.sparse_attn_sharedkv_metadata_host(*form_args, **PLATFORM, device=device)

    staging = _staging(device, kwargs)
    run_specops()
    if not torch.equal(run_sgl_form().cpu(), out):
        raise RuntimeError(f"sas_metadata {layer} R={num_reqs}: the sgl-kernel-npu call form disagrees")
    reference_sas_metadata(record)
    if out.tolist() != reference_out.tolist() or out.tolist() != python_sas_metadata(**kwargs):
        raise RuntimeError(f"sas_metadata {layer} R={num_reqs}: specops, the reference and the Python restatement "
                           "disagree")
    used = sum(out[0:8 * 24:8].tolist())
    goal = layer == GOAL_LAYER and num_reqs == GOAL_BATCH

    def derive(medians: dict[str, float]) -> dict[str, float]:
        return dict([goal_figure("specops/empty-op", medians["specops"] / medians["empty-op"], GOAL_EMPTY_OPS)])

    return Case(
        "sas_metadata", f"{layer} R={num_reqs} q=1-{MAX_QUERY_LEN}", num_reqs, int(cu_seqlens_q[-1]),
        {"specops": run_specops, "sgl-form": run_sgl_form, **staging,
         "reference": lambda: reference_sas_metadata(record), "python": lambda: python_sas_metadata(**kwargs),
         "empty-op": empty_op_call(torch.device("cpu"))},
        baselines=("reference", "python"), floors=("empty-op", "staged-copy"), extras={"cores": used}, family=layer,
        plotted=("specops", "reference", "python"), derive=derive if goal else None,
        # The goal case is a ratio of two host calls of a few µs: timed in the thread's CPU time.
        clock=time.thread_time if goal else time.perf_counter,
    )


def _staging(device: torch.device, kwargs: dict) -> dict:
    """The staging's implementations: on a device, "host-planned" (the call a runner makes: host
    lengths, a device output) and "staged-copy" (a pinned block and its non-blocking copy
    alone); on the CPU, "staged-copy" as a new host block copied into 1024 words (no pinning
    exists there: the floor of the cost)."""
    if device.type == "cpu":
        words = torch.empty(NUM_WORDS, dtype=torch.int32)
        return {"staged-copy": lambda: words.copy_(torch.empty(NUM_WORDS, dtype=torch.int32))}
    device_out = torch.empty(NUM_WORDS, dtype=torch.int32, device=device)
    return {"host-planned": lambda: specops.sas_metadata(**kwargs, out=device_out),
            "staged-copy": lambda: device_out.copy_(pinned_words(), non_blocking=True)}


def cases(device: torch.device, quick: bool) -> list[Case]:
    """Host tensors whatever `device` is: the schedule is computed on the host (the runner has
    host copies of the lengths) and, on a device, copied there."""
    return [_case(layer, num_reqs, device) for layer in LAYERS for num_reqs in (QUICK_BATCHES if quick else BATCHES)]
