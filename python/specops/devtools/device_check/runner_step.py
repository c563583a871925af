"""A whole runner step on fixed buffers, for graph capture (step 4 of the device check).

One spec-decode step of a uniform decode batch (R requests of 1 + K tokens, as a runner captures
its decode graphs), on persistent buffers whose addresses never change:

    PersistentMappings.prepare_step   the async correction, positions, seq_lens, every group's
                                      slot mapping and gathered block table (one fused op + gathers)
    prepare_input_ids                 the verify pass's input ids and logits indices
    (the sampler's output: an input written before each step)
    count_sampled_and_rejected        what the sampler kept
    post_update_after_sampling        request state: tokens, last sampled, lengths, counts, bins
    prepare_next_token_ids            the drafter's next token, rejected count, index to sample
    draft passes                      DRAFT_PASSES below: the drafting layer's metadata of pass 1 on
                                      the target step's buffers, then K - 1 x (advance_draft_step +
                                      the next pass's metadata)

`write_inputs(i)` writes step i's inputs (drawn on the host from seed i) into the input buffers
and resets the request state the step updates, so step i computes the same whatever ran before.
Host-side arguments (sizes, the host copies of query_start_loc and seq_lens) stay fixed, as a
captured graph fixes them: seq_lens_cpu holds the bound every step's lengths stay under.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

import specops
from specops import MappingGroup, PersistentMappings, drafting

I32, I64 = torch.int32, torch.int64

K = 3  # drafts per request
QUERY = K + 1
NUM_REQS = 16
MAX_REQS = 20  # request rows; batch rows are padded to it
MAX_LEN = 320  # every position of every step stays below it; tables cover MAX_LEN + K + 1
VOCAB = 64
WIDTH = MAX_LEN + 2 * QUERY  # all_token_ids' row width
GROUPS = (("full", 16, None), ("swa", 16, 64), ("dspark", 8, 24))  # name, block size, sliding window


@dataclasses.dataclass
class StepShape:
    num_reqs: int = NUM_REQS
    num_tokens: int = NUM_REQS * QUERY
    num_tokens_padded: int = NUM_REQS * QUERY + 8
    num_reqs_padded: int = MAX_REQS


def _tensors(value: Any, prefix: str, into: dict[str, torch.Tensor]) -> None:
    """Every tensor of a (nested) result, keyed by its path; host tensors (the runner's *_cpu
    copies a step only reads) are left out."""
    if isinstance(value, torch.Tensor):
        into[prefix] = value
    elif dataclasses.is_dataclass(value):
        for field in dataclasses.fields(value):
            if not field.name.endswith("_cpu"):
                _tensors(getattr(value, field.name), f"{prefix}.{field.name}", into)
    elif isinstance(value, tuple) and hasattr(value, "_fields"):
        for name in value._fields:
            _tensors(getattr(value, name), f"{prefix}.{name}", into)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _tensors(item, f"{prefix}[{index}]", into)
    elif isinstance(value, dict):
        for key, item in value.items():
            _tensors(item, f"{prefix}[{key}]", into)


class RunnerStep:
    """The step's buffers and its body; `run()` returns every output tensor by name."""

    def __init__(self, device: torch.device, shape: StepShape | None = None):
        self.device = device
        self.shape = shape = shape or StepShape()
        on = dict(device=device)
        widths = [-(-(MAX_LEN + K + 1) // size) for _, size, _ in GROUPS]
        self.mappings = PersistentMappings(
            [MappingGroup(size, sliding_window_reach=window or 0, name=name) for name, size, window in GROUPS],
            max_num_reqs=MAX_REQS, max_num_blocks_per_req=widths, max_num_tokens=shape.num_tokens_padded,
            device=device)
        generator = torch.Generator().manual_seed(1234)
        for row in range(MAX_REQS):
            self.mappings.append_blocks(row, [torch.randint(1, 1 << 20, (w,), generator=generator).tolist()
                                              for w in widths], overwrite=True)
        self.mappings.apply_staged()
        rope = torch.rand(MAX_LEN + 2 * QUERY, 8, generator=generator).to(device)
        model = drafting.ModelConfig(num_heads_q=8, num_heads_kv=1, head_dim=64, rope_cos_sin_cache=rope,
                                     num_speculative_tokens=K, num_cube_cores=4, num_vector_cores=8,
                                     soc_version="Ascend910B1")
        self.builders = [drafting.DraftMetadataBuilder(
            model, drafting.GroupConfig(name, block_size=size, storage_block_size=size, sliding_window=window,
                                        dspark=name == "dspark"),
            max_num_reqs=MAX_REQS, max_num_tokens=shape.num_tokens_padded, device=device)
            for name, size, window in GROUPS]
        # Batch-indexed step inputs (prepare_step's), the sampler's output, the request state.
        num_reqs = shape.num_reqs
        self.inputs = {
            "num_computed_tokens": torch.zeros(num_reqs, dtype=I32, **on),
            "num_accepted_tokens": torch.zeros(num_reqs, dtype=I32, **on),
            "prev_positions": torch.zeros(num_reqs, dtype=I32, **on),
            "valid_sampled_token_count": torch.zeros(num_reqs, dtype=I32, **on),
            "prev_num_draft_tokens": torch.zeros(num_reqs, dtype=I32, **on),
            "cpu_num_computed_tokens": torch.zeros(num_reqs, dtype=I32, **on),
            "query_start_loc": torch.zeros(num_reqs + 1, dtype=I32, **on),
            "idx_mapping": torch.zeros(num_reqs, dtype=I32, **on),
            "cu_num_logits": torch.zeros(num_reqs + 1, dtype=I32, **on),
            "cu_num_draft_tokens": torch.zeros(num_reqs, dtype=I32, **on),
            "sampled": torch.zeros(num_reqs, QUERY, dtype=I64, **on),
            "num_sampled": torch.zeros(num_reqs, dtype=I32, **on),
            "backup_next_token_ids": torch.zeros(num_reqs, dtype=I32, **on),
            # request-indexed state the step reads and updates
            "req_num_computed": torch.zeros(MAX_REQS, dtype=I32, **on),
            "prefill_len": torch.zeros(MAX_REQS, dtype=I32, **on),
            "last_sampled": torch.zeros(MAX_REQS, dtype=I64, **on),
            "draft_tokens": torch.zeros(MAX_REQS, K, dtype=I64, **on),
            "all_token_ids": torch.zeros(MAX_REQS, WIDTH, dtype=I32, **on),
            "total_len": torch.zeros(MAX_REQS, dtype=I32, **on),
            "bins": torch.zeros(MAX_REQS, VOCAB, dtype=I32, **on),
        }
        # Outputs the step writes (besides the mappings' and the drafting layer's buffers).
        self.outputs = {
            "input_ids": torch.zeros(shape.num_tokens_padded, dtype=I32, **on),
            "logits_indices": torch.zeros(num_reqs * QUERY, dtype=I64, **on),
            "expanded_idx_mapping": torch.zeros(num_reqs * QUERY, dtype=I32, **on),
            "expanded_local_pos": torch.zeros(num_reqs * QUERY, dtype=I32, **on),
            "num_rejected": torch.zeros(num_reqs, dtype=I32, **on),
            "next_token_ids": torch.zeros(MAX_REQS, dtype=I32, **on),
            "valid_count": torch.zeros(MAX_REQS, dtype=I32, **on),
            "num_rejected_tokens": torch.zeros(MAX_REQS, dtype=I32, **on),
            "token_indices_to_sample": torch.zeros(MAX_REQS, dtype=I32, **on),
            "draft_query_start_loc": torch.zeros(MAX_REQS + 1, dtype=I32, **on),
        }
        # Host copies, fixed as a captured graph fixes them.
        self.query_start_loc_cpu = torch.arange(num_reqs + 1, dtype=I32) * QUERY
        self.draft_query_start_loc_cpu = torch.arange(num_reqs + 1, dtype=I32)
        self.seq_lens_cpu = torch.full((num_reqs,), MAX_LEN, dtype=I32)

    # ------------------------------------------------------------------ inputs
    def write_inputs(self, step: int) -> None:
        """Step `step`'s inputs, drawn on the host, copied into the input buffers."""
        generator = torch.Generator().manual_seed(10_000 + step)
        num_reqs = self.shape.num_reqs
        rows = torch.randperm(MAX_REQS, generator=generator)[:num_reqs].to(I32)
        # Each request's computed tokens: every position of the step and its drafts stays below MAX_LEN.
        counts = torch.randint(QUERY, MAX_LEN - 2 * QUERY, (num_reqs,), generator=generator, dtype=I32)
        kept = torch.randint(1, QUERY + 1, (num_reqs,), generator=generator, dtype=I32)
        sampled = torch.randint(0, VOCAB, (num_reqs, QUERY), generator=generator)
        sampled[torch.arange(QUERY).expand(num_reqs, QUERY) >= kept.unsqueeze(1).to(I64)] = -1
        values = {
            # A decode that did not draft last step: the correction takes the host counts.
            "num_computed_tokens": counts, "num_accepted_tokens": torch.zeros(num_reqs, dtype=I32),
            "prev_positions": torch.arange(num_reqs, dtype=I32),
            "valid_sampled_token_count": torch.ones(num_reqs, dtype=I32),
            "prev_num_draft_tokens": torch.zeros(num_reqs, dtype=I32), "cpu_num_computed_tokens": counts,
            "query_start_loc": self.query_start_loc_cpu, "idx_mapping": rows,
            "cu_num_logits": self.query_start_loc_cpu,
            "cu_num_draft_tokens": torch.arange(1, num_reqs + 1, dtype=I32) * K,
            "sampled": sampled, "num_sampled": kept,
            "backup_next_token_ids": torch.randint(0, VOCAB, (num_reqs,), generator=generator, dtype=I32),
        }
        state = {
            "req_num_computed": torch.zeros(MAX_REQS, dtype=I32), "prefill_len": torch.ones(MAX_REQS, dtype=I32),
            "last_sampled": torch.randint(0, VOCAB, (MAX_REQS,), generator=generator),
            "draft_tokens": torch.randint(0, VOCAB, (MAX_REQS, K), generator=generator),
            "all_token_ids": torch.randint(0, VOCAB, (MAX_REQS, WIDTH), generator=generator, dtype=I32),
            "total_len": torch.zeros(MAX_REQS, dtype=I32),
            "bins": torch.randint(0, 3, (MAX_REQS, VOCAB), generator=generator, dtype=I32),
        }
        state["req_num_computed"][rows.long()] = counts
        state["total_len"][rows.long()] = counts + 1
        for name, value in {**values, **state}.items():
            self.inputs[name].copy_(value)

    # ------------------------------------------------------------------ the step
    def run(self) -> dict[str, torch.Tensor]:
        """The whole step, in place; every tensor it wrote or returned, by name."""
        shape, x, out, m = self.shape, self.inputs, self.outputs, self.mappings
        found: dict[str, torch.Tensor] = {}
        views = m.prepare_step(
            x["num_computed_tokens"], x["num_accepted_tokens"], x["prev_positions"], x["valid_sampled_token_count"],
            x["prev_num_draft_tokens"], x["cpu_num_computed_tokens"], x["query_start_loc"], x["idx_mapping"],
            num_reqs_padded=shape.num_reqs_padded, num_tokens_padded=shape.num_tokens_padded)
        _tensors(views, "prepare_step", found)
        for step in BOOKKEEPING:
            _tensors(step(self), step.__name__, found)
        for draft_pass in DRAFT_PASSES:
            _tensors(draft_pass(self), draft_pass.__name__, found)
        _tensors(self.inputs, "inputs", found)  # the state and the counts the step updated in place
        _tensors(self.outputs, "outputs", found)
        return found


def input_ids(step: RunnerStep) -> Any:
    x, out, shape = step.inputs, step.outputs, step.shape
    return specops.prepare_input_ids(
        out["input_ids"], x["idx_mapping"], x["query_start_loc"], x["req_num_computed"], x["prefill_len"],
        x["last_sampled"], x["draft_tokens"], x["cu_num_logits"],
        logits_indices=out["logits_indices"], expanded_idx_mapping=out["expanded_idx_mapping"],
        expanded_local_pos=out["expanded_local_pos"], num_tokens_padded=shape.num_tokens_padded)


def sampled_counts(step: RunnerStep) -> Any:
    x, out = step.inputs, step.outputs
    return specops.count_sampled_and_rejected(
        x["num_sampled"], step.mappings.seq_lens[:step.shape.num_reqs], x["cu_num_logits"], x["idx_mapping"],
        x["prefill_len"], num_rejected=out["num_rejected"])


def post_update(step: RunnerStep) -> Any:
    x, out = step.inputs, step.outputs
    return specops.post_update_after_sampling(
        x["idx_mapping"], x["req_num_computed"], query_start_loc=x["query_start_loc"], sampled_tokens=x["sampled"],
        num_sampled=x["num_sampled"], num_rejected=out["num_rejected"], last_sampled_tokens=x["last_sampled"],
        all_token_ids=x["all_token_ids"], total_len=x["total_len"], output_bin_counts=x["bins"])


def next_tokens(step: RunnerStep) -> Any:
    x, out = step.inputs, step.outputs
    return specops.prepare_next_token_ids(
        x["sampled"], VOCAB, backup_next_token_ids=x["backup_next_token_ids"],
        cu_num_draft_tokens=x["cu_num_draft_tokens"], query_start_loc=x["query_start_loc"],
        next_token_ids=out["next_token_ids"], valid_sampled_token_count=out["valid_count"],
        num_rejected_tokens=out["num_rejected_tokens"], token_indices_to_sample=out["token_indices_to_sample"])


# The step-bookkeeping ops after prepare_step, in the runner's order.
BOOKKEEPING: tuple[Callable[[RunnerStep], Any], ...] = (input_ids, sampled_counts, post_update, next_tokens)


def draft_pass_1(step: RunnerStep) -> Any:
    """The first draft pass's metadata, on the target step's buffers (non-causal: the DSpark
    group builds its indices too)."""
    shape = step.shape
    common = step.mappings.draft_inputs(
        step.inputs["query_start_loc"], step.query_start_loc_cpu, step.seq_lens_cpu, num_reqs=shape.num_reqs,
        num_actual_tokens=shape.num_tokens, num_input_tokens=shape.num_tokens_padded, causal=False)
    return drafting.build_draft_attn_metadata(step.builders, common, 1)


def later_draft_passes(step: RunnerStep) -> Any:
    """K - 1 x (advance_draft_step on the mappings' buffers, then that pass's metadata)."""
    x, out, shape, m = step.inputs, step.outputs, step.shape, step.mappings
    results = []
    for k in range(K - 1):
        first = k == 0
        advanced = m.advance_draft_step(
            x["idx_mapping"], max_model_len=MAX_LEN + K, past_max_model_len="reset",
            token_indices=out["token_indices_to_sample"][:shape.num_reqs] if first else None,
            num_rejected_tokens=out["num_rejected_tokens"][:shape.num_reqs] if first else None,
            query_start_loc=out["draft_query_start_loc"], num_reqs_padded=MAX_REQS)
        common = m.draft_inputs(advanced.query_start_loc, step.draft_query_start_loc_cpu, step.seq_lens_cpu,
                                num_reqs=shape.num_reqs, num_actual_tokens=shape.num_reqs,
                                num_input_tokens=MAX_REQS, positions=advanced.positions, causal=False)
        results.append((advanced, drafting.build_draft_attn_metadata(step.builders, common, k + 2)))
    return results


# The drafting layer's passes of one step. A multi-step draft advance (a plan of all K - 1 later
# steps at once) is one more entry here, with its own name, beside or instead of
# later_draft_passes.
DRAFT_PASSES: tuple[Callable[[RunnerStep], Any], ...] = (draft_pass_1, later_draft_passes)
