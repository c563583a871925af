"""Invariant checker for sas_metadata words, and the golden vectors' location (tests/golden).

Written from the consumer's layout alone: it reads the raw 1024 words itself (not through
specops.decode_sas_metadata) and counts each batch's M tiles from the lengths, without any
implementation's cost arithmetic:
- FA entry c is at word 8c: enable, bn2/m/s2 start, bn2/m/s2 end, first FD workspace index;
  FD entry v at word 288 + 8v; nothing else is written.
- The enabled FA entries are the first ones; the first starts at (0, 0), each starts where the
  one before ended, the last ends at (B, 0), and every cursor moves forward. So each (batch,
  M tile) is covered by exactly one enabled core's [start, end).
- A core ends inside a batch with work, on one of its tiles, and covers at least one tile of a
  batch with work; no KV range is split (s2 fields and workspace indices 0), no FD entry is
  enabled, and disabled entries are all 0.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

NUM_WORDS = 1024
FD_BASE = 288
MAX_CUBE_CORES = 36

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent


GOLDEN_DIR = TESTS_DIR / "golden"


def golden_dir() -> tuple[Path | None, list[str]]:
    """The golden vectors' folder inside the repository (tests/golden), and where it looked.
    Nothing is read from outside the repository: a clone is all the suite needs."""
    return (GOLDEN_DIR if GOLDEN_DIR.is_dir() else None), [str(GOLDEN_DIR)]


@dataclasses.dataclass(frozen=True)
class Batches:
    """The M tiles of each batch, and whether it has work (M tiles and KV)."""

    tiles: list[int]
    work: list[bool]


def effective_lengths(call: dict) -> tuple[list[int], list[int]]:
    """Each batch's query and KV lengths as the kernel picks them from a wrapper call: seqused_q,
    else for TND the differences of cu_seqlens_q, else max_seqlen_q for batch_size batches; then
    seqused_kv, else for a TND KV layout the differences of cu_seqlens_ori_kv, else max_seqlen_kv."""
    def given(name):
        return call.get(name) is not None and call[name].numel() > 0

    if given("seqused_q"):
        query_lens = call["seqused_q"].tolist()
    elif call.get("layout_q", "BSND") == "TND":
        cu = call["cu_seqlens_q"].tolist()
        query_lens = [after - before for before, after in zip(cu, cu[1:])]
    else:
        query_lens = [call.get("max_seqlen_q", 0)] * call.get("batch_size", 0)
    batches = len(query_lens)
    if given("seqused_kv"):
        kv_lens = call["seqused_kv"].tolist()[:batches]
    elif call.get("layout_kv", "PA_ND") == "TND" and given("cu_seqlens_ori_kv"):
        cu = call["cu_seqlens_ori_kv"].tolist()[:batches + 1]
        kv_lens = [after - before for before, after in zip(cu, cu[1:])]
    else:
        kv_lens = [call.get("max_seqlen_kv", 0)] * batches
    return query_lens, kv_lens


def batches_of(query_lens: list[int], kv_lens: list[int], num_heads_q: int, ascend950: bool) -> Batches:
    """M tiles: query rows (tokens x heads) in tiles of one token's heads, or of 64 rows on
    Ascend950."""
    m_tile = 64 if ascend950 else num_heads_q
    tiles = [-(-q * num_heads_q // m_tile) for q in query_lens]
    return Batches(tiles, [t > 0 and kv > 0 for t, kv in zip(tiles, kv_lens)])


def check_call(words: list[int], call: dict) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """check_schedule for the words of a wrapper call."""
    query_lens, kv_lens = effective_lengths(call)
    batches = batches_of(query_lens, kv_lens, call["num_heads_q"], "Ascend950" in call.get("soc_version", ""))
    return check_schedule(words, batches, call.get("num_cube_cores", 24))


def check_schedule(words: list[int], batches: Batches, num_cube_cores: int) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Asserts the invariants above; returns each enabled core's (start, end) cursors."""
    assert len(words) == NUM_WORDS
    num_batches = len(batches.tiles)
    assert words[FD_BASE:] == [0] * (NUM_WORDS - FD_BASE), "an FD entry or a word past them is written"
    assert words[8 * num_cube_cores: FD_BASE] == [0] * (FD_BASE - 8 * num_cube_cores), "an FA entry past the cores"
    entries = [words[8 * c: 8 * c + 8] for c in range(num_cube_cores)]
    enabled = [entry[0] for entry in entries]
    assert set(enabled) <= {0, 1}, f"enable words {enabled}"
    used = sum(enabled)
    assert used >= 1 and enabled == [1] * used + [0] * (num_cube_cores - used), f"enabled cores {enabled}"
    for c, entry in enumerate(entries[used:], start=used):
        assert entry == [0] * 8, f"disabled FA {c} is not all 0: {entry}"

    spans = []
    cursor = (0, 0)
    for c, entry in enumerate(entries[:used]):
        _, bn2_start, m_start, s2_start, bn2_end, m_end, s2_end, workspace = entry
        assert (s2_start, s2_end, workspace) == (0, 0, 0), f"FA {c} splits a KV range: {entry}"
        start, end = (bn2_start, m_start), (bn2_end, m_end)
        assert start == cursor, f"FA {c} starts at {start}, the core before ended at {cursor}"
        assert end > start or not any(batches.work), f"FA {c} does not move forward: {start} .. {end}"
        if end != (num_batches, 0):
            assert 0 <= bn2_end < num_batches and batches.work[bn2_end] and 0 <= m_end < batches.tiles[bn2_end], (
                f"FA {c} ends at {end}, not on a tile of a batch with work")
        spans.append((start, end))
        cursor = end
    assert cursor == (num_batches, 0), f"the last core ends at {cursor}, not at ({num_batches}, 0)"

    if not any(batches.work):
        assert used == 1, f"{used} cores enabled for a batch without work"
        return spans
    # Every tile of a batch with work lies in exactly one core's [start, end), and every core
    # covers at least one of them.
    covered = [0] * used
    for b in range(num_batches):
        if not batches.work[b]:
            continue
        for m in range(batches.tiles[b]):
            owners = [c for c, (start, end) in enumerate(spans) if start <= (b, m) < end]
            assert len(owners) == 1, f"tile ({b}, {m}) is covered by cores {owners}"
            covered[owners[0]] += 1
    assert all(covered), f"a core covers no tile of a batch with work: tiles per core {covered}"
    return spans
