"""The variant descriptor of the sas family, and the layouts and decoders of its two other
members (the A5 kv-quant schedule and the lightning-indexer schedule).

sas_metadata, kv_quant_sas_metadata and lightning_indexer_metadata share one schedule (the
kernels' cost table and greedy pass: csrc/kernels/sas_metadata.h, reference/sas_metadata.py,
triton_kernels/sas_metadata.py). A `Variant` says what a member sets differently: its M and S2
tiles, its FA entry width and whether each planned core writes a pair of entries. The indexer also
costs its tiles its own way (csrc/kernels/lightning_indexer_metadata.h).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import torch

from specops.sas_layout import (
    ENTRY_WORDS,
    MAX_CUBE_CORES,
    FAEntry,
    FDEntry,
    TileRange,
    fa_offset,
    fd_offset,
    schedule_words,
)


@dataclasses.dataclass(frozen=True)
class Variant:
    m_tile_rows: int  # query rows per M tile (one token's G rows, or a fixed count)
    s2_tile: int  # KV tokens (keys) per S2 tile
    entry_words: int = 8  # 8, or 9 with s2_max_num at word 8
    paired: bool = False  # each planned core writes entries 2i and 2i+1, word 8 = most blocks of a core
    planned_cores: int = 0  # cores the greedy pass plans for


# kv_quant_sas_metadata (npu_kv_quant_sparse_attn_sharedkv_metadata)
KV_QUANT_ENTRY_WORDS = 9
KV_QUANT_FD_BASE = KV_QUANT_ENTRY_WORDS * MAX_CUBE_CORES  # 324
FA_S2_MAX_NUM = 8
KV_QUANT_PAIRED_HEADS = 128


@dataclasses.dataclass(frozen=True)
class KvQuantPlan:
    variant: Variant
    fa_entries: int  # FA entries the kernel writes
    fd_entries: int


def kv_quant_plan(num_heads_q: int, scfa: bool, ascend950: bool, num_cube_cores: int,
                  num_vector_cores: int) -> KvQuantPlan:
    """The kernel's tile rule: one-token M tiles, except 64 heads on A2/A3 without SCFA (two
    tokens); S2 tiles of 128 on Ascend950, 512 on A2/A3; with 128 heads a pair of entries per
    planned core, and on Ascend950 half the cube and vector cores planned."""
    paired = num_heads_q == KV_QUANT_PAIRED_HEADS
    two_tokens = not ascend950 and not paired and not scfa
    halved = ascend950 and paired
    planned = num_cube_cores // 2 if halved else num_cube_cores
    variant = Variant(m_tile_rows=num_heads_q * (2 if two_tokens else 1), s2_tile=128 if ascend950 else 512,
                      entry_words=KV_QUANT_ENTRY_WORDS, paired=paired, planned_cores=planned)
    return KvQuantPlan(variant, 2 * planned if paired else planned,
                       num_vector_cores // 2 if halved else num_vector_cores)


# lightning_indexer_metadata (npu_vllm_quant_lightning_indexer_metadata)
LI_M_TILE_ROWS = 256
LI_HEADS = 64
LAYOUT_QUERY_CODES = {"BSND": 0, "TND": 1}
LAYOUT_KEY_CODES = {"PA_BSND": 0, "TND": 1, "BSND": 2}
LAYOUT_QUERY_BSND, LAYOUT_QUERY_TND = 0, 1
LAYOUT_KEY_PA_BSND, LAYOUT_KEY_TND, LAYOUT_KEY_BSND = 0, 1, 2
SPARSE_MODE_ALL, SPARSE_MODE_CAUSAL = 0, 3
# A length source beside sas_layout.SOURCE_*: prefix sums without the leading 0 (the indexer's TND).
SOURCE_PREFIX_SUMS = 3
INT64_MAX = 2**63 - 1


def li_variant(ascend950: bool, num_cube_cores: int) -> Variant:
    return Variant(m_tile_rows=LI_M_TILE_ROWS, s2_tile=128 if ascend950 else 2048, planned_cores=num_cube_cores)


@dataclasses.dataclass(frozen=True)
class KvQuantFAEntry(FAEntry):
    """As sas_layout.FAEntry, plus s2_max_num: with 128 heads the most S2 blocks any core pair
    got (the consumer's idle cores sync that many times)."""

    s2_max_num: int


@dataclasses.dataclass(frozen=True)
class KvQuantSASSchedule:
    fa: tuple[KvQuantFAEntry, ...]
    fd: tuple[FDEntry, ...]


@dataclasses.dataclass(frozen=True)
class LIEntry(TileRange):
    """Cube core `core` runs the indexer's M tiles (256 query rows, 4 tokens) from
    (bn2_start, m_start) up to, not including, (bn2_end, m_end)."""

    first_ld_data_workspace_idx: int


@dataclasses.dataclass(frozen=True)
class LDEntry(FDEntry):
    """As sas_layout.FDEntry, for the indexer's vector cores."""

    LABEL: ClassVar[str] = "LD"


@dataclasses.dataclass(frozen=True)
class LightningIndexerSchedule:
    li: tuple[LIEntry, ...]
    ld: tuple[LDEntry, ...]


def decode_kv_quant_sas_metadata(t: torch.Tensor, num_cube_cores: int = 24,
                                 num_vector_cores: int = 48) -> KvQuantSASSchedule:
    """The first num_cube_cores FA entries (9 words each) and num_vector_cores FD entries (8
    words each, from word 324) of a kv_quant_sas_metadata buffer. With 128 heads entries 2i and
    2i+1 are core pair i's."""
    words = schedule_words(t, num_cube_cores, num_vector_cores)
    step = KV_QUANT_ENTRY_WORDS
    fa = tuple(KvQuantFAEntry(c, *words[step * c: step * c + step]) for c in range(num_cube_cores))
    fd = tuple(FDEntry(v, *words[KV_QUANT_FD_BASE + 8 * v: KV_QUANT_FD_BASE + 8 * v + 7])
               for v in range(num_vector_cores))
    return KvQuantSASSchedule(fa, fd)


def decode_lightning_indexer_metadata(t: torch.Tensor, num_cube_cores: int = 24,
                                      num_vector_cores: int = 48) -> LightningIndexerSchedule:
    """The LI entries of the first num_cube_cores cube cores (words 8c) and the LD entries of the
    first num_vector_cores vector cores (words 288 + 8v) of a lightning_indexer_metadata buffer
    (vllm-ascend's qli_metadata)."""
    words = schedule_words(t, num_cube_cores, num_vector_cores)
    li = tuple(LIEntry(c, *words[fa_offset(c): fa_offset(c) + ENTRY_WORDS]) for c in range(num_cube_cores))
    ld = tuple(LDEntry(v, *words[fd_offset(v): fd_offset(v) + ENTRY_WORDS - 1]) for v in range(num_vector_cores))
    return LightningIndexerSchedule(li, ld)
