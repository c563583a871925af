"""The drafting layer (docs/drafting.md): every KV-cache group's attention metadata for one draft step.

Only two results depend on the group: its formatted slot mapping and, for DSpark groups on
non-causal steps, its DSpark indices (compressed groups add their compressor metadata).
Everything else (decode/prefill split, positions, RoPE cos/sin, CP local metadata, start_pos,
host seq_lens, the sas and lightning-indexer schedules) is group-invariant: the first group of a
step computes it and the other groups share the same tensors (through a runner's `StepCache`
when it passes one). The groups' own results come from multi-group launches, one each per step
however many groups there are.

    model = ModelConfig(num_heads_q=64, num_heads_kv=1, head_dim=512, rope_cos_sin_cache=cache,
                        num_speculative_tokens=7)  # core counts and SoC: read from the builders' NPU
    builders = [DraftMetadataBuilder(model, group, max_num_reqs=256, max_num_tokens=4096) for group in groups]
    metas = build_draft_attn_metadata(builders, common, draft_index=1)

Every result lives in persistent buffers owned by one builder and one draft index (allocated at
that pair's first build), so a captured graph replays against fixed addresses. See
docs/drafting.md for the addresses a cache hit hands out and for the fresh-cache paths.

Modules: `naive` (the plain definition of a group's metadata, one group at a time: read it
first), `configs` (the configs, the step's inputs and results), `cache` (StepCache), `buffers`
(the persistent buffers and their per-shape views), `platform` (the core counts, SoC and sas
variant a builder's schedules are for), `setup` (GroupSetup: the frozen record of one group's
fixed arguments, what every module below the builder reads), `builder` (one group's setup,
buffers and step plans), `invariant` (the group-invariant results), `plan` (what a step over
given builders does, worked out once, and StepPlans, its one owner), `compressed` (compressed
groups: the indexer schedule and the batched compressor metadata), `step` (one draft step over
every builder) and `loop_plan` / `loop_schedules` (DraftLoopPlan: every pass of a chain-drafting
step at once).
"""

from specops.drafting.builder import DraftMetadataBuilder
from specops.drafting.cache import StepCache
from specops.drafting.configs import DRAFT_NAMESPACE, CommonDraftInputs, DraftAttnMetadata, GroupConfig, ModelConfig
from specops.drafting.loop_plan import DraftLoopPlan
from specops.drafting.step import build_draft_attn_metadata

__all__ = [
    "DRAFT_NAMESPACE",
    "CommonDraftInputs",
    "DraftAttnMetadata",
    "DraftLoopPlan",
    "DraftMetadataBuilder",
    "GroupConfig",
    "ModelConfig",
    "StepCache",
    "build_draft_attn_metadata",
]
