"""The 1024-word layout of sas_metadata (docs/sas_metadata.md) and its decoder, `decode_sas_metadata`.

The constants here are shared by the wrapper, the reference, the Triton kernel and the tests;
csrc/kernels/sas_metadata.h holds the same values for the C++ body.
"""

from __future__ import annotations

import dataclasses

import torch

LAYOUT_VERSION = 0x5A5
NUM_WORDS = 1024
HEADER_WORDS = 16
ENTRY_WORDS = 8
M_TILE = 128
FIXED_COST = 1
MAX_CUBE_CORES = 36
MAX_VECTOR_CORES = 72
INT32_MAX = 2**31 - 1


def kv_tile_for(head_dim: int) -> int:
    """KV tokens per chunk: a chunk of K or V is about 32 K elements."""
    return max(64, 32768 // head_dim)


def fa_offset(core: int) -> int:
    return HEADER_WORDS + ENTRY_WORDS * core


def fd_offset(num_cube_cores: int, vector_core: int) -> int:
    return HEADER_WORDS + ENTRY_WORDS * (num_cube_cores + vector_core)


@dataclasses.dataclass(frozen=True)
class SASHeader:
    version: int
    num_cube_cores: int
    num_vector_cores: int
    m_tile: int
    kv_tile: int
    total_cost: int
    num_split_items: int
    workspace_slots: int

    def __str__(self) -> str:
        return (
            f"sas schedule v{self.version:#x}: {self.num_cube_cores} cube cores, {self.num_vector_cores} vector cores, "
            f"M_TILE {self.m_tile}, KV_TILE {self.kv_tile}, total cost {self.total_cost}, "
            f"{self.num_split_items} split items in {self.workspace_slots} workspace slots"
        )


@dataclasses.dataclass(frozen=True)
class FAEntry:
    """Cube core `core`: item (bn2_start, m_start) from KV kv_start through item (bn2_end,
    m_end) up to KV kv_end (exclusive), the items in between whole."""

    core: int
    enabled: bool
    bn2_start: int
    m_start: int
    kv_start: int
    bn2_end: int
    m_end: int
    kv_end: int
    ws_start: int  # workspace slot of the first split piece; -1: none

    def __str__(self) -> str:
        if not self.enabled:
            return f"FA {self.core:2d}: idle"
        slots = "-" if self.ws_start < 0 else str(self.ws_start)
        return (
            f"FA {self.core:2d}: (bn2 {self.bn2_start}, m {self.m_start}) kv {self.kv_start} .. "
            f"(bn2 {self.bn2_end}, m {self.m_end}) kv {self.kv_end}  ws {slots}"
        )


@dataclasses.dataclass(frozen=True)
class FDEntry:
    """Vector core `core`: merges workspace slots [ws_start, ws_start + ws_num) into rows
    [row_start, row_start + row_num) of item (bn2, m)."""

    core: int
    enabled: bool
    bn2: int
    m: int
    ws_start: int
    ws_num: int
    row_start: int
    row_num: int

    def __str__(self) -> str:
        if not self.enabled:
            return f"FD {self.core:2d}: idle"
        return (
            f"FD {self.core:2d}: (bn2 {self.bn2}, m {self.m}) slots [{self.ws_start}, {self.ws_start + self.ws_num}) "
            f"rows [{self.row_start}, {self.row_start + self.row_num})"
        )


@dataclasses.dataclass(frozen=True)
class SASSchedule:
    header: SASHeader
    fa: tuple[FAEntry, ...]  # one per cube core
    fd: tuple[FDEntry, ...]  # one per vector core

    def __str__(self) -> str:
        lines = [str(self.header)]
        lines += [str(entry) for entry in self.fa if entry.enabled]
        lines += [str(entry) for entry in self.fd if entry.enabled]
        idle_fa = sum(not entry.enabled for entry in self.fa)
        idle_fd = sum(not entry.enabled for entry in self.fd)
        lines.append(f"idle: {idle_fa} cube cores, {idle_fd} vector cores")
        return "\n".join(lines)


def decode_sas_metadata(t: torch.Tensor) -> SASSchedule:
    """The 1024 words of a sas_metadata buffer as Python objects (copies to the host)."""
    if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or t.numel() != NUM_WORDS:
        raise ValueError(f"t must be an int32 tensor of {NUM_WORDS} words, got {t!r:.80}")
    words = t.reshape(-1).cpu().tolist()
    if words[0] != LAYOUT_VERSION:
        raise ValueError(
            f"t[0] must be the layout version {LAYOUT_VERSION:#x}, got {words[0]:#x} "
            "(the device path writes an all-zero buffer for an invalid batch)"
        )
    header = SASHeader(*words[:8])
    if not 1 <= header.num_cube_cores <= MAX_CUBE_CORES or not 1 <= header.num_vector_cores <= MAX_VECTOR_CORES:
        raise ValueError(f"t holds impossible core counts: {header.num_cube_cores} cube, {header.num_vector_cores} vector")
    fa = []
    for core in range(header.num_cube_cores):
        w = words[fa_offset(core): fa_offset(core) + ENTRY_WORDS]
        fa.append(FAEntry(core, w[0] == 1, *w[1:8]))
    fd = []
    for core in range(header.num_vector_cores):
        w = words[fd_offset(header.num_cube_cores, core): fd_offset(header.num_cube_cores, core) + ENTRY_WORDS]
        fd.append(FDEntry(core, w[0] == 1, *w[1:7]))
    return SASSchedule(header, tuple(fa), tuple(fd))
