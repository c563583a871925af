"""The release table: for each supported runner release, the points it serves, their targets
and the adapters that serve them; the fingerprints are in _fingerprints.py under the row's key
(docs/integrations.md, "Releases", says how a row is added).

A row is added only after each of its points' adapters was checked against that release's code
(the proof, `make test-vllm-integration VLLM_VERSION=...`, drives them in its runner).
"""

from __future__ import annotations

import functools

# The point modules by name, not through the package (whose __init__ imports this module).
import specops.integrations.vllm.ascend as ascend
import specops.integrations.vllm.ascend_dsa as ascend_dsa
import specops.integrations.vllm.draft_steps as draft_steps
import specops.integrations.vllm.mrv2 as mrv2
import specops.integrations.vllm.pcp as pcp
import specops.integrations.vllm.target_step as target_step
import specops.integrations.vllm.v1_eagle as v1_eagle
from specops.integrations.vllm._fingerprints import FINGERPRINTS
from specops.integrations.vllm._frame import Patch, Point, Release, Runner

_GPU = "vllm.v1.worker.gpu"
_IB = f"{_GPU}.input_batch"
_MR = f"{_GPU}.model_runner"
_CP = f"{_GPU}.cp_utils"
_BT = f"{_GPU}.block_table"
_PCP = f"{_GPU}.pcp_manager"
_SP = f"{_GPU}.spec_decode.speculator"
_TDAR = f"{_GPU}.spec_decode.target_dependent_ar.speculator"
_AR = f"{_GPU}.spec_decode.autoregressive.speculator"  # 0.34
_V1U = "vllm.v1.spec_decode.utils"
_V1P = "vllm.v1.spec_decode.llm_base_proposer"
_V1R = "vllm.v1.worker.gpu_model_runner"
# Modules that bind model runner V2's functions by name at import (rebound too).
_MRV2_IMPORTERS = (_MR, f"{_GPU}.sample.sampler", f"{_GPU}.spec_decode.rejection_sampler", _SP, _TDAR, _PCP)
_BUF = f"{_GPU}.buffer_utils"


def vllm(version: str) -> Runner:
    return Runner("vllm", version, label="vLLM", version_attr="vllm.version:__version__")


def _input_ids() -> Point:
    return Point("input_ids", (
        Patch(f"{_MR}:GPUModelRunner.prepare_inputs", mrv2.make_prepare_inputs),
        Patch(f"{_IB}:expand_idx_mapping", mrv2.make_expand_idx_mapping),
        Patch(f"{_IB}:prepare_prefill_inputs", mrv2.make_prepare_prefill_inputs),
        Patch(f"{_IB}:combine_sampled_and_draft_tokens", mrv2.make_combine_sampled_and_draft_tokens,
              (f"{_IB}:prepare_prefill_inputs", f"{_IB}:expand_idx_mapping")),
    ), reads=(f"{_IB}:prepare_pos_seq_lens", f"{_GPU}.states:RequestState"), importers=_MRV2_IMPORTERS)


def _request_state() -> Point:
    """The request state's staged writes in one launch (model runner V2 in 0.26, 0.33 and 0.34:
    vllm-ascend's AscendRequestState inherits the method)."""
    return Point("request_state", (
        Patch(f"{_GPU}.states:RequestState.__init__", mrv2.make_request_state_init, (f"{_BUF}:FusedStagedWriter",)),
        Patch(f"{_GPU}.states:RequestState.apply_staged_writes", mrv2.make_request_state_apply_staged_writes),
    ), reads=(f"{_BUF}:FusedStagedWriter.apply", f"{_BUF}:StagedWriteTensor.apply_write"))


def _mrv2_points() -> tuple[Point, ...]:
    """The points model runner V2 serves alike in 0.33 and 0.34 (the draft loop aside)."""
    return (
        _request_state(),
        _input_ids(),
        Point("sampled_counts", (Patch(f"{_IB}:get_num_sampled_and_rejected", mrv2.make_get_num_sampled_and_rejected),),
              importers=_MRV2_IMPORTERS),
        Point("post_update", (
            Patch(f"{_IB}:post_update", mrv2.make_post_update),
            Patch(f"{_IB}:post_update_num_computed_tokens", mrv2.make_post_update_num_computed_tokens),
        ), reads=(f"{_MR}:GPUModelRunner.postprocess_sampled",), importers=_MRV2_IMPORTERS),
        Point("dcp_local_seq_lens", (Patch(f"{_CP}:prepare_dcp_local_seq_lens", mrv2.make_prepare_dcp_local_seq_lens),),
              importers=_MRV2_IMPORTERS),
        Point("block_tables", (Patch(f"{_BT}:BlockTables.gather_block_tables", mrv2.make_gather_block_tables),),
              reads=(f"{_BT}:BlockTables",)),
        # The fused launch's consuming ends are the block_tables and draft_steps adapters, and
        # its block-table layout is draft_steps' BlockTables.__init__ seam.
        Point("target_step", (Patch(f"{_IB}:prepare_pos_seq_lens", target_step.make_prepare_pos_seq_lens),),
              reads=(f"{_BT}:BlockTables", f"{_MR}:GPUModelRunner.prepare_inputs",
                     f"{_MR}:GPUModelRunner.prepare_attn", f"{_MR}:GPUModelRunner.execute_model"),
              importers=_MRV2_IMPORTERS, needs=("block_tables", "draft_steps")),
        Point("pcp", (
            Patch(f"{_PCP}:PCPManager.partition_batch", pcp.make_partition_batch),
            Patch(f"{_PCP}:PCPManager._convert_to_gathered_slot_mappings", pcp.make_convert_to_gathered_slot_mappings),
        ), reads=(f"{_PCP}:PCPManager.__init__", f"{_PCP}:PCPManager.set_block_tables",
                  *(f"{_PCP}:PCPManager.{name}" for name in (
                      "_build_batch_layout", "replicated_requests", "_iter_rank_chunks", "_get_rank_segments",
                      "_reorder_segments", "_resolve_num_reqs_after_padding")))),
    )


def _update_prefill(*reads: str) -> Point:
    """post_update's launch joined to the draft prefill's (mrv2.py, "update_prefill"): the seam over
    sample_tokens, whose post_update the draft_steps prefill adapter launches; `reads`: what the
    release runs between the two (fingerprinted, as the sample_tokens body that calls it)."""
    return Point("update_prefill", (
        Patch(f"{_MR}:GPUModelRunner.sample_tokens", mrv2.make_sample_tokens,
              (f"{_GPU}.model_states.interface:ModelState.postprocess_state",
               "vllm.v1.watermarking.gpu_sampler:GPUWatermarkSampler")),
    ), reads=(f"{_MR}:GPUModelRunner.postprocess_sampled", f"{_GPU}.spec_decode.utils:get_drafter_hidden_states",
              f"{_SP}:DraftModelSpeculator.observe_verification",
              f"{_GPU}.spec_decode.acceptance_estimator:OnlineAcceptanceEstimator.step", *reads),
        needs=("post_update", "draft_steps"))


def _draft_steps_0_33() -> Point:
    propose = f"{_TDAR}:TargetDependentARSpeculator.propose"
    loop = draft_steps.LOOP_0_33
    return Point("draft_steps", (
        Patch(f"{_BT}:BlockTables.__init__", draft_steps.make_block_tables_init),
        Patch(propose, functools.partial(draft_steps.make_propose, loop=loop)),
        Patch(f"{_TDAR}:TargetDependentARSpeculator._generate_fused_drafts",
              functools.partial(draft_steps.make_fused_drafts, loop=loop), (propose,)),
        Patch(f"{_SP}:DraftModelSpeculator._copy_request_inputs", draft_steps.make_copy_request_inputs),
        Patch(f"{_TDAR}:prepare_prefill_inputs", draft_steps.make_prepare_prefill_inputs),
        Patch(f"{_TDAR}:prepare_decode_inputs", draft_steps.make_prepare_decode_inputs),
        Patch(f"{_TDAR}:update_draft_inputs", draft_steps.make_update_draft_inputs),
        Patch(f"{_BT}:BlockTables.compute_slot_mappings", draft_steps.make_compute_slot_mappings),
    ), reads=(f"{_BT}:BlockTables", *(f"{_TDAR}:TargetDependentARSpeculator.{name}" for name in loop)),
        importers=_MRV2_IMPORTERS)


def _draft_steps_0_34() -> Point:
    """0.34 moves the decode loop to AutoRegressiveSpeculator, turns prepare_decode_inputs into
    the method `_prepare_decode_inputs` and renames `_generate_draft` to `_decode`;
    update_draft_inputs takes max_model_len as a 0-d int32 device tensor."""
    propose = f"{_TDAR}:TargetDependentARSpeculator.propose"
    loop = draft_steps.LOOP_0_34
    return Point("draft_steps", (
        Patch(f"{_BT}:BlockTables.__init__", draft_steps.make_block_tables_init),
        Patch(propose, functools.partial(draft_steps.make_propose, loop=loop)),
        Patch(f"{_AR}:AutoRegressiveSpeculator._fused_multi_step_decode",
              functools.partial(draft_steps.make_fused_drafts, loop=loop), (propose,)),
        Patch(f"{_SP}:DraftModelSpeculator._copy_request_inputs", draft_steps.make_copy_request_inputs),
        Patch(f"{_TDAR}:prepare_prefill_inputs", draft_steps.make_prepare_prefill_inputs),
        Patch(f"{_TDAR}:TargetDependentARSpeculator._prepare_decode_inputs",
              draft_steps.make_prepare_decode_inputs_method),
        Patch(f"{_TDAR}:update_draft_inputs", draft_steps.make_update_draft_inputs),
        Patch(f"{_BT}:BlockTables.compute_slot_mappings", draft_steps.make_compute_slot_mappings),
    ), reads=(f"{_BT}:BlockTables", f"{_TDAR}:TargetDependentARSpeculator._decode",
              *(f"{_AR}:AutoRegressiveSpeculator.{name}" for name in loop if name not in ("_decode",
                                                                                          "_prepare_decode_inputs"))),
        importers=_MRV2_IMPORTERS)


def _v1_eagle() -> Point:
    return Point("v1_eagle", (
        Patch(f"{_V1R}:GPUModelRunner.propose_draft_token_ids", v1_eagle.make_propose_draft_token_ids),
        Patch(f"{_V1U}:_eagle_prepare_next_token_padded", v1_eagle.make_prepare_next_token_padded),
        Patch(f"{_V1U}:_eagle_prepare_inputs_padded", v1_eagle.make_prepare_inputs_padded_launch),
        Patch(f"{_V1P}:SpecDecodeBaseProposer.prepare_inputs_padded", v1_eagle.make_prepare_inputs_padded),
        Patch(f"{_V1U}:eagle_step_update_slot_mapping_and_metadata", v1_eagle.make_eagle_step),
        Patch(f"{_V1U}:update_num_computed_tokens_for_batch_change", v1_eagle.make_update_num_computed_tokens),
        Patch(f"{_V1P}:SpecDecodeBaseProposer.set_inputs_first_pass", v1_eagle.make_set_inputs_first_pass,
              (f"{_V1U}:extend_all_queries_by_N",)),
    ), reads=(f"{_V1P}:SpecDecodeBaseProposer.prepare_next_token_ids_padded",
              f"{_V1P}:SpecDecodeBaseProposer._update_positions_dependent_metadata"),
        importers=(_V1P, _V1R))


def vllm_ascend(version: str) -> Runner:
    return Runner("vllm-ascend", version, version_attr="vllm_ascend._version:__version__")


# The Ascend row (vllm-ascend 0.26.0rc1 with vLLM 0.26.0): vllm-ascend's own classes and the
# module names its code calls through (docs/integrations.md, "Ascend").
_NPU = "vllm_ascend.worker.v2"
_AR = f"{_GPU}.spec_decode.autoregressive.speculator"
_NPU_RUNNER = f"{_NPU}.model_runner:NPUModelRunner"
_NPU_TABLES = f"{_NPU}.block_table:AscendBlockTables"
_NPU_LOOP = f"{_NPU}.spec_decode.autoregressive.speculator:AscendAutoRegressiveSpeculator"
_NPU_IMPORTERS = (f"{_NPU}.model_runner", f"{_NPU}.input_batch", f"{_NPU}.block_table", _MR, _PCP, _AR,
                  f"{_GPU}.sample.sampler", f"{_GPU}.spec_decode.rejection_sampler")


def _ascend_points() -> tuple[Point, ...]:
    return (
        _request_state(),
        Point("input_ids", (
            Patch(f"{_NPU_RUNNER}.prepare_inputs", ascend.make_prepare_inputs),
            Patch(f"{_IB}:expand_idx_mapping", mrv2.make_expand_idx_mapping),
            Patch(f"{_IB}:prepare_prefill_inputs", ascend.make_prepare_prefill_inputs),
            Patch(f"{_IB}:combine_sampled_and_draft_tokens", ascend.make_combine_sampled_and_draft_tokens,
                  (f"{_IB}:prepare_prefill_inputs", f"{_IB}:expand_idx_mapping")),
        ), reads=(f"{_GPU}.states:RequestState", f"{_NPU}.states:AscendRequestState"), importers=_NPU_IMPORTERS),
        Point("sampled_counts", (Patch(f"{_IB}:get_num_sampled_and_rejected", mrv2.make_get_num_sampled_and_rejected),),
              importers=_NPU_IMPORTERS),
        # vllm-ascend's worker patches bind its own post_update into vLLM's modules.
        Point("post_update", (
            Patch(f"{_NPU}.input_batch:post_update", mrv2.make_post_update),
            Patch(f"{_IB}:post_update_num_computed_tokens", mrv2.make_post_update_num_computed_tokens),
        ), reads=(f"{_NPU_RUNNER}.postprocess_sampled", f"{_MR}:GPUModelRunner.postprocess_sampled"),
            importers=_NPU_IMPORTERS),
        Point("block_tables", (Patch(f"{_BT}:BlockTables.gather_block_tables", ascend.make_gather_block_tables),),
              reads=(f"{_BT}:BlockTables",)),
        # The fused launch's gather is consumed by the block_tables adapter; its slot mappings by
        # the compute_slot_mappings seam, which the draft loop's updates share.
        Point("target_step", (
            Patch(f"{_IB}:prepare_pos_seq_lens", ascend.make_prepare_pos_seq_lens),
            Patch(f"{_NPU_TABLES}.compute_slot_mappings", ascend.make_compute_slot_mappings),
        ), reads=(f"{_BT}:BlockTables", _NPU_TABLES, f"{_NPU_RUNNER}.prepare_inputs",
                  f"{_MR}:GPUModelRunner.prepare_attn"), importers=_NPU_IMPORTERS, needs=("block_tables",)),
        Point("draft_steps", (
            Patch(f"{_NPU_LOOP}.propose", ascend.make_propose),
            Patch(f"{_AR}:prepare_decode_inputs", ascend.make_prepare_decode_inputs),
            Patch(f"{_AR}:update_draft_inputs", ascend.make_update_draft_inputs),
        ), reads=(f"{_NPU_LOOP}._multi_step_decode", f"{_NPU_LOOP}._generate_draft",
                  f"{_AR}:AutoRegressiveSpeculator._multi_step_decode", f"{_AR}:AutoRegressiveSpeculator._generate_draft",
                  f"{_AR}:AutoRegressiveSpeculator.propose"), importers=_NPU_IMPORTERS, needs=("target_step",)),
        *ascend_dsa.points(Point, Patch),
    )


def _row(runners, points) -> Release:
    release = Release(runners, points, {})
    return Release(runners, points, FINGERPRINTS.get(release.key, {}))


RELEASES: tuple[Release, ...] = (
    _row((vllm("0.33.0"),), (*_mrv2_points(), _draft_steps_0_33(),
                             _update_prefill(), _v1_eagle())),
    # 0.34 removes the V1 GPU model runner and vllm/v1/spec_decode (v1_eagle's targets).
    _row((vllm("0.34.0"),), (*_mrv2_points(), _draft_steps_0_34(),
                             _update_prefill(f"{_SP}:DraftModelSpeculator.prepare_propose",
                                             f"{_GPU}.spec_decode.draft_logits:DraftLogitsCache.assign"))),
    _row((vllm_ascend("0.26.0rc1"), vllm("0.26.0")), _ascend_points()),
)
