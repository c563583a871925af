"""The consumer kernels' loops over a schedule, simulated on the real lengths: the A5 sparse
attention (npu_kv_quant_sparse_attn_sharedkv, arch35) over kv_quant_sas_metadata's words and the
lightning indexer (npu_vllm_quant_lightning_indexer) over lightning_indexer_metadata's words.

Written from vllm-ascend's kernel sources at 182b75ea84 (the golden vectors' commit):
csrc/attention/kv_quant_sparse_attn_sharedkv/op_kernel/arch35/kv_quant_sparse_attn_sharedkv_scfa_kernel.h
(ProcessMainLoop) and ..._kvcache.h, csrc/attention/vllm_quant_lightning_indexer/op_kernel/arch32/
quant_lightning_indexer_kernel.h (ProcessMain; the arch35 one walks alike). It reads the raw
words and the lengths only, with no specops code:

- A5: enabled FA entry e (9 words) walks batches bn2_start.. up to bn2_end (bn2_end itself when
  m_end != 0), in each the M tiles from m_start (first batch) or 0 up to m_end (last batch, when
  not 0) or the batch's tile count from its real query length, and per tile reads the batch's
  real KV length (seqused_kv) and runs its KV blocks: none when the tile's tokens sit before the
  KV (S2 < S1) or S2 is 0. With 128 heads (split G) cores 2i and 2i + 1 run the same span on the
  head halves, and every vector core makes one all-core sync per KV block it runs, then tops up
  to word 8 (s2_max_num) of its entry; an idle core makes word 8's syncs. All-core syncs must
  match in number on every vector core, or the launch hangs.
- Indexer: enabled LI entry c (8 words) walks batches bn2_start.. (bn2_end included when m_end
  != 0, or when a one-batch span has m_start != m_end); a batch whose real compressed key count
  (S2 // cmp_ratio) or query length is 0 is passed over with `continue`, which leaves the start
  tile as it was (the kernel resets it only at the end of a batch it ran); others run their tiles
  of 4 tokens (256 rows of 64 heads) from the start tile up to m_end (last batch, when not 0) or
  their real tile count.
"""

from __future__ import annotations

import collections
import dataclasses

NUM_WORDS = 1024
KV_QUANT_ENTRY = 9
S2_MAX_NUM = 8
LI_ENTRY = 8
MAX_CUBE_CORES = 36
LI_TOKENS_PER_TILE = 4  # 256 query rows of the indexer's 64 heads
A5_KV_BLOCK = 128  # the arch35 consumer's s2BaseSize


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclasses.dataclass
class Walk:
    """What the consumer ran: how often each (batch, M tile[, head half]) ran, the KV blocks
    each entry ran and the all-core syncs its vector cores made (A5 split G), and what it read
    that is not there."""

    runs: collections.Counter
    blocks: list[int]
    syncs: list[int]
    errors: list[str]


# ---------------------------------------------------------------------------------------- A5


@dataclasses.dataclass(frozen=True)
class A5Call:
    """The fixed arguments of a kv_quant_sas_metadata call that the consumer's loop depends on
    (the metadata documentation's tile rule: 1 token per M tile, 2 with 64 heads on A2/A3
    without SCFA; 128 heads: a pair of entries per planned core, aic / 2 planned on Ascend950)."""

    num_heads_q: int
    num_cube_cores: int
    ascend950: bool
    win_left: int
    cmp_ratio: int = 1  # 1: no compressed KV (SWA); 4 with cmp_topk (SCFA); 128 (CFA)
    cmp_topk: int = 0

    @property
    def paired(self) -> bool:
        return self.num_heads_q == 128

    @property
    def tokens_per_tile(self) -> int:
        scfa = self.cmp_ratio > 1 and self.cmp_topk > 0
        return 2 if self.num_heads_q == 64 and not self.ascend950 and not scfa else 1

    @property
    def entries(self) -> int:
        if not self.paired:
            return self.num_cube_cores
        return 2 * (self.num_cube_cores // 2 if self.ascend950 else self.num_cube_cores)

    @property
    def halves(self) -> int:
        return 2 if self.paired else 1

    @property
    def syncs(self) -> bool:
        """The split-G syncs are modelled on the consumer's SoC only: the arch35 kernel runs
        on Ascend950, in KV blocks of 128 (the metadata counts 512 on A2/A3)."""
        return self.paired and self.ascend950


def a5_tile_blocks(call: A5Call, m: int, s1: int, s2: int) -> int:
    """The KV blocks the consumer runs for M tile m of a batch (ComputeS2LoopInfo with one-token
    tiles: the band [t + S2 - S1 - win_left, t + S2 - S1] in blocks of 128, then the compressed
    KV up to the band's end, at most cmp_topk with SCFA); 0 where it skips the tile."""
    assert call.tokens_per_tile == 1
    if s2 == 0 or m < s1 - s2:
        return 0
    pre = min(s1 - s2 + call.win_left, s1)
    start = min(max(m - pre, 0), s2)
    end = min(max(m + s2 - s1 + 1, 0), s2)
    blocks = ceil_div(end - start, A5_KV_BLOCK)
    if call.cmp_ratio > 1:
        compressed = end // call.cmp_ratio
        if call.cmp_topk > 0:
            compressed = min(compressed, call.cmp_topk)
        blocks += ceil_div(compressed, A5_KV_BLOCK)
    return blocks


def a5_work(call: A5Call, query_lens: list[int], kv_lens: list[int]) -> set[tuple[int, int, int]]:
    """Every (batch, M tile, head half) with real work: a tile with a token at a KV position."""
    units = set()
    tokens = call.tokens_per_tile
    for b, (s1, s2) in enumerate(zip(query_lens, kv_lens)):
        for m in range(ceil_div(s1, tokens)):
            last_token = min((m + 1) * tokens, s1) - 1
            if s2 > 0 and last_token + s2 - s1 >= 0:
                units.update((b, m, half) for half in range(call.halves))
    return units


def a5_walk(words: list[int], call: A5Call, query_lens: list[int], kv_lens: list[int]) -> Walk:
    """ProcessMainLoop of every entry the consumer's cube cores read, over the real lengths."""
    assert len(words) == NUM_WORDS
    runs: collections.Counter = collections.Counter()
    run_blocks, syncs, errors = [], [], []
    batches = len(query_lens)
    for e in range(call.entries):
        entry = words[KV_QUANT_ENTRY * e: KV_QUANT_ENTRY * e + KV_QUANT_ENTRY]
        most = entry[S2_MAX_NUM] if call.syncs else 0
        if entry[0] == 0:
            run_blocks.append(0)
            syncs.append(most)
            continue
        b_start, m_start, b_end, m_end = entry[1], entry[2], entry[4], entry[5]
        last_batch = b_end + (m_end != 0)
        blocks, first = 0, m_start
        half = e % 2 if call.paired else 0
        for b in range(b_start, last_batch):
            if b >= batches:
                errors.append(f"entry {e} reads batch {b} of {batches}")
                break
            s1, s2 = query_lens[b], kv_lens[b]
            tiles = ceil_div(s1, call.tokens_per_tile)
            end = m_end if b == last_batch - 1 and m_end != 0 else tiles
            if end > tiles:
                errors.append(f"entry {e} runs M tile {end - 1} of batch {b}, which has {tiles}")
            for m in range(min(first, end), end):
                runs[(b, m, half)] += 1
                if call.syncs:
                    blocks += a5_tile_blocks(call, m, s1, s2)
            first = 0
        # Each KV block run is one all-core sync; the rest up to word 8 after the loop.
        run_blocks.append(blocks)
        syncs.append(blocks + max(most - blocks, 0))
    return Walk(runs, run_blocks, syncs, errors)


def check_a5(words: list[int], call: A5Call, query_lens: list[int], kv_lens: list[int]) -> Walk:
    """Every real work unit runs exactly once, nothing runs twice or outside the batches, and
    (split G) every vector core makes the same number of all-core syncs."""
    walk = a5_walk(words, call, query_lens, kv_lens)
    assert not walk.errors, walk.errors
    twice = {unit: n for unit, n in walk.runs.items() if n != 1}
    assert not twice, ("run more than once", twice)
    missed = a5_work(call, query_lens, kv_lens) - set(walk.runs)
    assert not missed, ("work never run", sorted(missed))
    if call.syncs:
        assert len(set(walk.syncs)) == 1, ("all-core syncs differ between cores", walk.syncs)
    return walk


# ----------------------------------------------------------------------------------- indexer


def indexer_work(query_lens: list[int], kv_lens: list[int], cmp_ratio: int) -> set[tuple[int, int]]:
    """Every (batch, M tile) the indexer computes scores for: batches with query tokens and at
    least one compressed key (each of their tiles runs at least one key block)."""
    return {(b, m) for b, (s1, s2) in enumerate(zip(query_lens, kv_lens)) if s1 > 0 and s2 // cmp_ratio > 0
            for m in range(ceil_div(s1, LI_TOKENS_PER_TILE))}


def indexer_walk(words: list[int], query_lens: list[int], kv_lens: list[int], cmp_ratio: int) -> Walk:
    """ProcessMain of every enabled LI entry over the real lengths (the kernel's own skip of a
    batch without keys included)."""
    assert len(words) == NUM_WORDS
    runs: collections.Counter = collections.Counter()
    errors = []
    batches = len(query_lens)
    if words[0] == 0:  # core 0 off: the kernel only writes invalid indices
        return Walk(runs, [], [], ["core 0 is not enabled"] if batches else [])
    for c in range(MAX_CUBE_CORES):
        entry = words[LI_ENTRY * c: LI_ENTRY * c + LI_ENTRY]
        if entry[0] == 0:
            continue
        b_start, m_start, b_end, m_end = entry[1], entry[2], entry[4], entry[5]
        if b_start == b_end:
            b_end += m_start != m_end
        else:
            b_end += m_end != 0
        first = m_start
        for b in range(b_start, b_end):
            if b >= batches:
                errors.append(f"entry {c} reads batch {b} of {batches}")
                break
            s1, s2 = query_lens[b], kv_lens[b]
            if s2 // cmp_ratio == 0 or s1 == 0:
                continue  # as the kernel: `first` is not reset here
            tiles = ceil_div(s1, LI_TOKENS_PER_TILE)
            end = m_end if b + 1 == b_end and m_end != 0 else tiles
            if end > tiles:
                errors.append(f"entry {c} runs M tile {end - 1} of batch {b}, which has {tiles}")
            for m in range(first, end):
                runs[(b, m)] += 1
            first = 0
    return Walk(runs, [], [], errors)


def check_indexer(words: list[int], query_lens: list[int], kv_lens: list[int], cmp_ratio: int) -> Walk:
    """Every real work unit runs exactly once, and nothing else runs."""
    walk = indexer_walk(words, query_lens, kv_lens, cmp_ratio)
    assert not walk.errors, walk.errors
    work = indexer_work(query_lens, kv_lens, cmp_ratio)
    twice = {unit: n for unit, n in walk.runs.items() if n != 1}
    assert not twice, ("run more than once", twice)
    assert set(walk.runs) <= work, ("runs outside the work", sorted(set(walk.runs) - work))
    missed = work - set(walk.runs)
    assert not missed, ("work never run", sorted(missed))
    return walk
