"""DraftLoopPlan: the whole draft loop of a chain-drafting step (MTP, Eagle: one draft per pass)
with one host plan and one device launch, two with compressed groups (docs/draft_loop.md).

In chain drafting the metadata of passes 2..K depends only on the state after the target step
(each request's position and seq_len after rejection, the tables, max_model_len), never on a
draft token: p_k = p_1 + k - 1 and seq_k by the reset or clamp rule. So a step is

    plan.plan_step(query_start_loc_cpu, seq_lens_cpu_upper_bound, num_reqs, num_input_tokens)
        host only: every pass's host lengths and schedules, one non-blocking copy (none on CPU)
    plan.advance_all(query_start_loc, token_indices, num_rejected_tokens, idx_mapping)
        device only: one advance_draft_steps launch (one more per 4 groups past 4) writes every
        pass's positions, seq_lens, every group's slots and formatted pairs, the CP-split rows and
        the RoPE rows; one compressor_metadata_multi launch (one more per 4 compressed groups
        past 4) every compressed group's compressor rows of every pass
    plan.metadata(k)
        pass k's DraftAttnMetadata per builder, views of pass k's own buffers

Every pass k = 1..K owns its buffers (row k - 1 of each), so a runner may prepare all K passes
and replay one graph of K draft forwards; addresses are fixed for the plan's life. Pass 1 runs on
the target step's layout (padded drafting: the rejected tokens stay in; num_input_tokens tokens),
passes k >= 2 on one token per request (num_reqs_padded tokens). build_draft_attn_metadata stays
the per-pass path and the oracle this plan is tested against.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from specops.drafting.calls import COMPRESSOR_METADATA_MULTI
from specops.drafting.compressed import compressor_format, rope_halves, row_bound
from specops.drafting.configs import SLOT_MAPPING_FORMATS, DraftAttnMetadata, checked_draft_index
from specops.drafting.loop_schedules import LoopSchedules, PassHost, check_query_starts, local_lengths, split_of
from specops.arguments import check_positive, checked_int
from specops.ops.advance_draft_step import RULES
from specops.ops.advance_draft_steps import empty_draft_steps
from specops.ops.cp_local_metadata import CPLocalMetadata
from specops.ops.registry import OPS
from specops.compressor_layout import FORMAT_FLAT

if TYPE_CHECKING:
    from specops.drafting.builder import DraftMetadataBuilder
    from specops.drafting.setup import GroupSetup
    from specops.persistent.mappings import PersistentMappings


_DRAFT_STEPS = OPS["advance_draft_steps"]


class DraftLoopPlan:
    """Per draft index k = 1..K, persistent buffers for every DraftAttnMetadata field of every
    builder and for the pass's positions, seq_lens and every mapping group's slot mapping
    (`slot_mappings(k)`), written by `plan_step` (host) and `advance_all` (device).

    mappings: the PersistentMappings whose target step this drafts from (its source tables,
    block counts, captured slot mappings and block tables, CP layout); builders: one per group of
    the draft model, sharing one ModelConfig, each naming a mapping group. shared_schedule: plan
    the schedules of passes 2..K once, for pass K's bound (each pass keeps its own copy).
    """

    def __init__(self, mappings: PersistentMappings, builders: Sequence[DraftMetadataBuilder], *,
                 num_speculative_tokens: int, max_model_len: int, past_max_model_len: str = "reset",
                 shared_schedule: bool = False):
        builders = tuple(builders)
        if not builders:
            raise ValueError("builders must hold at least one DraftMetadataBuilder, got none")
        # The plan reads each group through its setup (drafting/setup.py), never through its builder.
        setups = tuple(builder.setup for builder in builders)
        model = setups[0].model
        if any(setup.model is not model for setup in setups):
            raise ValueError("builders must share one ModelConfig (one draft model), got several")
        num_steps = checked_int(num_speculative_tokens, "num_speculative_tokens")
        check_positive(num_steps, "num_speculative_tokens")
        if num_steps != model.num_speculative_tokens:
            raise ValueError(f"num_speculative_tokens must be the model's {model.num_speculative_tokens}, got "
                             f"{num_steps}")
        self.max_model_len = checked_int(max_model_len, "max_model_len")
        check_positive(self.max_model_len, "max_model_len")
        if past_max_model_len not in RULES:
            raise ValueError(f"past_max_model_len must be \"reset\" or \"clamp\", got {past_max_model_len!r}")
        names = list(mappings.group_names)
        storage = [group.block_size for group in mappings.groups]
        pair_dtypes = [torch.int64] * len(names)
        claimed: dict[int, GroupSetup] = {}
        self.group_of = []
        for setup in setups:
            group = setup.group
            if group.name not in names:
                raise ValueError(f"group {group.name!r} of a builder must name a mapping group, got none of {names}")
            g = names.index(group.name)
            dtype = SLOT_MAPPING_FORMATS[group.slot_mapping_format]
            other = claimed.setdefault(g, setup)
            if other is not setup and (other.group.storage_block_size != group.storage_block_size
                                         or other.group.slot_mapping_format != group.slot_mapping_format):
                raise ValueError(f"builders of mapping group {group.name!r} must share storage_block_size and "
                                 f"slot_mapping_format")
            if setup.device != mappings.device:
                raise ValueError(f"builders must be on the mappings' device {mappings.device}, got {setup.device}")
            storage[g], pair_dtypes[g] = group.storage_block_size, dtype
            self.group_of.append(g)
        self.mappings, self.builders, self.setups, self.model = mappings, builders, setups, model
        self.num_steps, self.rule = num_steps, past_max_model_len
        self.device = mappings.device
        self.max_num_reqs = min(mappings.max_num_reqs, *(setup.max_num_reqs for setup in setups))
        self.max_num_tokens = min(mappings.max_num_tokens, *(setup.max_num_tokens for setup in setups))
        self.storage_block_sizes = storage
        self.buffers = empty_draft_steps(
            num_steps=num_steps, num_input_tokens=self.max_num_tokens, num_reqs_padded=self.max_num_reqs,
            max_num_reqs=self.max_num_reqs, split_size=model.cp_size, rope_cos_sin_cache=model.rope_cos_sin_cache,
            slot_dtypes=[mappings.slot_dtype] * len(names), device=self.device, pair_dtypes=pair_dtypes)
        self.schedules = LoopSchedules(setups, num_steps, self.max_num_reqs, self.device, shared_schedule)
        self.seq_lens_cpu = torch.zeros((num_steps, self.max_num_reqs), dtype=torch.int32)
        self.half = model.rope_cos_sin_cache.size(1) // 2
        self._compressor = _CompressorRows(setups, self)
        self._passes: list[PassHost] = []
        self._num_reqs = 0
        self._views: dict[tuple, list[DraftAttnMetadata]] = {}
        # advance_all's keyword arguments: its step's entries set by advance_all (the tensors) and
        # plan_step (the sizes), the rest fixed here.
        groups = mappings.groups
        out = self.buffers
        self._arguments = dict(
            query_start_loc=None, positions=mappings.positions, seq_lens=mappings.seq_lens, token_indices=None,
            num_rejected_tokens=None, idx_mapping=None, block_tables=list(mappings.source_block_tables),
            num_blocks=list(mappings.num_blocks), target_slot_mappings=list(mappings.slot_mappings),
            rope_cos_sin_cache=model.rope_cos_sin_cache, out_positions=out.positions, out_seq_lens=out.seq_lens,
            out_query_start_loc=out.query_start_loc, out_cos_sin=out.cos_sin, out_local_cos_sin=out.local_cos_sin,
            out_local_query_start_loc=out.local_query_start_loc, out_local_seq_lens=out.local_seq_lens,
            out_start_pos=out.start_pos, out_slots=list(out.slots), out_slot_pairs=list(out.slot_pairs),
            num_steps=num_steps, num_actual_tokens=None, num_input_tokens=None, num_reqs_padded=None,
            max_model_len=self.max_model_len, past_max_model_len=RULES[past_max_model_len], split_size=model.cp_size,
            split_rank=model.cp_rank, cp_world_size=mappings.cp_world_size, cp_rank=mappings.cp_rank,
            cp_interleave=mappings.cp_interleave, block_sizes=[g.block_size for g in groups],
            blocks_per_kv_block=[g.blocks_per_kv_block for g in groups], cp_sharded=[g.cp_sharded for g in groups],
            slot_mapping_enabled=[g.slot_mapping_enabled for g in groups], storage_block_sizes=storage)

    # ------------------------------------------------------------------ host: the plan

    def plan_step(self, query_start_loc_cpu: torch.Tensor, seq_lens_cpu_upper_bound: torch.Tensor, num_reqs: int,
                  num_input_tokens: int, *, num_reqs_padded: int | None = None,
                  is_prefilling: torch.Tensor | None = None) -> None:
        """Every pass's host values and schedules from host tensors only: pass 1 from the
        exact query layout (query_start_loc_cpu [>= R + 1]) padded to num_input_tokens, passes
        k >= 2 one token per request padded to num_reqs_padded (default R); the lengths from
        seq_lens_cpu_upper_bound [>= R] (the target step's seq_lens bound before rejection),
        plus k - 1 for pass k, clamped to max_model_len. Reads no device value."""
        num_reqs, num_input_tokens = checked_int(num_reqs, "num_reqs"), checked_int(num_input_tokens,
                                                                                  "num_input_tokens")
        padded = num_reqs if num_reqs_padded is None else checked_int(num_reqs_padded, "num_reqs_padded")
        for tensor, name in ((query_start_loc_cpu, "query_start_loc_cpu"),
                             (seq_lens_cpu_upper_bound, "seq_lens_cpu_upper_bound")):
            if not isinstance(tensor, torch.Tensor) or tensor.device.type != "cpu" or tensor.dim() != 1:
                described = f"{tensor.device} {list(tensor.shape)}" if isinstance(tensor, torch.Tensor) else \
                    type(tensor).__name__
                raise ValueError(f"{name} must be a 1-D host tensor, got {described}")
        if not 0 <= num_reqs <= self.max_num_reqs:
            raise ValueError(f"num_reqs must be in [0, max_num_reqs = {self.max_num_reqs}], got {num_reqs}")
        if not num_reqs <= padded <= self.max_num_reqs:
            raise ValueError(f"num_reqs_padded must be in [num_reqs = {num_reqs}, {self.max_num_reqs}], got {padded}")
        if query_start_loc_cpu.numel() < num_reqs + 1 or seq_lens_cpu_upper_bound.numel() < num_reqs:
            raise ValueError(f"query_start_loc_cpu and seq_lens_cpu_upper_bound must have at least num_reqs + 1 = "
                             f"{num_reqs + 1} and num_reqs entries, got {query_start_loc_cpu.numel()} and "
                             f"{seq_lens_cpu_upper_bound.numel()}")
        starts = query_start_loc_cpu[:num_reqs + 1].numpy().astype(np.int64)
        check_query_starts(starts)
        num_tokens = int(starts[-1])
        if not num_tokens <= num_input_tokens <= self.max_num_tokens:
            raise ValueError(f"num_input_tokens must be in [query_start_loc_cpu[num_reqs] = {num_tokens}, "
                             f"max_num_tokens = {self.max_num_tokens}], got {num_input_tokens}")
        bound = seq_lens_cpu_upper_bound[:num_reqs].numpy().astype(np.int64)
        query_lens = starts[1:] - starts[:-1]
        decode = query_lens <= 1 + self.num_steps
        if is_prefilling is not None:
            decode = decode & ~is_prefilling[:num_reqs].numpy()
        num_decodes = int(np.count_nonzero(decode))
        decode_tokens = int(query_lens[decode].sum())
        total = num_tokens - int(starts[0])
        model, schedules = self.model, self.schedules
        later_starts = np.arange(num_reqs + 1, dtype=np.int64)
        passes, equal = [], []
        previous = None
        for k in range(self.num_steps):
            lengths = np.minimum(bound + k, self.max_model_len) if k else np.minimum(bound, self.max_model_len)
            split = split_of(num_input_tokens if k == 0 else padded, model.cp_size, model.cp_rank)
            local_starts, local_seq = local_lengths(starts if k == 0 else later_starts, lengths, split[2], split[3])
            self.seq_lens_cpu[k, :num_reqs] = torch.from_numpy(lengths.astype(np.int32))
            schedules.local_starts[k, :num_reqs + 1] = torch.from_numpy(local_starts.astype(np.int32))
            schedules.local_seq_lens[k, :num_reqs] = torch.from_numpy(local_seq.astype(np.int32))
            max_query = int((local_starts[1:] - local_starts[:-1]).max()) if num_reqs else 0
            max_seq = int(local_seq.max()) if num_reqs else 0
            counts = (num_decodes, num_reqs - num_decodes, decode_tokens, total - decode_tokens) if k == 0 else \
                (num_reqs, 0, num_reqs, 0)
            host = PassHost(*counts, num_tokens if k == 0 else num_reqs, num_input_tokens if k == 0 else padded, split,
                            max(1, max_query), max(1, max_seq))
            equal.append(k > 1 and host.split == previous.split and np.array_equal(lengths, previous_lengths))
            passes.append(host)
            previous, previous_lengths = host, lengths
        schedules.plan(num_reqs, passes, equal)
        self._passes, self._num_reqs = passes, num_reqs
        self._arguments.update(num_actual_tokens=num_tokens, num_input_tokens=num_input_tokens, num_reqs_padded=padded)

    # ------------------------------------------------------------------ device: one launch

    def advance_all(self, query_start_loc: torch.Tensor, token_indices: torch.Tensor,
                    num_rejected_tokens: torch.Tensor, idx_mapping: torch.Tensor, *,
                    positions: torch.Tensor | None = None, seq_lens: torch.Tensor | None = None) -> None:
        """Every pass's device fields, after the target step: query_start_loc [>= R + 1] the
        target layout (device), token_indices / num_rejected_tokens [R] the tokens to sample
        and the rejected counts (prepare_next_token_ids'), idx_mapping [R] the batch's request
        rows; positions / seq_lens: the target step's (default: the mappings' own). Fixed grid,
        no host read of a device value, no allocation."""
        if not self._passes:
            raise RuntimeError("advance_all needs plan_step first (the step's sizes and schedules)")
        arguments = self._arguments
        arguments.update(query_start_loc=query_start_loc, token_indices=token_indices,
                         num_rejected_tokens=num_rejected_tokens, idx_mapping=idx_mapping)
        try:
            if positions is not None:
                arguments["positions"] = positions
            if seq_lens is not None:
                arguments["seq_lens"] = seq_lens
            _DRAFT_STEPS.select()(**arguments)
        finally:
            # The overrides are this call's only, also when the op rejects it: the next call
            # without them reads the mappings' own.
            arguments["positions"], arguments["seq_lens"] = self.mappings.positions, self.mappings.seq_lens
        self._compressor.run(self._num_reqs)

    # ------------------------------------------------------------------ the metadata

    def _pass_of(self, draft_index: int, what: str) -> int:
        """Row k - 1 of pass draft_index, once a step is planned (its sizes come from plan_step)."""
        k = checked_draft_index(draft_index, self.num_steps) - 1
        if not self._passes:
            raise RuntimeError(f"{what} needs plan_step first (the step's sizes)")
        return k

    def slot_mappings(self, draft_index: int) -> list[torch.Tensor]:
        """Pass draft_index's slot mapping of every mapping group (for the KV-cache writes)."""
        k = self._pass_of(draft_index, "slot_mappings")
        tokens = self._passes[k].num_input_tokens
        return [slots[k, :tokens] for slots in self.buffers.slots]

    def positions(self, draft_index: int) -> torch.Tensor:
        k = self._pass_of(draft_index, "positions")
        return self.buffers.positions[k, :self._passes[k].num_input_tokens]

    def seq_lens(self, draft_index: int) -> torch.Tensor:
        k = self._pass_of(draft_index, "seq_lens")
        return self.buffers.seq_lens[k, :self._num_reqs]

    def metadata(self, draft_index: int) -> list[DraftAttnMetadata]:
        """Pass draft_index's DraftAttnMetadata of every builder, in order: views of the pass's
        buffers (the fields build_draft_attn_metadata gives; DSpark groups see causal passes)."""
        k = self._pass_of(draft_index, "metadata")
        host, num_reqs = self._passes[k], self._num_reqs
        key = (k, num_reqs, host.num_tokens, host.num_input_tokens)
        views = self._views.get(key)
        if views is None:
            views = self._views[key] = self._make_views(k, num_reqs, host)
        buffers = self.buffers
        cp = CPLocalMetadata(buffers.local_query_start_loc[k, :num_reqs + 1], buffers.local_seq_lens[k, :num_reqs],
                             buffers.start_pos[k, :num_reqs], *host.split, host.max_local_query_len,
                             host.max_local_seq_len)
        metas = []
        for meta in views:
            meta.num_decodes, meta.num_prefills = host.num_decodes, host.num_prefills
            meta.num_decode_tokens, meta.num_prefill_tokens = host.num_decode_tokens, host.num_prefill_tokens
            meta.cp = cp
            metas.append(meta)
        return metas

    def _make_views(self, k: int, num_reqs: int, host: PassHost) -> list[DraftAttnMetadata]:
        buffers, half = self.buffers, self.half
        tokens, stream = host.num_tokens, host.num_input_tokens
        per_rank = host.split[1]
        cos_sin, local = buffers.cos_sin[k, :stream], buffers.local_cos_sin[k, :per_rank]
        start_pos = buffers.start_pos[k, :num_reqs]
        shared = dict(input_positions=buffers.positions[k, :stream], cos=cos_sin[:, :half], sin=cos_sin[:, half:],
                      local_cos=local[:, :half], local_sin=local[:, half:], start_pos=start_pos,
                      seq_lens_cpu=self.seq_lens_cpu[k, :num_reqs])
        schedules = self.schedules
        metas = []
        for index, (setup, g) in enumerate(zip(self.setups, self.group_of)):
            pairs = buffers.slot_pairs[g][k]
            actual = setup.group.slot_mapping_format == "int32_actual"
            sas = schedules.sas_of[index]
            meta = DraftAttnMetadata(
                num_decodes=0, num_prefills=0, num_decode_tokens=0, num_prefill_tokens=0, cp=None,
                sas_metadata=None if sas is None else schedules.view(k + 1, sas),
                slot_mapping=pairs[:tokens] if actual else pairs[:stream], dspark_swa_indices=None,
                dspark_swa_lens=None, window=setup.step_windows[True], **shared)
            if setup.group.compress_ratio == 4:
                meta.qli_metadata = schedules.view(k + 1, schedules.qli_slot)
            metas.append(meta)
        compressor = self._compressor
        for j, index in enumerate(compressor.index):
            meta = metas[index]
            rows = row_bound(tokens, num_reqs, compressor.ratios[j])
            meta.compress_cos, meta.compress_sin = compressor.cos[j][k, :rows], compressor.sin[j][k, :rows]
            meta.compress_slot_mapping = compressor.slots[j][k, :rows]
        return metas


class _CompressorRows:
    """Every compressed group's compressor rows of every pass, one compressor_metadata_multi
    launch (one per 4 compressed groups) from the passes' device query starts and start
    positions, which advance_draft_steps wrote just before on the same stream: exact values, no
    host copy. Each group's buffers hold row k - 1 for pass k and are written whole (the valid
    rows, then the invalid fill rows), so the argument list is fixed but for the request count."""

    def __init__(self, setups: Sequence[GroupSetup], plan: DraftLoopPlan):
        self.index, cos, sin, slots, ropes = [], [], [], [], []
        tables, block_sizes, formats, ratios = [], [], [], []
        num_steps, buffers = plan.num_steps, plan.buffers
        for index, setup in enumerate(setups):
            model, group = setup.model, setup.group
            ratio = group.compress_ratio
            if ratio <= 1 or not group.compressor_metadata:
                continue
            rope_cos, rope_sin = rope_halves(model, ratio)
            rows = max(row_bound(plan.max_num_tokens, plan.max_num_reqs, ratio), plan.max_num_reqs)
            slot_format = compressor_format(setup.platform)
            self.index.append(index)
            ropes.append((rope_cos, rope_sin))
            cos.append(torch.ones((num_steps, rows, 1, 1, rope_cos.size(1)), dtype=rope_cos.dtype,
                                  device=setup.device))
            sin.append(torch.zeros_like(cos[-1]))
            slots.append(torch.full((num_steps, rows) if slot_format == FORMAT_FLAT else (num_steps, rows, 2), -1,
                                    dtype=torch.int32, device=setup.device))
            tables.append(plan.mappings.block_tables_by_name[group.name])
            block_sizes.append(group.storage_block_size)
            formats.append(slot_format)
            ratios.append(ratio)
        self.cos, self.sin, self.slots, self.ratios = cos, sin, slots, ratios
        self.arguments = dict(
            rope_cos=[pair[0] for pair in ropes], rope_sin=[pair[1] for pair in ropes],
            cu_seqlens=buffers.query_start_loc, start_pos=buffers.start_pos, kv_block_tables=tables,
            kv_block_sizes=block_sizes, slot_mapping_formats=formats, compress_ratios=ratios, num_reqs_actual=0,
            compress_cos=cos, compress_sin=sin, slot_mappings=slots)

    def run(self, num_reqs: int) -> None:
        if self.index:
            self.arguments["num_reqs_actual"] = num_reqs
            COMPRESSOR_METADATA_MULTI.select()(**self.arguments)
