"""Reference for dcp_local_seq_lens: the KV length each DCP rank stores."""

from __future__ import annotations

import torch


def dcp_local_seq_lens(
    seq_lens: torch.Tensor, cp_world_size: int, cp_rank: int, cp_interleave: int, out: torch.Tensor
) -> None:
    num_reqs = seq_lens.numel()
    seq_len = seq_lens.long().clamp(min=0)  # a negative length (rejected by the host op) stores nothing
    base = seq_len // cp_interleave // cp_world_size * cp_interleave
    tail = seq_len - base * cp_world_size - cp_rank * cp_interleave
    out[:num_reqs] = (base + tail.clamp(0, cp_interleave)).to(out.dtype)
    out[num_reqs:] = 0
