"""gather_block_tables: the batch-indexed block table of this step, in place (docs/persistent_buffers.md)."""

from __future__ import annotations

import torch

from specops.ops._op import SpecOp
from specops.reference.gather_block_tables import gather_block_tables as _reference

__all__ = ["gather_block_tables"]



_OP = SpecOp("gather_block_tables", _reference)


def gather_block_tables(
    src_block_table: torch.Tensor,
    num_blocks: torch.Tensor,
    idx_mapping: torch.Tensor,
    out: torch.Tensor,
    *,
    num_reqs_padded: int | None = None,
    num_computed_tokens: torch.Tensor | None = None,
    sliding_window_reach: int = 0,
    block_size: int | None = None,
) -> torch.Tensor:
    """Rewrites `out[:num_reqs_padded]` with the block-table rows of this step's batch.

    src_block_table: int32 [rows, cols], request-indexed; num_blocks: int32 [rows], the ids in
    use per source row; idx_mapping: int32 or int64 [R], the source row of each batch row (-1:
    none); out: int32 [>= num_reqs_padded, out_cols]. out[r, :n] = src[row, :n] with
    n = num_blocks[row], row = idx_mapping[r]; everything else in [0, num_reqs_padded) is
    NULL_BLOCK_ID. num_reqs_padded defaults to out.size(0). Returns out.

    Sliding-window masking: given num_computed_tokens (int32 [>= rows], request-indexed like
    src: the first position each request schedules this step) and sliding_window_reach > 0
    (the tokens below its first position that the group's attention still reads), the entries
    j < max(num_computed_tokens[row] - sliding_window_reach, 0) // block_size of each row are
    NULL_BLOCK_ID too: the window's manager may have freed and reused those blocks. block_size
    (the table's kernel block size) is required when sliding_window_reach > 0. The native CPU
    op rejects a negative count of a mapped row; device kernels mask nothing for it.
    """
    if num_reqs_padded is None:
        num_reqs_padded = out.size(0)
    block_size = 0 if block_size is None else block_size
    _OP.select()(src_block_table, num_blocks, idx_mapping, out, num_reqs_padded, num_computed_tokens,
        sliding_window_reach, block_size)
    return out
