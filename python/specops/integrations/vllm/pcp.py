"""Model runner V2's prefill context parallelism (point "pcp"; docs/integrations.md).

`PCPManager.partition_batch` rewrites the global batch into this rank's DualChunkSwap rows. vLLM
plans the layout in a Python loop over every rank's chunks and copies five host arrays to the
device one by one (the gather index, the KV write mask, the restore index, the local query
layout, the local request mapping), then gathers the local ids and positions, derives the
seq_lens and pads with a dozen tensor ops. Here the layout is specops' pcp_partition (one C++
call; `PCPLayout.copy_to` moves its three indices in one copy), and the ids, positions and
seq_lens are one pcp_local_inputs launch. `prepare_attn` then maps the global batch's slots and
permutes them into the gathered stream (`_convert_to_gathered_slot_mappings`: an index_select and
a where over every group); pcp_gathered_slot_mappings does both in one launch.

`partition_batch` is a seam: it calls a host adapter (`plan_partition`: vLLM's host counts in,
the local batch's host fields and the host-to-device copies out; it is given host values only,
which the proof checks, so it cannot read a device value) and a device adapter (`local_inputs`,
watched for host syncs), and assembles vLLM's InputBatch from them. Where vLLM's host query
layout is not the prefix sum of the scheduled counts (its chunks would then be other slices), the
method is vLLM's own.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import numpy as np
import torch

import specops
from specops.integrations.vllm.mrv2 import point


def make_convert_to_gathered_slot_mappings(original):
    @point("pcp")
    @functools.wraps(original)
    def _convert_to_gathered_slot_mappings(self, global_batch_slot_mappings):
        gather, mask = self._padded_gather_idx, self._gathered_kv_write_mask
        num_expanded_tokens = gather.shape[0]
        if self._gathered_kv_slot_mappings is None:
            self._gathered_kv_slot_mappings = global_batch_slot_mappings.new_empty(
                global_batch_slot_mappings.shape[0], num_expanded_tokens)
        gathered = self._gathered_kv_slot_mappings[:, :num_expanded_tokens]
        specops.pcp_gathered_slot_mappings(global_batch_slot_mappings, gather, mask, out=gathered)
        return gathered
    return _convert_to_gathered_slot_mappings


class _HostPlan(NamedTuple):
    """This rank's batch as host planning leaves it: the partition's InputBatch fields that come
    from host counts, and what the host copied to the device."""

    fields: dict[str, Any]
    num_local_tokens: int  # N_k
    padded_num_tokens: int  # L
    num_reqs_after_padding: int
    indices: specops.PCPDeviceLayout  # the layout's three indices, on the device
    local_gather_idx: torch.Tensor  # device, [L]
    gathered_padding: np.ndarray  # host, [P L]: the gathered rows' padding (MoE routing)


def _fits(manager, num_scheduled_tokens, query_start_loc_np) -> bool:
    """The op's layout is vLLM's: the host query layout is the counts' prefix sum, and decodes
    are not sharded under DCP (vLLM's config never sets both; the op rejects the pair, a layout
    that writes no KV for some tokens, docs/pcp.md)."""
    num_reqs = len(num_scheduled_tokens)
    prefix = query_start_loc_np[:num_reqs + 1]
    return (len(prefix) == num_reqs + 1 and prefix[0] == 0
            and np.array_equal(prefix[1:], np.cumsum(num_scheduled_tokens))
            and not (manager.shard_decode_requests and manager.dcp_world_size > 1))


@point("pcp", host=True)
def plan_partition(manager, num_scheduled_tokens, num_computed_tokens, is_prefilling, req_ids, idx_mapping_np,
                   prefill_len_np, seq_lens_bound_np, global_num_tokens, has_prefill, padded_num_tokens,
                   padded_num_reqs) -> _HostPlan:
    """partition_batch's host work: the layout, this rank's host fields, the host-to-device copies
    (the three layout indices in one, the local query layout, the local request mapping), with
    vLLM's checks before any of them."""
    from vllm.utils.torch_utils import async_tensor_h2d
    from vllm.v1.worker.gpu.pcp_manager import PCPBatchMetadata

    layout = specops.pcp_partition(
        num_scheduled_tokens, num_computed_tokens, is_prefilling, manager.pcp_world_size,
        shard_decode_requests=manager.shard_decode_requests, dcp_world_size=manager.dcp_world_size,
        padded_num_tokens=padded_num_tokens)
    rank = layout.rank(manager.pcp_rank)
    num_local_reqs = rank.local_query_start_loc.numel() - 1
    num_tokens, padded = rank.num_tokens, layout.padded_num_tokens
    buffers = manager.input_buffers
    num_reqs_after_padding = num_local_reqs
    if padded_num_reqs is not None:
        if has_prefill:
            raise RuntimeError("PCP FULL graphs require a decode-only batch.")
        if padded_num_reqs < num_local_reqs:
            raise RuntimeError(f"PCP graph request capacity must cover the rank-local batch: {padded_num_reqs} < "
                               f"{num_local_reqs}.")
        num_reqs_after_padding = padded_num_reqs
    if num_reqs_after_padding > buffers.max_num_reqs:
        raise RuntimeError("PCP padded local request count exceeds the MRV2 input buffer size: "
                           f"{num_reqs_after_padding} > {buffers.max_num_reqs}.")
    if padded > buffers.max_num_tokens:
        raise RuntimeError(f"PCP local token count exceeds the MRV2 input buffer size: {padded} > "
                           f"{buffers.max_num_tokens}.")

    indices = layout.copy_to(manager.device)
    requests = rank.local_to_global_batch_req_idx.numpy().astype(np.intp)
    start_pos = rank.local_start_pos.numpy()
    scheduled = rank.local_num_scheduled_tokens.numpy()
    query_start_loc_np = np.full(buffers.max_num_reqs + 1, num_tokens, dtype=np.int32)
    query_start_loc_np[:num_local_reqs + 1] = rank.local_query_start_loc.numpy()
    async_tensor_h2d(query_start_loc_np, out=buffers.query_start_loc)
    idx_mapping_np = idx_mapping_np[requests]
    idx_mapping = async_tensor_h2d(idx_mapping_np, device=manager.device)
    gathered_padding = (np.arange(padded) >= np.array(layout.per_rank_num_tokens)[:, None]).ravel()

    local_prefill_len = prefill_len_np[requests]
    computed_prefill = np.minimum(start_pos, local_prefill_len)
    is_prefilling_np = np.zeros(num_reqs_after_padding, dtype=np.bool_)
    is_prefilling_np[:num_local_reqs] = computed_prefill < local_prefill_len
    local_has_prefill = bool(is_prefilling_np.any())
    seq_lens_bound = np.zeros(num_reqs_after_padding, dtype=np.int32)
    seq_lens_bound[:num_local_reqs] = rank.local_seq_lens_cpu_upper_bound.numpy()
    dcp_bound = None
    if manager.dcp_world_size > 1:
        # The largest DCP shard of each row's whole request (rank 0's), the same on every PCP rank.
        whole = torch.from_numpy((num_computed_tokens + num_scheduled_tokens)[requests].astype(np.int32))
        dcp_bound = torch.zeros(num_reqs_after_padding, dtype=torch.int32)
        specops.dcp_local_seq_lens(whole, manager.dcp_world_size, 0, manager.cp_interleave, out=dcp_bound)
    # One logit a local request, none when the rank has no token (its placeholder request).
    logits = num_tokens > 0
    fields = dict(
        req_ids=[req_ids[r] for r in requests], num_reqs=num_local_reqs, num_reqs_after_padding=num_reqs_after_padding,
        idx_mapping=idx_mapping, idx_mapping_np=idx_mapping_np, expanded_idx_mapping=idx_mapping,
        num_scheduled_tokens=scheduled, num_tokens=num_tokens, num_tokens_after_padding=padded, num_draft_tokens=0,
        num_draft_tokens_per_req=None, query_start_loc_np=query_start_loc_np[:num_reqs_after_padding + 1],
        seq_lens_cpu_upper_bound=torch.from_numpy(seq_lens_bound), dcp_local_seq_lens=None,
        pcp=PCPBatchMetadata(global_num_tokens=global_num_tokens, global_query_lens_np=num_scheduled_tokens[requests],
                             global_seq_lens_cpu_upper_bound_np=seq_lens_bound_np[requests],
                             dcp_local_seq_lens_cpu_upper_bound=dcp_bound),
        num_computed_tokens_np=start_pos, prefill_len_np=local_prefill_len,
        num_computed_prefill_tokens_np=computed_prefill, is_prefilling_np=is_prefilling_np, max_seq_len_np=None,
        has_prefill=local_has_prefill, decode_graph_eligible=not local_has_prefill, prefill_runs_as_decode_np=None,
        cu_num_logits_np=(np.arange(num_local_reqs + 1, dtype=np.int32) if logits
                          else np.zeros(num_local_reqs + 1, dtype=np.int32)),
        prompt_lens=None)
    return _HostPlan(fields, num_tokens, padded, num_reqs_after_padding, indices,
                     indices.padded_gather_idx[manager.pcp_rank * padded:(manager.pcp_rank + 1) * padded],
                     gathered_padding)


@point("pcp")
def local_inputs(global_input_ids, global_positions, plan: _HostPlan, buffers, expanded_local_pos) -> dict:
    """partition_batch's device work: this rank's ids, positions (0 past its tokens) and seq_lens
    in one launch, the padding mask and the logits layout."""
    num_tokens, padded = plan.num_local_tokens, plan.padded_num_tokens
    num_reqs = plan.fields["num_reqs"]
    query_start_loc = buffers.query_start_loc[:plan.num_reqs_after_padding + 1]
    specops.pcp_local_inputs(global_input_ids, global_positions, plan.local_gather_idx,
                             query_start_loc[:num_reqs + 1], num_local_tokens=num_tokens,
                             input_ids=buffers.input_ids[:padded], positions=buffers.positions[:padded],
                             seq_lens=buffers.seq_lens[:plan.num_reqs_after_padding])
    is_padding = buffers.is_padding[:padded]
    is_padding[:num_tokens].fill_(False)
    is_padding[num_tokens:].fill_(True)
    device = global_input_ids.device
    make = torch.arange if num_tokens > 0 else torch.zeros
    return dict(
        input_ids=buffers.input_ids[:padded], positions=buffers.positions[:padded], is_padding=is_padding,
        query_start_loc=query_start_loc, seq_lens=buffers.seq_lens[:plan.num_reqs_after_padding],
        logits_indices=query_start_loc[1:] - 1, expanded_local_pos=expanded_local_pos.new_zeros(num_reqs),
        cu_num_logits=make(num_reqs + 1, dtype=torch.int32, device=device))


def make_partition_batch(original):
    from vllm.config import CUDAGraphMode
    from vllm.utils.torch_utils import async_tensor_h2d

    @point("pcp", seam=True)
    @functools.wraps(original)
    def partition_batch(self, input_batch, batch_desc):
        if not _fits(self, input_batch.num_scheduled_tokens, input_batch.query_start_loc_np):
            return original(self, input_batch, batch_desc)
        self._global_batch = input_batch
        padded_num_tokens = padded_num_reqs = None
        if batch_desc.cg_mode != CUDAGraphMode.NONE:
            padded_num_tokens = batch_desc.num_tokens
            if batch_desc.cg_mode == CUDAGraphMode.FULL:
                padded_num_reqs = batch_desc.num_reqs
        plan = plan_partition(
            self, num_scheduled_tokens=input_batch.num_scheduled_tokens,
            num_computed_tokens=input_batch.num_computed_tokens_np, is_prefilling=input_batch.is_prefilling_np,
            req_ids=input_batch.req_ids, idx_mapping_np=input_batch.idx_mapping_np,
            prefill_len_np=input_batch.prefill_len_np,
            seq_lens_bound_np=input_batch.seq_lens_cpu_upper_bound.numpy(),  # a host tensor
            global_num_tokens=input_batch.num_tokens, has_prefill=input_batch.has_prefill,
            padded_num_tokens=padded_num_tokens, padded_num_reqs=padded_num_reqs)
        self._padded_gather_idx = plan.indices.padded_gather_idx
        self._gathered_kv_write_mask = plan.indices.gathered_kv_write_mask
        self._hidden_restore_idx = plan.indices.hidden_restore_idx
        self._local_gather_idx = plan.local_gather_idx
        device_fields = local_inputs(input_batch.input_ids, input_batch.positions, plan=plan,
                                     buffers=self.input_buffers, expanded_local_pos=input_batch.expanded_local_pos)
        if self._moe_is_padding is not None:
            # The MoE routes every rank's gathered rows: their padding mask, as vLLM copies it.
            device_fields["is_padding"] = async_tensor_h2d(
                plan.gathered_padding, out=self._moe_is_padding[:plan.gathered_padding.size])
        self._local_batch = dataclasses.replace(input_batch, **plan.fields, **device_fields)
        return self._local_batch
    return partition_batch
