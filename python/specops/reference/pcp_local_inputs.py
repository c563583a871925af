"""Reference for pcp_local_inputs: this PCP rank's input ids, positions and seq_lens."""

from __future__ import annotations

import torch


def _gathered(values: torch.Tensor, gather: torch.Tensor, offsets: torch.Tensor, num_local: int) -> torch.Tensor:
    """values[gather[o]] for each offset o in [0, num_local) whose index is inside values, else 0."""
    in_local = (offsets >= 0) & (offsets < num_local)
    index = torch.zeros_like(offsets)
    index[in_local] = gather[offsets[in_local]]
    valid = in_local & (index >= 0) & (index < values.numel())
    result = torch.zeros(offsets.shape, dtype=values.dtype)
    result[valid] = values[index[valid]]
    return result


def pcp_local_inputs(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    device = a.input_ids.device
    gather = a.local_gather_idx.cpu()
    ids_offsets = torch.arange(a.input_ids.numel())
    pos_offsets = torch.arange(a.positions.numel())
    # Computed in full before the first write.
    ids = _gathered(a.global_input_ids.cpu(), gather, ids_offsets, a.num_local_tokens)
    pos = _gathered(a.global_positions.cpu(), gather, pos_offsets, a.num_local_tokens)
    lqsl = a.local_query_start_loc.cpu().long()
    starts, ends = lqsl[:-1], lqsl[1:]
    last = _gathered(a.global_positions.cpu(), gather, ends - 1, a.num_local_tokens).long()
    lens = torch.where(ends > starts, last + 1, 0).to(torch.int32)
    a.input_ids.copy_(ids.to(device))
    a.positions.copy_(pos.to(a.positions.dtype).to(device))
    a.seq_lens[: lens.numel()] = lens.to(device)
    a.seq_lens[lens.numel():a.num_reqs_padded] = 0
