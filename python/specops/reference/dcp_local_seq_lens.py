"""Reference for dcp_local_seq_lens: the KV length each DCP rank stores."""

from __future__ import annotations


def dcp_local_seq_lens(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    num_reqs = a.seq_lens.numel()
    seq_len = a.seq_lens.long().clamp(min=0)  # a negative length (rejected by the host op) stores nothing
    base = seq_len // a.cp_interleave // a.cp_world_size * a.cp_interleave
    tail = seq_len - base * a.cp_world_size - a.cp_rank * a.cp_interleave
    a.out[:num_reqs] = (base + tail.clamp(0, a.cp_interleave)).to(a.out.dtype)
    a.out[num_reqs:] = 0
