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

from specops.compressor_layout import FORMAT_FLAT
from specops.sas_layout import INT32_MAX


def compressor_metadata(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    num_rows = a.compress_cos.shape[0]
    device = a.compress_cos.device
    starts = a.start_pos[:a.num_reqs_actual].long()
    lengths = a.cu_seqlens[1:a.num_reqs_actual + 1].long() - a.cu_seqlens[:a.num_reqs_actual].long()  # int64, as the docs
    counts = torch.where((starts >= 0) & (lengths > 0),
                         (starts + lengths) // a.compress_ratio - starts // a.compress_ratio, 0)
    counts = counts.clamp(min=0)
    first_row = torch.cumsum(counts, 0) - counts
    # Only the first num_rows rows are written: each request keeps what is left of them, so an
    # extreme length never materialises billions of row indices.
    kept = torch.minimum(counts, (num_rows - first_row).clamp(min=0))
    request = torch.repeat_interleave(torch.arange(a.num_reqs_actual, device=device), kept)
    row = torch.arange(request.numel(), device=device)
    position = starts[request] // a.compress_ratio + row - first_row[request]
    block_index = position // a.kv_block_size
    rope_row = position * a.compress_ratio
    width = a.kv_block_table.shape[1]
    inside = (block_index < width) & (rope_row < a.rope_cos.shape[0])
    block_id = a.kv_block_table[request, block_index.clamp(max=max(width - 1, 0))].long() if width else \
        torch.full_like(position, -1)
    offset = position % a.kv_block_size
    valid = inside & (block_id >= 0)
    if a.slot_mapping_format == FORMAT_FLAT:
        valid = valid & (block_id * a.kv_block_size + offset <= INT32_MAX)
    cos = torch.ones((num_rows, a.rope_cos.shape[1]), dtype=a.rope_cos.dtype, device=device)
    sin = torch.zeros_like(cos)
    gathered = rope_row.clamp(max=a.rope_cos.shape[0] - 1)
    cos[:row.numel()] = torch.where(valid[:, None], a.rope_cos[gathered], cos[:row.numel()])
    sin[:row.numel()] = torch.where(valid[:, None], a.rope_sin[gathered], sin[:row.numel()])
    if a.slot_mapping_format == FORMAT_FLAT:
        slots = torch.full((num_rows,), -1, dtype=torch.int64, device=device)
        slots[:row.numel()] = torch.where(valid, block_id * a.kv_block_size + offset, -1)
    else:
        slots = torch.tensor([-1, a.kv_block_size - 1], device=device).repeat(num_rows, 1)
        slots[:row.numel()] = torch.where(valid[:, None], torch.stack([block_id, offset], 1), slots[:row.numel()])
    a.compress_cos.copy_(cos.reshape(a.compress_cos.shape))
    a.compress_sin.copy_(sin.reshape(a.compress_sin.shape))
    a.slot_mapping.copy_(slots.to(torch.int32).reshape(a.slot_mapping.shape))
