"""The 1024-word schedule that sas_metadata writes, as its consumer reads it, and its decoder.

The consumer is Ascend's shared-KV sparse-attention kernel (vllm-ascend `npu_sparse_attn_sharedkv`);
the words are those of its AI-CPU metadata kernel (`npu_sparse_attn_sharedkv_metadata`). The
layout and the field names are those of the consumer's header `sparse_attn_sharedkv_metadata.h`:
FA entry c (cube core c) at word 8c, FD entry v (vector core v) at word 288 + 8v, room for 36
cube and 72 vector cores. The constants here serve the wrapper, the reference, the Triton kernel
and the tests; csrc/kernels/sas_shape.h holds the same values for the C++ body.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import torch

NUM_WORDS = 1024
ENTRY_WORDS = 8  # FA_METADATA_SIZE = FD_METADATA_SIZE
MAX_CUBE_CORES = 36  # AIC_CORE_NUM: FA entries the layout has room for
MAX_VECTOR_CORES = 72  # AIV_CORE_NUM
FD_BASE = ENTRY_WORDS * MAX_CUBE_CORES  # 288: FD entries follow all 36 FA entries

# FA entry fields (FA_*_INDEX)
FA_CORE_ENABLE = 0
FA_BN2_START = 1
FA_M_START = 2
FA_S2_START = 3
FA_BN2_END = 4
FA_M_END = 5
FA_S2_END = 6
FA_FIRST_FD_DATA_WORKSPACE_IDX = 7

# FD entry fields (FD_*_INDEX); word 7 of an FD entry has no field.
FD_CORE_ENABLE = 0
FD_BN2_IDX = 1
FD_M_IDX = 2
FD_WORKSPACE_IDX = 3
FD_WORKSPACE_NUM = 4
FD_M_START = 5
FD_M_NUM = 6

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
# Windows wider than this are rejected: a wider window sees every KV token anyway, and near 2^63
# the kernel's int64 window sums overflow.
MAX_WINDOW = 2**62
# The most work a schedule may cost, in the kernel's cost units (a real batch costs below 2^40).
# An M tile costs below 2^52, so with this bound no partial sum of any implementation overflows
# int64, however the sums are grouped.
MAX_TOTAL_COST = 2**56

# The string arguments as the schema passes them (the wrapper resolves the strings).
LAYOUT_Q_CODES = {"BSND": 0, "TND": 1}
LAYOUT_KV_CODES = {"PA_ND": 0, "TND": 1, "BSND": 2}
LAYOUT_Q_BSND, LAYOUT_Q_TND = 0, 1
LAYOUT_KV_PA_ND, LAYOUT_KV_TND, LAYOUT_KV_BSND = 0, 1, 2
ASCEND950 = "Ascend950"

# ori_mask_mode values the kernel accepts: no mask, causal (right-down), band (sliding window).
MASK_NONE, MASK_CAUSAL, MASK_BAND = 0, 3, 4
CMP_RATIOS = (4, 128)
CMP_TOPKS = (0, 512, 1024)


def tile_sizes(num_heads_q: int, ascend950: bool) -> tuple[int, int]:
    """(M tile in query rows, S2 tile in KV tokens): 64 x 128 on Ascend950, else one token's
    heads (G = num_heads_q, as num_heads_kv is 1) x 512."""
    return (64, 128) if ascend950 else (num_heads_q, 512)


def fa_offset(core: int) -> int:
    return ENTRY_WORDS * core


def fd_offset(vector_core: int) -> int:
    return FD_BASE + ENTRY_WORDS * vector_core


@dataclasses.dataclass(frozen=True)
class TileRange:
    """Cube core `core` runs the M tiles from (bn2_start, m_start) up to, not including,
    (bn2_end, m_end), in (batch, M tile) order; s2 fields count S2 tiles of a split KV range.
    The first eight fields of the family's cube-core entries (FA, kv-quant FA, LI)."""

    core: int
    core_enable: int
    bn2_start: int
    m_start: int
    s2_start: int
    bn2_end: int
    m_end: int
    s2_end: int


@dataclasses.dataclass(frozen=True)
class FAEntry(TileRange):
    first_fd_data_workspace_idx: int

    def __str__(self) -> str:
        if not self.core_enable:
            return f"FA {self.core:2d}: disabled"
        return (f"FA {self.core:2d}: (bn2 {self.bn2_start}, m {self.m_start}, s2 {self.s2_start}) .. "
                f"(bn2 {self.bn2_end}, m {self.m_end}, s2 {self.s2_end})  fd workspace {self.first_fd_data_workspace_idx}")


@dataclasses.dataclass(frozen=True)
class FDEntry:
    """Vector core `core` merges workspace_num partial results, from workspace_idx on, into rows
    [m_start, m_start + m_num) of M tile m_idx of batch bn2_idx."""

    core: int
    core_enable: int
    bn2_idx: int
    m_idx: int
    workspace_idx: int
    workspace_num: int
    m_start: int
    m_num: int
    LABEL: ClassVar[str] = "FD"

    def __str__(self) -> str:
        if not self.core_enable:
            return f"{self.LABEL} {self.core:2d}: disabled"
        return (f"{self.LABEL} {self.core:2d}: (bn2 {self.bn2_idx}, m {self.m_idx}) workspace [{self.workspace_idx}, "
                f"{self.workspace_idx + self.workspace_num}) rows [{self.m_start}, {self.m_start + self.m_num})")


@dataclasses.dataclass(frozen=True)
class SASSchedule:
    fa: tuple[FAEntry, ...]  # one per cube core
    fd: tuple[FDEntry, ...]  # one per vector core

    def __str__(self) -> str:
        lines = [str(entry) for entry in self.fa if entry.core_enable]
        lines += [str(entry) for entry in self.fd if entry.core_enable]
        idle_fa = sum(not entry.core_enable for entry in self.fa)
        idle_fd = sum(not entry.core_enable for entry in self.fd)
        lines.append(f"disabled: {idle_fa} of {len(self.fa)} cube cores, {idle_fd} of {len(self.fd)} vector cores")
        return "\n".join(lines)


def schedule_words(t: torch.Tensor, num_cube_cores: int, num_vector_cores: int) -> list[int]:
    """The words of a family member's buffer (copied to the host), for a decoder of the entries
    of its first num_cube_cores cube cores and num_vector_cores vector cores."""
    if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or t.numel() != NUM_WORDS:
        raise ValueError(f"t must be an int32 tensor of {NUM_WORDS} words, got {t!r:.80}")
    if not 1 <= num_cube_cores <= MAX_CUBE_CORES:
        raise ValueError(f"num_cube_cores must be in [1, {MAX_CUBE_CORES}], got {num_cube_cores}")
    if not 1 <= num_vector_cores <= MAX_VECTOR_CORES:
        raise ValueError(f"num_vector_cores must be in [1, {MAX_VECTOR_CORES}], got {num_vector_cores}")
    return t.reshape(-1).cpu().tolist()


def decode_sas_metadata(t: torch.Tensor, num_cube_cores: int = 24, num_vector_cores: int = 48) -> SASSchedule:
    """The FA entries of the first num_cube_cores cube cores and the FD entries of the first
    num_vector_cores vector cores of a sas_metadata buffer (copied to the host)."""
    words = schedule_words(t, num_cube_cores, num_vector_cores)
    fa = tuple(FAEntry(c, *words[fa_offset(c): fa_offset(c) + ENTRY_WORDS]) for c in range(num_cube_cores))
    fd = tuple(FDEntry(v, *words[fd_offset(v): fd_offset(v) + ENTRY_WORDS - 1]) for v in range(num_vector_cores))
    return SASSchedule(fa, fd)


# Where each batch's query (S1) and KV (S2) length comes from, as the kernel picks it.
SOURCE_CONSTANT = 0  # an int argument, the same for every batch
SOURCE_PER_BATCH = 1  # tensor[b]
SOURCE_CUMULATIVE = 2  # tensor[b + 1] - tensor[b]


def is_given(t: torch.Tensor | None) -> bool:
    """The kernel's "provided": None and an empty tensor both mean not provided."""
    return t is not None and t.numel() > 0


@dataclasses.dataclass(frozen=True)
class LengthSource:
    kind: int  # SOURCE_*
    name: str  # the argument it comes from
    tensor: torch.Tensor | None = None
    constant: int = 0


def query_lengths(layout_q: int, cu_seqlens_q: torch.Tensor | None, seqused_q: torch.Tensor | None,
                  max_seqlen_q: int) -> LengthSource:
    """S1 of a batch: seqused_q[b] when given; else, for TND, the difference of cu_seqlens_q;
    else max_seqlen_q."""
    if is_given(seqused_q):
        return LengthSource(SOURCE_PER_BATCH, "seqused_q", seqused_q)
    if layout_q == LAYOUT_Q_TND and is_given(cu_seqlens_q):
        return LengthSource(SOURCE_CUMULATIVE, "cu_seqlens_q", cu_seqlens_q)
    return LengthSource(SOURCE_CONSTANT, "max_seqlen_q", constant=max_seqlen_q)


def kv_lengths(layout_kv: int, cu_seqlens_ori_kv: torch.Tensor | None, seqused_kv: torch.Tensor | None,
               max_seqlen_kv: int) -> LengthSource:
    """S2 of a batch: seqused_kv[b] when given; else, for a TND KV layout, the difference of
    cu_seqlens_ori_kv; else max_seqlen_kv."""
    if is_given(seqused_kv):
        return LengthSource(SOURCE_PER_BATCH, "seqused_kv", seqused_kv)
    if layout_kv == LAYOUT_KV_TND and is_given(cu_seqlens_ori_kv):
        return LengthSource(SOURCE_CUMULATIVE, "cu_seqlens_ori_kv", cu_seqlens_ori_kv)
    return LengthSource(SOURCE_CONSTANT, "max_seqlen_kv", constant=max_seqlen_kv)


def num_batches(layout_q: int, cu_seqlens_q: torch.Tensor | None, seqused_q: torch.Tensor | None,
                batch_size: int) -> int:
    """B as the kernel counts it: seqused_q's length when given; else, for TND,
    cu_seqlens_q's length - 1; else batch_size."""
    if is_given(seqused_q):
        return seqused_q.numel()
    if layout_q == LAYOUT_Q_TND and is_given(cu_seqlens_q):
        return cu_seqlens_q.numel() - 1
    return batch_size


def pinned_words() -> torch.Tensor:
    """1024 words of page-locked host memory from torch's caching host allocator (CUDA's, or
    torch_npu's through the accelerator hooks). That allocator records an event on the stream of
    every non-blocking copy out of the block and hands the block out again only once the event
    has completed, so a block released right after its copy is never overwritten while the
    copy is still pending. Pageable memory would make the copy synchronous (torch_npu drains the
    stream first)."""
    return torch.empty(NUM_WORDS, dtype=torch.int32, pin_memory=True)
