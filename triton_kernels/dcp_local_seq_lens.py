"""Triton kernel for dcp_local_seq_lens: the KV length each DCP rank stores.

Request-tiled; `base = s // W // I * I` (= s // (W * I) * I), `local = base + clamp(s - base * W - rank * I, 0, I)`
in int64 (an int64 seq_len may be past int32). A negative length, which the host op rejects,
stores nothing: 0.
"""

from __future__ import annotations

import triton
import triton.language as tl

from specops.triton_kernels._launch import num_programs

BLOCK = 1024


@triton.jit
def local_seq_lens(seq_len, world_size, rank, interleave):
    """The int64 DCP-local length of each int64 seq_len (0 for a negative one); also
    prepare_spec_decode_inputs' DCP-local part."""
    seq_len = tl.maximum(seq_len, 0)
    # s // (W * I) as two floor divisions of a non-negative int64: no W * I product (which could
    # wrap int32), and no method on world_size, which Triton 3.2 makes a constexpr when it is 1.
    base = seq_len // world_size // interleave * interleave
    tail = seq_len - base * world_size - rank * interleave
    return base + tl.minimum(tl.maximum(tail, 0), interleave)


@triton.jit
def _dcp_local_seq_lens_kernel(
    seq_lens_ptr, out_ptr, num_reqs, num_out, world_size, rank, interleave,
    BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    num_progs = tl.num_programs(0)
    num_tiles = (num_out + BLOCK - 1) // BLOCK
    for tile in range(pid, num_tiles, num_progs):
        index = tile * BLOCK + tl.arange(0, BLOCK)
        seq_len = tl.load(seq_lens_ptr + index, mask=index < num_reqs, other=0).to(tl.int64)
        local = local_seq_lens(seq_len, world_size, rank, interleave)
        tl.store(out_ptr + index, local.to(out_ptr.dtype.element_ty), mask=index < num_out)


def dcp_local_seq_lens(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    num_out = a.out.numel()
    if num_out == 0:
        return
    grid = (num_programs(a.out.device, triton.cdiv(num_out, BLOCK)),)
    _dcp_local_seq_lens_kernel[grid](
        a.seq_lens, a.out, a.seq_lens.numel(), num_out, a.cp_world_size, a.cp_rank, a.cp_interleave, BLOCK=BLOCK,
    )
