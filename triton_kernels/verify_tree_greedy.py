"""Triton kernel for verify_tree_greedy: the greedy walk of each request's draft tree.

A persistent grid over requests; each request's walk is sequential (a level's children are
tried in link order until one matches), one scalar step at a time, as SGLang's kernels walk.
Every walk is bounded: S - 1 levels, n tries a level (a longer sibling list has a cycle). A
link outside [0, n) ends its list, a flat index outside [0, B * n) is never accepted, a root
outside it accepts nothing; every load is at a clamped in-bounds offset.
"""

from __future__ import annotations

import triton
import triton.language as tl

from specops.triton_kernels._launch import num_programs

BLOCK = 16


@triton.jit
def _verify_tree_greedy_kernel(
    predicts_ptr, accept_ptr, count_ptr, candidates_ptr, index_ptr, next_ptr, sibling_ptr, target_ptr,
    batch, n, num_spec, BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    num_progs = tl.num_programs(0)
    flat_end = tl.cast(batch, tl.int64) * n
    for b in range(pid, batch, num_progs):
        row = tl.cast(b, tl.int64) * n
        accepted_row = accept_ptr + tl.cast(b, tl.int64) * num_spec
        last = tl.load(index_ptr + row)
        rooted = (last >= 0) & (last < flat_end)
        last = tl.where(rooted, last, 0)
        tl.store(accepted_row, tl.where(rooted, last, -1).to(tl.int32))
        num_accepted = tl.where(rooted, 0, 0)
        current = last * 0
        going = rooted
        for _ in range(1, num_spec):
            if going:
                current = tl.load(next_ptr + row + current)
                target = tl.load(target_ptr + last)
                searching = (current >= 0) & (current < n)
                found = current != current  # False, a bool scalar
                for _ in range(n):
                    if searching:
                        # Predicated stores, not a branch per outcome: one path through the loop.
                        draft = tl.load(index_ptr + row + current)
                        token = tl.load(candidates_ptr + row + current)
                        hit = (token == target) & (draft >= 0) & (draft < flat_end)
                        # Its negation spelled out: triton-ascend's interpreter cannot invert a bool scalar.
                        miss = (token != target) | (draft < 0) | (draft >= flat_end)
                        tl.store(predicts_ptr + last, target.to(tl.int32), mask=hit)
                        num_accepted += hit.to(tl.int32)
                        tl.store(accepted_row + num_accepted, draft.to(tl.int32), mask=hit)
                        last = tl.where(hit, draft, last)
                        current = tl.load(sibling_ptr + row + current, mask=miss, other=current)
                        found = found | hit
                        searching = miss & (current >= 0) & (current < n)
                going = found
        # The envelope past the path: -1, as SGLang's caller fills accept_index.
        for c0 in range(0, num_spec, BLOCK):
            c = c0 + tl.arange(0, BLOCK)
            past = (c > num_accepted) & (c < num_spec)
            tl.store(accepted_row + tl.where(past, c, 0), tl.full((BLOCK,), -1, tl.int32), mask=past)
        tl.store(count_ptr + b, num_accepted)
        if rooted:
            tl.store(predicts_ptr + last, tl.load(target_ptr + last).to(tl.int32))


def verify_tree_greedy(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    batch, n = a.candidates.shape
    if batch == 0:
        return
    grid = (num_programs(a.candidates.device, batch),)
    _verify_tree_greedy_kernel[grid](
        a.predicts, a.accept_index, a.accept_token_num, a.candidates, a.retrive_index, a.retrive_next_token,
        a.retrive_next_sibling, a.target_predict, batch, n, a.accept_index.size(1), BLOCK=BLOCK,
    )
