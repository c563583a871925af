"""pcp_local_inputs: this prefill-context-parallel rank's input ids, positions and seq_lens,
gathered from the global batch in one launch (docs/pcp.md)."""

from __future__ import annotations

from typing import NamedTuple

import torch

from specops.arguments import checked_size
from specops.ops._op import SpecOp
from specops.reference.pcp_local_inputs import pcp_local_inputs as _reference

__all__ = ["PCPLocalInputs", "pcp_local_inputs"]


class PCPLocalInputs(NamedTuple):
    input_ids: torch.Tensor
    positions: torch.Tensor
    seq_lens: torch.Tensor


_OP = SpecOp("pcp_local_inputs", _reference)


def pcp_local_inputs(
    global_input_ids: torch.Tensor,
    global_positions: torch.Tensor,
    local_gather_idx: torch.Tensor,
    local_query_start_loc: torch.Tensor,
    *,
    num_local_tokens: int,
    input_ids: torch.Tensor | None = None,
    positions: torch.Tensor | None = None,
    seq_lens: torch.Tensor | None = None,
    num_reqs_padded: int | None = None,
) -> PCPLocalInputs:
    """This rank's inputs from the global batch's, through its slice of the layout's gather index.

    For o < N = num_local_tokens: input_ids[o] = global_input_ids[local_gather_idx[o]] and
    positions[o] = global_positions[local_gather_idx[o]]; past N, to each buffer's end, 0.
    seq_lens[i] = positions[lqsl[i + 1] - 1] + 1 for a non-empty local request i < n, 0 for an
    empty one and in [n, num_reqs_padded) (default: the buffer's end).

    local_gather_idx: int64 [L] (PCPLayout.rank(k).local_gather_idx on the device);
    local_query_start_loc: int32 [n + 1]; num_local_tokens: the host int N_k (no device read).
    input_ids (the global ids' dtype) and positions (int64, or int32) are [>= L], allocated [L]
    (positions int64) when absent; seq_lens int32 [>= n], allocated [num_reqs_padded or n]. The
    native CPU op rejects a real token's gather index outside a global tensor and a
    local_query_start_loc that does not run from 0 to N; device kernels read 0 there.
    """
    if num_reqs_padded is not None:
        num_reqs_padded = checked_size(num_reqs_padded, "num_reqs_padded", 0)  # before it sizes seq_lens
    device = global_input_ids.device
    num_gather = local_gather_idx.numel()
    if input_ids is None:
        input_ids = torch.empty(num_gather, dtype=global_input_ids.dtype, device=device)
    if positions is None:
        positions = torch.empty(num_gather, dtype=torch.int64, device=device)
    num_reqs = max(local_query_start_loc.numel() - 1, 0)
    if seq_lens is None:
        seq_lens = torch.empty(num_reqs if num_reqs_padded is None else num_reqs_padded, dtype=torch.int32,
                               device=device)
    if num_reqs_padded is None:
        num_reqs_padded = seq_lens.numel()
    _OP.select()(global_input_ids, global_positions, local_gather_idx, local_query_start_loc, num_local_tokens,
        input_ids, positions, seq_lens, num_reqs_padded)
    return PCPLocalInputs(input_ids, positions, seq_lens)
