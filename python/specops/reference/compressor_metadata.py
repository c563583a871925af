"""Reference for compressor_metadata: rows of completed compression groups in torch.

Request r (r < num_reqs_actual) with start = start_pos[r] and len = its query length completes
(start + len) // ratio - start // ratio groups (0 when start < 0 or len <= 0): its rows, packed in
request order. Row i of request r is compressed position p = start // ratio + i: slot
block_table[r][p // block_size] (with offset p % block_size), RoPE row p * ratio. A row past the
table, with a negative block id, past the RoPE table or (flat) past int32, and every row past the
valid ones, gets cos 1, sin 0 and slot -1, or (-1, block_size - 1).
"""

from __future__ import annotations

import torch

from specops.sas_layout import INT32_MAX

FORMAT_FLAT = 1
FORMAT_BLOCK_OFFSET = 2


def compressor_metadata(rope_cos: torch.Tensor, rope_sin: torch.Tensor, cu_seqlens: torch.Tensor,
                        start_pos: torch.Tensor, kv_block_table: torch.Tensor, kv_block_size: int,
                        slot_mapping_format: int, compress_ratio: int, num_reqs_actual: int,
                        compress_cos: torch.Tensor, compress_sin: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    num_rows = compress_cos.shape[0]
    device = compress_cos.device
    starts = start_pos[:num_reqs_actual].long()
    lengths = (cu_seqlens[1:num_reqs_actual + 1] - cu_seqlens[:num_reqs_actual]).long()
    counts = torch.where((starts >= 0) & (lengths > 0),
                         (starts + lengths) // compress_ratio - starts // compress_ratio, 0)
    counts = counts.clamp(min=0)
    first_row = torch.cumsum(counts, 0) - counts
    # Only the first num_rows rows are written: each request keeps what is left of them, so an
    # extreme length never materialises billions of row indices.
    kept = torch.minimum(counts, (num_rows - first_row).clamp(min=0))
    request = torch.repeat_interleave(torch.arange(num_reqs_actual, device=device), kept)
    row = torch.arange(request.numel(), device=device)
    position = starts[request] // compress_ratio + row - first_row[request]
    block_index = position // kv_block_size
    rope_row = position * compress_ratio
    width = kv_block_table.shape[1]
    inside = (block_index < width) & (rope_row < rope_cos.shape[0])
    block_id = kv_block_table[request, block_index.clamp(max=max(width - 1, 0))].long() if width else \
        torch.full_like(position, -1)
    offset = position % kv_block_size
    valid = inside & (block_id >= 0)
    if slot_mapping_format == FORMAT_FLAT:
        valid = valid & (block_id * kv_block_size + offset <= INT32_MAX)
    cos = torch.ones((num_rows, rope_cos.shape[1]), dtype=rope_cos.dtype, device=device)
    sin = torch.zeros_like(cos)
    gathered = rope_row.clamp(max=rope_cos.shape[0] - 1)
    cos[:row.numel()] = torch.where(valid[:, None], rope_cos[gathered], cos[:row.numel()])
    sin[:row.numel()] = torch.where(valid[:, None], rope_sin[gathered], sin[:row.numel()])
    if slot_mapping_format == FORMAT_FLAT:
        slots = torch.full((num_rows,), -1, dtype=torch.int64, device=device)
        slots[:row.numel()] = torch.where(valid, block_id * kv_block_size + offset, -1)
    else:
        slots = torch.tensor([-1, kv_block_size - 1], device=device).repeat(num_rows, 1)
        slots[:row.numel()] = torch.where(valid[:, None], torch.stack([block_id, offset], 1), slots[:row.numel()])
    compress_cos.copy_(cos.reshape(compress_cos.shape))
    compress_sin.copy_(sin.reshape(compress_sin.shape))
    slot_mapping.copy_(slots.to(torch.int32).reshape(slot_mapping.shape))
