"""vLLM 0.33's PCPManager against specops' PCP ops on random batches: the layout
(`_build_batch_layout`: gather index, write mask, restore index, per-rank token counts), each
rank's local batch (`partition_batch`: request rows, query layout, start positions, seq_len
bounds, input ids, positions, seq_lens) and the gathered slot mappings
(`_convert_to_gathered_slot_mappings`), every specops backend; and the shard + DCP layout vLLM
gets wrong, which specops rejects."""

from __future__ import annotations

import random
import types

import numpy as np
import pytest
import torch
from conftest import BACKENDS
from vllm.config import CUDAGraphMode
from vllm.v1.worker.gpu.input_batch import InputBatch
from vllm.v1.worker.gpu.pcp_manager import PCPManager

import specops


def random_batch(rng: random.Random):
    R = rng.randint(1, 9)
    f = [rng.random() < 0.5 for _ in range(R)]
    q = [(rng.randint(1, 40) if rng.random() < 0.8 else rng.randint(1, 6)) if p else
         (rng.randint(1, 3) if rng.random() < 0.9 else 0) for p in f]
    c = [rng.randint(0, 200) for _ in range(R)]
    return np.array(q, dtype=np.int32), np.array(c, dtype=np.int32), np.array(f, dtype=np.bool_)


def manager(P, rank, shard, dcp, max_num_reqs=16, max_num_tokens=512):
    return PCPManager(pcp_world_size=P, pcp_rank=rank, device=torch.device("cpu"), shard_decode_requests=shard,
                      max_num_reqs=max_num_reqs, max_num_tokens=max_num_tokens, dcp_world_size=dcp)


def global_input_batch(q, c, f, idx_mapping, input_ids, positions):
    R, T = q.size, int(q.sum())
    qsl = np.zeros(R + 1, dtype=np.int32)
    qsl[1:] = np.cumsum(q)
    return InputBatch(
        req_ids=[f"req{r}" for r in range(R)], num_reqs=R, num_reqs_after_padding=R,
        idx_mapping=torch.from_numpy(idx_mapping), idx_mapping_np=idx_mapping,
        expanded_idx_mapping=torch.from_numpy(idx_mapping), expanded_local_pos=torch.zeros(R, dtype=torch.int32),
        num_scheduled_tokens=q, num_tokens=T, num_tokens_after_padding=T, num_draft_tokens=0,
        num_draft_tokens_per_req=None, query_start_loc=torch.from_numpy(qsl), query_start_loc_np=qsl,
        seq_lens=torch.from_numpy(c + q), seq_lens_cpu_upper_bound=torch.from_numpy(c + q), dcp_local_seq_lens=None,
        num_computed_tokens_np=c, prefill_len_np=np.where(f, c + q, c).astype(np.int32),
        num_computed_prefill_tokens_np=c, is_prefilling_np=f, has_prefill=bool(f.any()),
        decode_graph_eligible=not bool(f.any()), input_ids=input_ids, positions=positions,
        is_padding=torch.zeros(T, dtype=torch.bool), logits_indices=torch.from_numpy(qsl[1:] - 1),
        cu_num_logits=torch.arange(R + 1, dtype=torch.int32), cu_num_logits_np=np.arange(R + 1, dtype=np.int32),
        has_structured_output_reqs=False, prompt_lens=None,
    )


CONFIGS = [(P, shard, dcp) for P in (1, 2, 3, 4) for shard, dcp in ((True, 1), (False, 1), (False, 2))]


@pytest.mark.parametrize("P,shard,dcp", CONFIGS, ids=[f"P{P}-{'shard' if s else 'all'}-dcp{d}" for P, s, d in CONFIGS])
def test_layout_and_local_batches_agree_with_vllm(P, shard, dcp):
    rng = random.Random(P * 100 + shard * 10 + dcp)
    for trial in range(6):
        q, c, f = random_batch(rng)
        T = int(q.sum())
        qsl = np.concatenate([[0], np.cumsum(q)]).astype(np.int32)
        pad = rng.choice([None, 0, 3])
        theirs = manager(P, 0, shard, dcp)
        _, per_rank = theirs._build_batch_layout(q, c, f, qsl)
        padded = None if pad is None else max(per_rank) + pad
        if padded is not None:
            theirs._build_batch_layout(q, c, f, qsl, padded_num_tokens=padded)
        what = f"trial {trial}: q {q.tolist()} c {c.tolist()} f {f.tolist()} padded {padded}"
        for name in ("native", "reference"):
            with specops.backend(name):
                lay = specops.pcp_partition(q, c, f, P, shard_decode_requests=shard, dcp_world_size=dcp,
                                            padded_num_tokens=padded)
            assert lay.per_rank_num_tokens == per_rank, what
            assert lay.padded_gather_idx.tolist() == theirs._padded_gather_idx.tolist(), what
            assert lay.gathered_kv_write_mask.tolist() == theirs._gathered_kv_write_mask.tolist(), what
            assert lay.hidden_restore_idx.tolist() == theirs._hidden_restore_idx.tolist(), what
            assert lay.replicated.tolist() == theirs.replicated_requests(q, f).tolist(), what
        idx_mapping = np.array(rng.sample(range(16), q.size), dtype=np.int32)
        input_ids = torch.randint(0, 32000, (T,), dtype=torch.int32)
        positions = torch.from_numpy(np.concatenate([np.arange(ci, ci + qi) for ci, qi in zip(c, q)] or [[]])).long()
        desc = types.SimpleNamespace(cg_mode=CUDAGraphMode.NONE if padded is None else CUDAGraphMode.PIECEWISE,
                                     num_tokens=padded, num_reqs=None)
        for k in range(P):
            peer = manager(P, k, shard, dcp)
            local = peer.partition_batch(global_input_batch(q, c, f, idx_mapping, input_ids, positions), desc)
            rank = lay.rank(k)
            n = local.num_reqs
            assert rank.local_to_global_batch_req_idx.tolist() == \
                [int(np.nonzero(idx_mapping == row)[0][0]) for row in local.idx_mapping_np.tolist()], what
            assert rank.local_num_scheduled_tokens.tolist() == local.num_scheduled_tokens.tolist(), what
            assert rank.local_query_start_loc.tolist() == local.query_start_loc_np[:n + 1].tolist(), what
            assert rank.local_start_pos.tolist() == local.num_computed_tokens_np.tolist(), what
            assert rank.local_seq_lens_cpu_upper_bound.tolist() == local.seq_lens_cpu_upper_bound[:n].tolist(), what
            assert rank.num_tokens == local.num_tokens, what
            for backend in BACKENDS:
                with specops.backend(backend):
                    ours = specops.pcp_local_inputs(input_ids, positions, rank.local_gather_idx,
                                                    rank.local_query_start_loc, num_local_tokens=rank.num_tokens)
                L = rank.local_gather_idx.numel()
                assert ours.input_ids.tolist() == local.input_ids[:L].tolist(), (what, backend)
                assert ours.positions.tolist() == local.positions[:L].tolist(), (what, backend)
                assert ours.seq_lens.tolist() == local.seq_lens[:n].tolist(), (what, backend)
        slots = torch.stack([torch.randperm(4 * T + 8)[:T] for _ in range(3)]).long()
        their_slots = theirs._convert_to_gathered_slot_mappings(slots)
        for backend in BACKENDS:
            with specops.backend(backend):
                ours = specops.pcp_gathered_slot_mappings(slots, lay.padded_gather_idx, lay.gathered_kv_write_mask)
            for g in range(3):
                assert ours[g].tolist() == their_slots[g].tolist(), (what, backend, g)


def test_vllm_drops_kv_when_shard_meets_dcp_and_specops_rejects_it():
    """Deliberate difference (docs/conformance.md): vLLM's config never sets
    pcp_shard_decode_requests with DCP > 1, but built directly its layout gives the short prefill
    (replicated under DCP) one owner, rank 1, and then no rank writes its KV."""
    q, c, f = np.array([1, 2], dtype=np.int32), np.array([10, 0], dtype=np.int32), np.array([False, True])
    theirs = manager(2, 0, True, 2)
    theirs._build_batch_layout(q, c, f, np.array([0, 1, 3], dtype=np.int32))
    written = theirs._padded_gather_idx[theirs._gathered_kv_write_mask].tolist()
    assert 1 not in written and 2 not in written
    with pytest.raises(ValueError, match="shard_decode_requests"):
        specops.pcp_partition(q, c, f, 2, shard_decode_requests=True, dcp_world_size=2)
