"""The plugin's PCP point (specops.integrations.vllm.pcp) against vLLM 0.33's PCPManager methods it
replaces, on random batches: `partition_batch` (every field of the rank-local InputBatch, the
manager's layout indices, the whole input buffers, garbage in them before) and
`_convert_to_gathered_slot_mappings`, for PCP 1 to 4, sharded or replicated decodes, DCP 2, no /
piecewise / full graph padding and the MoE padding mask, every rank, every specops backend."""

from __future__ import annotations

import dataclasses
import random
import types

import numpy as np
import pytest
import torch
from conftest import BACKENDS
from test_vllm_pcp import global_input_batch, random_batch
from vllm.config import CUDAGraphMode
from vllm.v1.worker.gpu.pcp_manager import PCPManager

import specops
from specops.integrations.vllm import pcp

PARTITION = pcp.make_partition_batch(PCPManager.partition_batch)
CONVERT = pcp.make_convert_to_gathered_slot_mappings(PCPManager._convert_to_gathered_slot_mappings)
CONFIGS = [(P, shard, dcp, moe) for P in (1, 2, 3, 4) for shard, dcp in ((True, 1), (False, 1), (False, 2))
           for moe in (False, True)]


def _manager(P, rank, shard, dcp, moe):
    m = PCPManager(pcp_world_size=P, pcp_rank=rank, device=torch.device("cpu"), shard_decode_requests=shard,
                   max_num_reqs=16, max_num_tokens=512, dcp_world_size=dcp, moe_gathers_tokens=moe)
    generator = torch.Generator().manual_seed(P * 10 + rank)
    for buffer in vars(m.input_buffers).values():
        if isinstance(buffer, torch.Tensor) and buffer.dtype != torch.bool:
            buffer.copy_(torch.randint(-50, 50, buffer.shape, generator=generator))
    return m


def _same(a, b, what):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), what
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b), what
    elif dataclasses.is_dataclass(a) and not isinstance(a, type):
        for field in dataclasses.fields(a):
            _same(getattr(a, field.name), getattr(b, field.name), f"{what}.{field.name}")
    else:
        assert type(a) is type(b) and a == b, what


def _descriptors(rng, q, f, P, per_rank_max):
    yield types.SimpleNamespace(cg_mode=CUDAGraphMode.NONE, num_tokens=None, num_reqs=None)
    yield types.SimpleNamespace(cg_mode=CUDAGraphMode.PIECEWISE, num_tokens=per_rank_max + rng.randint(0, 5),
                                num_reqs=None)
    if not f.any():  # full graphs take decode-only batches
        yield types.SimpleNamespace(cg_mode=CUDAGraphMode.FULL, num_tokens=per_rank_max + rng.randint(0, 5),
                                    num_reqs=q.size + rng.randint(0, 3))


@pytest.mark.parametrize("P,shard,dcp,moe", CONFIGS,
                         ids=[f"P{P}-{'shard' if s else 'all'}-dcp{d}{'-moe' if m else ''}" for P, s, d, m in CONFIGS])
def test_partition_batch_and_gathered_slots_agree_with_vllm(P, shard, dcp, moe):
    rng = random.Random(P * 1000 + shard * 100 + dcp * 10 + moe)
    for trial in range(4):
        q, c, f = random_batch(rng)
        if trial == 0:
            f[:] = False  # a decode-only batch (full graphs)
            q = np.minimum(q, 2).astype(np.int32)
        if not q.any():
            continue
        T = int(q.sum())
        idx_mapping = np.array(rng.sample(range(16), q.size), dtype=np.int32)
        input_ids = torch.randint(0, 32000, (T + 5,), dtype=torch.int32)
        positions = torch.from_numpy(np.concatenate([np.arange(ci, ci + qi) for ci, qi in zip(c, q)] + [[7] * 5]))
        per_rank_max = specops.pcp_partition(q, c, f, P, shard_decode_requests=shard,
                                             dcp_world_size=dcp).padded_num_tokens
        slots = torch.stack([torch.randperm(4 * T + 8)[:T] for _ in range(3)]).long()
        for desc in _descriptors(rng, q, f, P, per_rank_max):
            for k in range(P):
                what = f"trial {trial} rank {k} {desc.cg_mode} q {q.tolist()} c {c.tolist()} f {f.tolist()}"
                theirs = _manager(P, k, shard, dcp, moe)
                their_batch = theirs.partition_batch(global_input_batch(q, c, f, idx_mapping, input_ids, positions),
                                                     desc)
                their_slots = theirs._convert_to_gathered_slot_mappings(slots)
                for backend in BACKENDS:
                    ours = _manager(P, k, shard, dcp, moe)
                    with specops.backend(backend):
                        our_batch = PARTITION(ours, global_input_batch(q, c, f, idx_mapping, input_ids, positions),
                                              desc)
                        our_slots = CONVERT(ours, slots)
                    for field in dataclasses.fields(their_batch):
                        _same(getattr(their_batch, field.name), getattr(our_batch, field.name),
                              f"{what} {backend}: InputBatch.{field.name}")
                    for name in ("_padded_gather_idx", "_gathered_kv_write_mask", "_hidden_restore_idx",
                                 "_local_gather_idx", "_moe_is_padding"):
                        _same(getattr(theirs, name), getattr(ours, name), f"{what} {backend}: {name}")
                    for name, buffer in vars(theirs.input_buffers).items():
                        if isinstance(buffer, torch.Tensor):
                            _same(buffer, getattr(ours.input_buffers, name), f"{what} {backend}: buffers.{name}")
                    _same(their_slots, our_slots, f"{what} {backend}: gathered slot mappings")


def test_partition_batch_raises_as_vllm_and_falls_back_where_the_layout_differs():
    q, c, f = np.array([3, 1], dtype=np.int32), np.array([0, 9], dtype=np.int32), np.array([True, False])
    batch = global_input_batch(q, c, f, np.array([4, 2], dtype=np.int32), torch.arange(4, dtype=torch.int32),
                               torch.arange(4))
    short = types.SimpleNamespace(cg_mode=CUDAGraphMode.PIECEWISE, num_tokens=1, num_reqs=None)
    with pytest.raises(ValueError):
        PCPManager.partition_batch(_manager(2, 0, True, 1, False), batch, short)
    with pytest.raises(ValueError, match="padded_num_tokens"):
        PARTITION(_manager(2, 0, True, 1, False), batch, short)
    full = types.SimpleNamespace(cg_mode=CUDAGraphMode.FULL, num_tokens=8, num_reqs=4)
    with pytest.raises(RuntimeError, match="decode-only"):
        PARTITION(_manager(2, 0, True, 1, False), batch, full)
    # Sharded decodes under DCP (vLLM's config never sets both; the op rejects them): vLLM's own.
    theirs, ours = _manager(2, 1, True, 2, False), _manager(2, 1, True, 2, False)
    none = types.SimpleNamespace(cg_mode=CUDAGraphMode.NONE, num_tokens=None, num_reqs=None)
    _same(PCPManager.partition_batch(theirs, batch, none).num_scheduled_tokens,
          PARTITION(ours, batch, none).num_scheduled_tokens, "shard + DCP")
