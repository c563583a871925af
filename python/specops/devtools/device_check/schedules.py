"""Step hook: host-planned schedules (pinned staging + non-blocking copy, no host wait).

A runner holds host copies of the length tensors; the sas family's schedule is then planned on
the host and its 1024 words copied to the device with one asynchronous copy through pinned
memory, which the host need not wait for. The check calls `specops.sas_metadata` with CPU
length tensors and a device `out`, behind a kernel that keeps the stream busy
(`specops._fastpath.device_sleep`, torch.cuda's busy-wait kernel), and reports:

- whether the call is accepted (the op may require every tensor on out's device): status
  "unsupported" when it is not, which fails nothing;
- whether the host waited: the stream is still busy when the call returns (no wait), or idle
  (the call synchronized, or copied from pageable memory);
- whether `out` then holds the host op's words;
- `family`: `specops.devtools.host_planned.check_host_planned_copies` on the device: every
  member of the family and sgl-kernel-npu's call form, 64 calls each into outputs of their own
  behind a busy stream (no host wait, and the pinned staging not reused before its copy ran).

`SCHEDULE_CALL` is the function called by the first part.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

import specops
from specops._fastpath import device_sleep
from specops.devtools.device_check._common import Target, error_text, skipped
from specops.devtools.host_planned import check_host_planned_copies

I32 = torch.int32
SLEEP_CYCLES = 50_000_000  # tens of milliseconds of a busy stream on a current GPU

# The call under test: the arguments of a decode batch, lengths on the host, out on the device.
SCHEDULE_CALL: Callable[..., Any] = specops.sas_metadata


def _arguments(out: torch.Tensor) -> dict[str, Any]:
    """A decode batch of 4 requests (the op spec's valid call, one request longer)."""
    return dict(num_heads_q=64, num_heads_kv=1, head_dim=512, cu_seqlens_q=torch.tensor([0, 2, 3, 7, 8], dtype=I32),
                cu_seqlens_ori_kv=torch.tensor([0, 10, 310, 4406, 4483], dtype=I32),
                cu_seqlens_cmp_kv=torch.tensor([0, 2, 77, 1101, 1120], dtype=I32),
                seqused_q=torch.tensor([2, 1, 4, 1], dtype=I32),
                seqused_kv=torch.tensor([10, 300, 4096, 77], dtype=I32),
                batch_size=4, max_seqlen_q=4, max_seqlen_kv=4096, ori_topk=0, cmp_topk=512, cmp_ratio=4,
                ori_mask_mode=4, cmp_mask_mode=3, ori_win_left=127, ori_win_right=0, layout_q="TND",
                layout_kv="PA_ND", has_ori_kv=True, has_cmp_kv=True, num_cube_cores=4, num_vector_cores=8,
                soc_version="Ascend910B1", out=out)


def run(target: Target) -> dict[str, Any]:
    host_out = torch.zeros(1024, dtype=I32)
    try:
        SCHEDULE_CALL(**_arguments(host_out))
    except Exception as error:  # noqa: BLE001
        return {"status": "failed", "reason": f"the host op on host tensors raised {error_text(error)}"}
    if target.device is None:
        return skipped(f"{target.reason}: the copy to a device needs one", host_op="ok")
    out = torch.full((1024,), -1, dtype=I32, device=target.device)
    module = torch.cuda if target.kind == "cuda" else torch.npu
    stream = module.current_stream(target.device)
    result: dict[str, Any] = {"call": f"{SCHEDULE_CALL.__module__}.{SCHEDULE_CALL.__name__}"}
    try:
        SCHEDULE_CALL(**_arguments(out))  # a first call imports and compiles what it needs
        module.synchronize(target.device)
        if target.kind == "cuda":
            device_sleep(SLEEP_CYCLES)
        SCHEDULE_CALL(**_arguments(out))
        busy = not stream.query() if target.kind == "cuda" else None
        module.synchronize(target.device)
    except Exception as error:  # noqa: BLE001
        # Not an error of what exists: the path is not there yet (reported, not failed).
        return {**result, "status": "unsupported", "reason": f"CPU lengths with a device out: {error_text(error)}",
                "accepted": False}
    result["accepted"] = True
    result["host_waited"] = None if busy is None else not busy
    result["words_equal_host_op"] = bool(torch.equal(out.cpu(), host_out))
    problems = []
    if not result["words_equal_host_op"]:
        problems.append("out differs from the host op's words")
    if result["host_waited"]:
        problems.append("the call returned with the stream idle: the host waited for the device")
    try:
        result["family"] = check_host_planned_copies(target.device)
    except AssertionError as error:
        problems.append(f"check_host_planned_copies: {error}")
    result.update(status="failed" if problems else "ok", reason="; ".join(problems))
    return result


def run_isolated(target: Target) -> dict[str, Any]:
    try:
        return run(target)
    except Exception as error:  # noqa: BLE001
        return {"status": "failed", "reason": error_text(error)}
