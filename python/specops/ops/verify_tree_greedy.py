"""verify_tree_greedy: the greedy walk of each request's draft tree against the target model's
predictions (SGLang's op of that name), following the sibling links."""

from __future__ import annotations

from typing import NamedTuple

import torch

from specops.arguments import check_allocated_elements
from specops.ops._op import SpecOp
from specops.reference.verify_tree_greedy import verify_tree_greedy as _reference

__all__ = ["TreeVerification", "verify_tree_greedy"]


class TreeVerification(NamedTuple):
    predicts: torch.Tensor
    accept_index: torch.Tensor
    accept_token_num: torch.Tensor


_OP = SpecOp("verify_tree_greedy", _reference)


def verify_tree_greedy(
    predicts: torch.Tensor | None = None,
    accept_index: torch.Tensor | None = None,
    accept_token_num: torch.Tensor | None = None,
    candidates: torch.Tensor | None = None,
    retrive_index: torch.Tensor | None = None,
    retrive_next_token: torch.Tensor | None = None,
    retrive_next_sibling: torch.Tensor | None = None,
    target_predict: torch.Tensor | None = None,
) -> TreeVerification:
    """SGLang's verify_tree_greedy, its arguments in its order (a drop-in). candidates,
    retrive_index / _next_token / _next_sibling (build_tree_kernel_efficient's links) and
    target_predict: int64 [B, n]. Each request walks its tree from the root, at each level
    accepting the first child (in link order) whose candidate equals target_predict.flat[last],
    the target's prediction at the last accepted node; writes predicts.flat[last] = that
    prediction for each accepted node and, at the end, for the last one (int32 [B * n]; other
    entries untouched), accept_index[b, j] = the j-th accepted node's flat index b * n + i (int32
    [B, S], column 0 the root, -1 past the path; S - 1 tokens at most) and accept_token_num[b] =
    the accepted draft tokens (int32 [B], the root excluded). accept_index must be given (its S
    is the envelope); predicts and accept_token_num are allocated when absent. The host op
    rejects a flat index outside [0, B * n) and a link outside [-1, n); the device paths stop
    there (docs/tree_speculation.md). Returns the three outputs.
    """
    if accept_index is None:
        raise ValueError("accept_index must be given: its columns S are the accepted path's envelope "
                         "(1 + the draft steps)")
    if isinstance(candidates, torch.Tensor) and candidates.dim() == 2:
        batch, n = candidates.shape
        if predicts is None:
            check_allocated_elements(batch, n, "candidates", "B x n")
            predicts = torch.empty(batch * n, dtype=torch.int32, device=candidates.device)
        if accept_token_num is None:
            accept_token_num = torch.empty(batch, dtype=torch.int32, device=candidates.device)
    _OP.select()(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
                 retrive_next_sibling, target_predict)
    return TreeVerification(predicts, accept_index, accept_token_num)
