"""build_tree_kernel_efficient: an EAGLE draft tree's links, positions and attention mask, from
the drafter's top-k selection (SGLang's and sgl-kernel-npu's op of that name)."""

from __future__ import annotations

from typing import NamedTuple

import torch

from specops.arguments import check_allocated_elements, checked_int, checked_size
from specops.ops._op import SpecOp
from specops.reference.build_tree_kernel_efficient import build_tree_kernel_efficient as _reference

__all__ = ["TreeMaskMode", "DraftTree", "build_tree_kernel_efficient"]


class TreeMaskMode:
    """SGLang's TreeMaskMode values."""

    FULL_MASK = 0
    QLEN_ONLY = 1
    QLEN_ONLY_BITPACKING = 2


class DraftTree(NamedTuple):
    tree_mask: torch.Tensor
    positions: torch.Tensor
    retrive_index: torch.Tensor
    retrive_next_token: torch.Tensor
    retrive_next_sibling: torch.Tensor


_OP = SpecOp("build_tree_kernel_efficient", _reference)

_PACKED = {1: torch.uint8, 2: torch.uint16, 4: torch.uint32}


def build_tree_kernel_efficient(
    parent_list: torch.Tensor,
    selected_index: torch.Tensor,
    verified_seq_len: torch.Tensor,
    tree_mask: torch.Tensor | None = None,
    positions: torch.Tensor | None = None,
    retrive_index: torch.Tensor | None = None,
    retrive_next_token: torch.Tensor | None = None,
    retrive_next_sibling: torch.Tensor | None = None,
    topk: int | None = None,
    depth: int | None = None,
    draft_token_num: int | None = None,
    tree_mask_mode: int = TreeMaskMode.FULL_MASK,
) -> DraftTree:
    """SGLang's build_tree_kernel_efficient, its arguments in its order (a drop-in; topk, depth
    and draft_token_num are required). B requests of n = draft_token_num tokens: node 0 the
    root, node i the candidate selected_index[b, i - 1] (int64 [B, n - 1], flat indices into the
    drafter's candidates, SGLang's organize_draft_results), its parent found through
    parent_list (int64 [B, topk * (depth - 1) + 1]). Writes, in place: retrive_index[b, i] =
    b * n + i, the child / next-sibling links (int64 [B, n], children ascending, -1 for none),
    positions (int64 [B * n]: verified_seq_len[b] + the node's depth) and each node's mask row
    (its ancestors-or-self and the root): FULL_MASK (0) rows of seq_len + n cells after every
    earlier request's, the prefix cells untouched (tree_mask given, bool or uint8); QLEN_ONLY
    (1) [B, n, n] cells; QLEN_ONLY_BITPACKING (2) one word a row, bit k node k (uint8 / uint16 /
    uint32 as n <= 8 / 16 / 32). An absent output is allocated (the mask only in modes 1 and 2).
    The host op rejects a selection outside the candidates, a negative length and a FULL_MASK
    past the mask; a parent that is not selected leaves its node unlinked (SGLang's warning).
    Returns the five outputs.
    """
    draft_token_num = checked_size(draft_token_num, "draft_token_num", 1)
    device = verified_seq_len.device if isinstance(verified_seq_len, torch.Tensor) else None
    batch = verified_seq_len.numel() if isinstance(verified_seq_len, torch.Tensor) else 0
    if tree_mask is None:
        tree_mask_mode = checked_int(tree_mask_mode, "tree_mask_mode")
        if tree_mask_mode == TreeMaskMode.FULL_MASK:
            raise ValueError("tree_mask must be given for tree_mask_mode 0 (FULL_MASK): its rows span each "
                             "request's verified_seq_len, which the wrapper does not read")
        if tree_mask_mode == TreeMaskMode.QLEN_ONLY_BITPACKING:
            words = _PACKED[4 if draft_token_num > 16 else 2 if draft_token_num > 8 else 1]
            check_allocated_elements(batch, draft_token_num, "draft_token_num", "B x draft_token_num words")
            tree_mask = torch.empty(batch * draft_token_num, dtype=words, device=device)
        else:
            check_allocated_elements(batch, draft_token_num * draft_token_num, "draft_token_num",
                                     "B x draft_token_num^2 cells")
            tree_mask = torch.empty(batch * draft_token_num * draft_token_num, dtype=torch.bool, device=device)
    check_allocated_elements(batch, draft_token_num, "draft_token_num", "B x draft_token_num")
    if positions is None:
        positions = torch.empty(batch * draft_token_num, dtype=torch.int64, device=device)
    if retrive_index is None:
        retrive_index = torch.empty(batch, draft_token_num, dtype=torch.int64, device=device)
    if retrive_next_token is None:
        retrive_next_token = torch.empty(batch, draft_token_num, dtype=torch.int64, device=device)
    if retrive_next_sibling is None:
        retrive_next_sibling = torch.empty(batch, draft_token_num, dtype=torch.int64, device=device)
    _OP.select()(parent_list, selected_index, verified_seq_len, tree_mask, positions, retrive_index,
                 retrive_next_token, retrive_next_sibling, topk, depth, draft_token_num, tree_mask_mode)
    return DraftTree(tree_mask, positions, retrive_index, retrive_next_token, retrive_next_sibling)
