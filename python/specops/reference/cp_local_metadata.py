"""Reference for cp_local_metadata (docs/context_parallel.md), and for the host ints of CPLocalMetadata."""

from __future__ import annotations

import torch

from specops._cp import cp_token_split


def local_lens(
    query_start_loc: torch.Tensor, seq_lens: torch.Tensor | None, local_start: int, local_end: int, causal: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """int64 local query lengths [R] and local seq_lens [R] (None without seq_lens)."""
    qsl = query_start_loc.long()
    local_query_start = qsl[:-1].clamp(local_start, local_end)
    local_query_end = qsl[1:].clamp(local_start, local_end)
    local_query_lens = local_query_end - local_query_start
    if seq_lens is None:
        return local_query_lens, None
    seq = seq_lens.long()
    if causal:
        later = qsl[1:] - local_query_end  # tokens of the request that live on later ranks
        local_seq = torch.where((local_query_lens > 0) & (seq > 0), (seq - later).clamp(min=0), 0)
    else:
        local_seq = torch.where(local_query_lens > 0, seq, 0)
    return local_query_lens, local_seq


def cp_local_metadata(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    split = cp_token_split(a.num_input_tokens, a.cp_size, a.cp_rank)
    num_reqs = a.query_start_loc.numel() - 1
    local_query_lens, local_seq = local_lens(a.query_start_loc, a.seq_lens, split.local_start, split.local_end, a.causal)

    a.local_query_start_loc[0] = 0
    a.local_query_start_loc[1 : num_reqs + 1] = torch.cumsum(local_query_lens, 0).to(torch.int32)
    # Padded requests repeat the last start: they are empty.
    a.local_query_start_loc[num_reqs + 1 :] = a.local_query_start_loc[num_reqs]
    a.local_seq_lens[:num_reqs] = local_seq.to(torch.int32)
    a.local_seq_lens[num_reqs:] = 0
    query_lens = a.query_start_loc[1:] - a.query_start_loc[:-1]
    a.start_pos[:num_reqs] = (a.seq_lens - query_lens).to(torch.int32)
    a.start_pos[num_reqs:] = 0


def cp_local_max_lens(
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor | None,
    num_input_tokens: int,
    cp_size: int,
    cp_rank: int,
    causal: bool,
) -> list[int]:
    """[max(1, max local query len), max(1, max local seq_len)] from host tensors (the second
    is 1 without seq_lens)."""
    split = cp_token_split(num_input_tokens, cp_size, cp_rank)
    local_query_lens, local_seq = local_lens(query_start_loc, seq_lens, split.local_start, split.local_end, causal)
    max_query = int(local_query_lens.max()) if local_query_lens.numel() else 0
    max_seq = int(local_seq.max()) if local_seq is not None and local_seq.numel() else 0
    return [max(1, max_query), max(1, max_seq)]
