"""dcp_local_seq_lens: the KV length each decode-context-parallel rank stores of every request."""

from __future__ import annotations

import torch

from specops.ops._op import SpecOp
from specops.reference.dcp_local_seq_lens import dcp_local_seq_lens as _reference

__all__ = ["dcp_local_seq_lens"]

_OP = SpecOp("dcp_local_seq_lens", _reference)


def dcp_local_seq_lens(
    seq_lens: torch.Tensor,
    cp_world_size: int,
    cp_rank: int,
    cp_interleave: int,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The number of each request's KV tokens that DCP rank `cp_rank` stores.

    Tokens are dealt to the W = cp_world_size ranks in runs of I = cp_interleave: position p
    lives on rank (p // I) % W, as compute_slot_mapping places it. For a sequence of s tokens,
    `base = s // I // W * I` and `local = base + clamp(s - base * W - cp_rank * I, 0, I)`;
    summed over the ranks it is s. seq_lens: int32 or int64 [R] (host or device); out: the same
    dtype, [>= R] (allocated [R] when absent), entries past R are 0. The native CPU op rejects
    a negative seq_len; device kernels write 0 for it. Returns out.
    """
    if out is None:
        out = torch.empty_like(seq_lens)
    _OP.select()(seq_lens, cp_world_size, cp_rank, cp_interleave, out)
    return out
