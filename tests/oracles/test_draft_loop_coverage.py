"""The A5 sparse-attention schedule (kv_quant_sas_metadata) and the lightning-indexer schedule
(lightning_indexer_metadata), planned from upper bounds of the KV lengths, cover the real work:
the consumer kernels' loops (schedule_consumers.py) run over the real lengths on the words, and
every real work unit runs exactly once; with 128 heads on Ascend950 every vector core makes the
same number of all-core syncs. On DraftLoopPlan's words (bounds up to 2K above, random
acceptance, requests crossing max_model_len, K in {1, 2, 3, 5}, CP 1 / 2) and on the ops' own
calls with any bound; plus the one case where the indexer's consumer misses work under a bound
(a batch of more than one M tile without compressed keys, outside the causal loop's
conditions), and the simulations failing on broken words (docs/sas_metadata.md, "Planning from
an upper bound")."""

from __future__ import annotations

import random

import pytest
import torch
from draft_loop_cases import allocate_rows, make_setup, target_step
from schedule_consumers import KV_QUANT_ENTRY, S2_MAX_NUM, A5Call, a5_walk, check_a5, check_indexer, indexer_walk

import specops

I32 = torch.int32
ASCEND950 = "Ascend950PR_9599"
A2A3 = "Ascend910B1"
C4 = 4  # the indexer's cmp_ratio


def a5_call_of(builder) -> A5Call:
    """The consumer-relevant arguments of a builder's A5 schedule (its causal step's)."""
    fixed = builder.sas_arguments[True]
    return A5Call(fixed.num_heads_q, fixed.num_cube_cores, fixed.ascend950, fixed.ori_win_left,
                  fixed.cmp_ratio if fixed.has_cmp_kv else 1, fixed.cmp_topk)


def lengths(meta) -> tuple[list[int], list[int]]:
    """The real (CP-local) query and KV lengths the consumer reads: the pass's device fields."""
    starts = meta.cp.local_query_start_loc.tolist()
    return [b - a for a, b in zip(starts, starts[1:])], meta.cp.local_seq_lens.tolist()


LOOP_CASES = [
    # (kinds, num_steps, cp_size, rule, sas_variant, num_heads_q, soc_version, num_cube_cores)
    (["swa", "c4", "c128"], 1, 1, "reset", "a5", 64, ASCEND950, 4),
    (["swa", "c4", "c128", "dspark"], 2, 2, "clamp", "a5", 128, ASCEND950, 4),
    (["c4", "swa4", "full"], 3, 1, "reset", "a5", 128, ASCEND950, 6),
    (["swa", "c4", "c128"], 5, 2, "reset", "a5", 64, ASCEND950, 2),
    (["swa", "c4"], 3, 2, "clamp", "a5", 128, A2A3, 3),
    (["c4", "swa", "c128"], 5, 1, "clamp", "a5", 64, A2A3, 2),
    (["c4", "swa", "c128"], 2, 2, "reset", "a2a3", 64, A2A3, 4),
    (["c4", "full"], 5, 2, "reset", "a2a3", 64, ASCEND950, 3),
]


@pytest.mark.parametrize("shared", [False, True], ids=["per-pass", "shared"])
@pytest.mark.parametrize("kinds,num_steps,cp_size,rule,variant,heads,soc,cores", LOOP_CASES)
def test_draft_loop_words_planned_from_bounds_cover_the_real_work(kinds, num_steps, cp_size, rule, variant, heads,
                                                                   soc, cores, shared):
    """shared: DraftLoopPlan(shared_schedule=True), passes 2..K on one schedule (pass K's)."""
    rng = random.Random(repr((kinds, num_steps, cp_size, rule, heads, soc)))  # str seeds are stable across runs
    max_model_len = rng.randint(num_steps + 3, 1200)
    setup = make_setup(kinds, num_steps=num_steps, max_model_len=max_model_len, cp_size=cp_size,
                       cp_rank=rng.randint(0, cp_size - 1), rule=rule, sas_variant=variant, num_heads_q=heads,
                       platform=dict(num_cube_cores=cores, num_vector_cores=2 * cores, soc_version=soc),
                       seed=rng.randint(0, 999), shared_schedule=shared)
    mappings, builders, plan = setup
    allocate_rows(mappings, rng, [1])
    a5 = [(i, a5_call_of(b)) for i, b in enumerate(builders) if variant == "a5" and b.sas_arguments is not None]
    c4 = [i for i, b in enumerate(builders) if b.group.compress_ratio == 4][:1]
    checked = above = 0
    for _ in range(6):
        step = target_step(mappings, rng, num_steps=num_steps, max_model_len=max_model_len)
        num_reqs = step["num_reqs"]
        bound = torch.tensor([s + rng.randint(0, 2 * num_steps) for s in step["seq_lens"]], dtype=I32)
        plan.plan_step(step["qsl"], bound, num_reqs, step["num_tokens"] + rng.randint(0, 3),
                       num_reqs_padded=min(num_reqs + rng.randint(0, 2), mappings.max_num_reqs))
        plan.advance_all(step["qsl"], step["token_indices"], step["rejected"], step["idx"])
        for k in range(1, num_steps + 1):
            metas = plan.metadata(k)
            above += any(b > s for b, s in zip(metas[0].seq_lens_cpu.tolist(), plan.seq_lens(k).tolist()))
            for i, call in a5:
                query_lens, kv_lens = lengths(metas[i])
                check_a5(metas[i].sas_metadata.tolist(), call, query_lens, kv_lens)
                checked += 1
            for i in c4:
                query_lens, kv_lens = lengths(metas[i])
                check_indexer(metas[i].qli_metadata.tolist(), query_lens, kv_lens, C4)
                checked += 1
    # Bounds above the real lengths were planned from, and every schedule was walked.
    assert above > 0 and checked == 6 * num_steps * (len(a5) + len(c4)) > 0


def test_a_shared_a5_schedule_keeps_the_syncs_matched_when_a_request_crosses_a_block():
    """Once: DraftLoopPlan(shared_schedule=True) copied pass 2's words into passes 3..K. 128
    heads on Ascend950 with 4 cube cores, one C128 group (window 24), decode requests with bounds
    [126, 20, 30, 40], K = 5: from pass 3 request 0 crosses the 128-token KV block, one core pair
    runs 3 blocks while word 8 (s2_max_num, what every vector core tops its all-core syncs up to)
    said 2, and the consumer's syncs differed between cores (a hung launch). The shared words are
    now planned for pass K's bound: every pass's walk matches, and each pass 2..K holds them."""
    num_steps, num_reqs = 5, 4
    plans = {}
    for shared in (False, True):
        mappings, builders, plan = make_setup(
            ["c128"], num_steps=num_steps, max_model_len=400, sas_variant="a5", num_heads_q=128,
            shared_schedule=shared, platform=dict(num_cube_cores=4, num_vector_cores=8, soc_version=ASCEND950))
        allocate_rows(mappings, random.Random(3), [1])
        qsl, seq_lens, rows = torch.arange(num_reqs + 1, dtype=I32), torch.tensor([126, 20, 30, 40], dtype=I32), \
            torch.arange(num_reqs, dtype=I32)
        mappings.positions[:num_reqs] = (seq_lens - 1).long()
        mappings.seq_lens.zero_()
        mappings.seq_lens[:num_reqs] = seq_lens
        mappings.refresh(rows, qsl, mappings.positions[:num_reqs], num_reqs_padded=num_reqs)
        plan.plan_step(qsl, seq_lens, num_reqs, num_reqs)
        plan.advance_all(qsl, rows, torch.zeros(num_reqs, dtype=I32), rows)
        plans[shared] = plan
    call = a5_call_of(builders[0])
    assert (call.num_heads_q, call.ascend950, call.num_cube_cores, call.win_left, call.cmp_ratio) == (128, True, 4, 23,
                                                                                                     128)
    plan = plans[True]
    words = [plan.metadata(k)[0].sas_metadata.tolist() for k in range(1, num_steps + 1)]
    blocks = []
    for k in range(1, num_steps + 1):
        query_lens, kv_lens = lengths(plan.metadata(k)[0])
        assert kv_lens == [126 + k - 1, 20 + k - 1, 30 + k - 1, 40 + k - 1]
        blocks.append(max(check_a5(words[k - 1], call, query_lens, kv_lens).blocks))
        if k >= 2:
            assert words[k - 1] == words[-1], k
    # Request 0 crosses the block from pass 3 on: 3 KV blocks there, the words' sync count 3.
    assert blocks[2:] == [3, 3, 3] and words[-1][S2_MAX_NUM] == 3
    # What the copy of pass 2's words gave (the per-pass plan's pass 2) on pass 3's lengths.
    stale = plans[False].metadata(2)[0].sas_metadata.tolist()
    walk = a5_walk(stale, call, *lengths(plan.metadata(3)[0]))
    assert stale[S2_MAX_NUM] == 2 and walk.syncs == [3, 3, 2, 2]
    with pytest.raises(AssertionError, match="syncs differ"):
        check_a5(stale, call, *lengths(plan.metadata(3)[0]))


# ------------------------------------------------------------------ the ops' own calls


def a5_words(call: A5Call, query_lens: list[int], kv_lens: list[int]) -> list[int]:
    """kv_quant_sas_metadata as the draft builders call it (TND queries, paged KV, band mask)."""
    starts = [0]
    for q in query_lens:
        starts.append(starts[-1] + q)
    return specops.kv_quant_sas_metadata(
        call.num_heads_q, 1, 512, 1, cu_seqlens_q=torch.tensor(starts, dtype=I32),
        seqused_kv=torch.tensor(kv_lens or [0], dtype=I32), batch_size=len(query_lens),
        max_seqlen_q=max(query_lens, default=0), max_seqlen_kv=max(kv_lens, default=0), cmp_topk=call.cmp_topk,
        cmp_ratio=max(call.cmp_ratio, C4), ori_win_left=call.win_left, layout_q="TND", layout_kv="PA_ND",
        has_cmp_kv=call.cmp_ratio > 1, num_cube_cores=call.num_cube_cores, num_vector_cores=2 * call.num_cube_cores,
        soc_version=ASCEND950 if call.ascend950 else A2A3).tolist()


def indexer_words(query_lens: list[int], kv_lens: list[int], cores: int, soc: str) -> list[int]:
    """lightning_indexer_metadata as the draft builders call it (TND query ends, paged keys)."""
    platform = dict(sparse_count=512, sparse_mode=3, cmp_ratio=C4, num_cube_cores=cores, num_vector_cores=2 * cores,
                    soc_version=soc)
    if not query_lens:
        return specops.lightning_indexer_metadata(64, 1, 128, 0, 0, batch_size=0, **platform).tolist()
    ends = torch.tensor(query_lens, dtype=I32).cumsum(0).to(I32)
    return specops.lightning_indexer_metadata(
        64, 1, 128, 0, 0, actual_seq_lengths_query=ends, actual_seq_lengths_key=torch.tensor(kv_lens, dtype=I32),
        batch_size=len(query_lens), max_seqlen_q=max(query_lens), max_seqlen_k=max(kv_lens), layout_query="TND",
        layout_key="PA_BSND", **platform).tolist()


def random_a5_call(rng: random.Random) -> A5Call:
    heads, ascend950 = rng.choice([64, 128]), rng.random() < 0.7
    cores = rng.choice([2, 4, 6, 8, 16] if ascend950 or heads == 64 else [1, 2, 3, 8, 18])
    ratio, topk = rng.choice([(1, 0), (4, 512), (4, 1024), (4, 0), (128, 0)])
    return A5Call(heads, cores, ascend950, rng.choice([0, 3, 23, 127, 255]), ratio, topk)


def random_batch(rng: random.Random, causal: bool) -> tuple[list[int], list[int], list[int]]:
    """(query lengths, real KV lengths, bounds >= them): short and long KV, bounds from equal to
    thousands above; causal: every batch's KV holds its query tokens (S2 >= S1)."""
    query_lens = [rng.randint(1 if causal else 0, 12) for _ in range(rng.randint(0, 7))]
    kv_lens = [rng.choice([rng.randint(0, 5), rng.randint(0, 40), rng.randint(0, 6000)]) for _ in query_lens]
    if causal:
        kv_lens = [max(s2, s1) for s1, s2 in zip(query_lens, kv_lens)]
    bounds = [s2 + rng.choice([0, rng.randint(0, 10), rng.randint(0, 5000)]) for s2 in kv_lens]
    return query_lens, kv_lens, bounds


def test_a5_words_from_any_bound_cover_the_real_work_and_keep_the_syncs_matched():
    rng = random.Random(42)
    differ = more_syncs = paired = 0
    for _ in range(400):
        call = random_a5_call(rng)
        query_lens, kv_lens, bounds = random_batch(rng, causal=rng.random() < 0.5)
        exact = a5_words(call, query_lens, kv_lens)
        planned = a5_words(call, query_lens, bounds)
        walk = check_a5(exact, call, query_lens, kv_lens)
        if call.syncs:
            # The consumer's KV blocks, counted here from its loop, are the metadata's: at exact
            # lengths word 8 is the most blocks a core pair runs (0 without work).
            assert exact[S2_MAX_NUM] == max(walk.blocks), (call, query_lens, kv_lens)
        walk = check_a5(planned, call, query_lens, kv_lens)
        if call.syncs:
            paired += 1
            more_syncs += planned[S2_MAX_NUM] > max(walk.blocks)  # idle syncs: time, not a hang
        differ += planned != exact
    assert differ > 100 and paired > 50 and more_syncs > 10, (differ, paired, more_syncs)


def test_indexer_words_from_any_bound_cover_the_real_work_of_causal_batches():
    rng = random.Random(43)
    differ = 0
    for _ in range(400):
        cores, soc = rng.choice([1, 2, 3, 4, 8, 24]), rng.choice([A2A3, ASCEND950])
        query_lens, kv_lens, bounds = random_batch(rng, causal=True)
        check_indexer(indexer_words(query_lens, kv_lens, cores, soc), query_lens, kv_lens, C4)
        planned = indexer_words(query_lens, bounds, cores, soc)
        check_indexer(planned, query_lens, kv_lens, C4)
        differ += planned != indexer_words(query_lens, kv_lens, cores, soc)
    assert differ > 100, differ


def test_indexer_words_from_a_bound_miss_work_after_a_split_batch_without_keys():
    # Outside the condition: batch 0 has 8 query tokens (2 M tiles) but 3 KV tokens, so no
    # compressed key (3 // 4 = 0). Planned from the bound 3000 it has work and is split between
    # the two cores; core 1 starts at (0, 1), the kernel passes over batch 0 without resetting
    # its start tile, and runs batch 1 from tile 1: batch 1's only tile never runs. Planned from
    # the real lengths, batch 0 costs nothing, is never split, and everything runs.
    query_lens, kv_lens, bounds = [8, 4], [3, 100], [3000, 100]
    planned = indexer_words(query_lens, bounds, 2, A2A3)
    assert planned[:16] == [1, 0, 0, 0, 0, 1, 0, 0, 1, 0, 1, 0, 2, 0, 0, 0]
    walk = indexer_walk(planned, query_lens, kv_lens, C4)
    assert not walk.errors and walk.runs[(1, 0)] == 0
    with pytest.raises(AssertionError, match="work never run"):
        check_indexer(planned, query_lens, kv_lens, C4)
    check_indexer(indexer_words(query_lens, kv_lens, 2, A2A3), query_lens, kv_lens, C4)
    # The same lengths in a causal batch (S2 >= S1) cannot lack keys: the bound's words cover.
    check_indexer(indexer_words([8, 4], [3000, 100], 2, A2A3), [8, 4], [8, 100], C4)


def test_indexer_words_miss_work_only_where_a_multi_tile_batch_has_no_key():
    # The condition is exact on random calls: with any KV lengths (S2 < S1 and 0 included) the
    # exact words always cover, and the bound's fail only where some batch of more than 4
    # tokens has fewer than 4 KV tokens.
    rng = random.Random(44)
    failures = 0
    for _ in range(400):
        query_lens, kv_lens, bounds = random_batch(rng, causal=False)
        hazard = any(s1 > 4 and s2 < C4 for s1, s2 in zip(query_lens, kv_lens))
        cores = rng.choice([2, 4, 8])
        check_indexer(indexer_words(query_lens, kv_lens, cores, A2A3), query_lens, kv_lens, C4)  # exact: always
        try:
            check_indexer(indexer_words(query_lens, bounds, cores, A2A3), query_lens, kv_lens, C4)
        except AssertionError:
            assert hazard, (query_lens, kv_lens, bounds)
            failures += 1
    assert failures > 5, failures


# ------------------------------------------------------------------ the simulations can fail


def test_the_simulations_fail_on_broken_words():
    call = A5Call(128, 4, True, 127, 4, 512)
    query_lens, kv_lens = [3, 1, 5, 2], [900, 4000, 60, 2500]
    words = a5_words(call, query_lens, kv_lens)
    check_a5(words, call, query_lens, kv_lens)
    assert words[0] == words[KV_QUANT_ENTRY * 2] == 1  # two pairs with work

    def broken(change):
        copy = list(words)
        change(copy)
        return copy

    def drop(w, e=2):  # pair 1's second core loses its span
        w[KV_QUANT_ENTRY * e] = 0

    def rewind(w, e=2):  # pair 1 starts a tile early: that tile runs twice
        w[KV_QUANT_ENTRY * e + 1:KV_QUANT_ENTRY * e + 3] = [0, 0]

    def fewer_syncs(w):  # word 8 below the most blocks a pair runs: the syncs no longer match
        for e in range(call.entries):
            w[KV_QUANT_ENTRY * e + S2_MAX_NUM] -= 1

    for change, message in ((drop, "work never run"), (rewind, "more than once"), (fewer_syncs, "syncs differ")):
        with pytest.raises(AssertionError, match=message):
            check_a5(broken(change), call, query_lens, kv_lens)
    # Pair 0 ends at (2, 1): words planned for more query tokens than batch 2 really has.
    assert words[4:6] == [2, 1]
    with pytest.raises(AssertionError, match="which has"):
        check_a5(words, call, [3, 1, 0, 2], kv_lens)

    query_lens, kv_lens = [9, 2, 13], [2000, 500, 7000]
    words = indexer_words(query_lens, kv_lens, 3, A2A3)
    check_indexer(words, query_lens, kv_lens, C4)
    assert words[8] == 1
    dropped, doubled = list(words), list(words)
    dropped[8] = 0
    doubled[9:11] = [0, 0]
    with pytest.raises(AssertionError, match="work never run"):
        check_indexer(dropped, query_lens, kv_lens, C4)
    with pytest.raises(AssertionError, match="more than once"):
        check_indexer(doubled, query_lens, kv_lens, C4)
    with pytest.raises(AssertionError, match="reads batch"):
        check_indexer(words, query_lens[:2], kv_lens[:2], C4)
