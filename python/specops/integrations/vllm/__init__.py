"""specops as a vLLM general plugin (entry point group `vllm.general_plugins`; docs/integrations.md).

Installing specops changes nothing: the plugin is off unless SPECOPS_VLLM is set ("1" for every
point, or a comma list of point names). vLLM calls `register()` in every process it starts
(front end, engine core, each worker); it never raises: vLLM does not guard plugin functions,
and a raise would kill every worker. Before it patches anything it checks the exact vLLM version
and the fingerprint of every target of the points switched on (_guard.py); on any mismatch it
patches nothing at all and logs one warning naming the first differing target.

Functions are rebound in the module that defines them and in every loaded vLLM module that
imported them by name; methods are patched on vLLM's base classes, so subclasses (vllm-ascend's
among them) inherit them. `status()` says whether the plugin is active in this process and why
not; `python -m specops` prints it.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import logging
import sys
from collections.abc import Callable

from specops.integrations.vllm import _switch

logger = logging.getLogger(__name__)

_IB = "vllm.v1.worker.gpu.input_batch"
_MR = "vllm.v1.worker.gpu.model_runner"
_CP = "vllm.v1.worker.gpu.cp_utils"
_BT = "vllm.v1.worker.gpu.block_table"
_AR = "vllm.v1.worker.gpu.spec_decode.target_dependent_ar.speculator"
_SP = "vllm.v1.worker.gpu.spec_decode.speculator"
_V1U = "vllm.v1.spec_decode.utils"
_V1P = "vllm.v1.spec_decode.llm_base_proposer"
_V1R = "vllm.v1.worker.gpu_model_runner"
_PCP = "vllm.v1.worker.gpu.pcp_manager"
# Modules whose names bound at import are rebound too (imported before the scan).
IMPORTERS = (_MR, "vllm.v1.worker.gpu.sample.sampler", "vllm.v1.worker.gpu.spec_decode.rejection_sampler",
             "vllm.v1.worker.gpu.spec_decode.speculator", "vllm.v1.worker.gpu.spec_decode.target_dependent_ar.speculator",
             "vllm.v1.worker.gpu.pcp_manager")


@dataclasses.dataclass(frozen=True)
class Patch:
    target: str  # module:qualname of what is replaced
    make: Callable  # make(original, *originals of `also`) -> adapter
    also: tuple[str, ...] = ()  # further originals the adapter falls back on


@dataclasses.dataclass(frozen=True)
class Point:
    name: str
    patches: tuple[Patch, ...]
    reads: tuple[str, ...] = ()  # targets whose attributes the adapters read (fingerprinted, not patched)
    importers: tuple[str, ...] = ()  # further modules whose names bound at import are rebound too

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(p.target for p in self.patches) + self.reads


def _points() -> tuple[Point, ...]:
    from specops.integrations.vllm import draft_steps, mrv2, pcp, target_step, v1_eagle

    return (
        Point("input_ids", (
            Patch(f"{_MR}:GPUModelRunner.prepare_inputs", mrv2.make_prepare_inputs),
            Patch(f"{_IB}:expand_idx_mapping", mrv2.make_expand_idx_mapping),
            Patch(f"{_IB}:prepare_prefill_inputs", mrv2.make_prepare_prefill_inputs),
            Patch(f"{_IB}:combine_sampled_and_draft_tokens", mrv2.make_combine_sampled_and_draft_tokens,
                  (f"{_IB}:prepare_prefill_inputs", f"{_IB}:expand_idx_mapping")),
        ), reads=(f"{_IB}:prepare_pos_seq_lens", "vllm.v1.worker.gpu.states:RequestState")),
        Point("sampled_counts", (Patch(f"{_IB}:get_num_sampled_and_rejected", mrv2.make_get_num_sampled_and_rejected),)),
        Point("post_update", (
            Patch(f"{_IB}:post_update", mrv2.make_post_update),
            Patch(f"{_IB}:post_update_num_computed_tokens", mrv2.make_post_update_num_computed_tokens),
        ), reads=(f"{_MR}:GPUModelRunner.postprocess_sampled",)),
        Point("dcp_local_seq_lens", (Patch(f"{_CP}:prepare_dcp_local_seq_lens", mrv2.make_prepare_dcp_local_seq_lens),)),
        Point("block_tables", (Patch(f"{_BT}:BlockTables.gather_block_tables", mrv2.make_gather_block_tables),),
              reads=(f"{_BT}:BlockTables",)),
        Point("draft_steps", (
            Patch(f"{_BT}:BlockTables.__init__", draft_steps.make_block_tables_init),
            Patch(f"{_AR}:TargetDependentARSpeculator.propose", draft_steps.make_propose),
            Patch(f"{_SP}:DraftModelSpeculator._copy_request_inputs", draft_steps.make_copy_request_inputs),
            Patch(f"{_AR}:prepare_prefill_inputs", draft_steps.make_prepare_prefill_inputs),
            Patch(f"{_AR}:prepare_decode_inputs", draft_steps.make_prepare_decode_inputs),
            Patch(f"{_AR}:update_draft_inputs", draft_steps.make_update_draft_inputs),
            Patch(f"{_BT}:BlockTables.compute_slot_mappings", draft_steps.make_compute_slot_mappings),
        ), reads=(f"{_BT}:BlockTables", f"{_AR}:TargetDependentARSpeculator._multi_step_decode",
                  f"{_AR}:TargetDependentARSpeculator._generate_draft")),
        Point("target_step", (Patch(f"{_IB}:prepare_pos_seq_lens", target_step.make_prepare_pos_seq_lens),),
              reads=(f"{_BT}:BlockTables", f"{_MR}:GPUModelRunner.prepare_inputs",
                     f"{_MR}:GPUModelRunner.prepare_attn", f"{_MR}:GPUModelRunner.execute_model")),
        Point("pcp", (
            Patch(f"{_PCP}:PCPManager.partition_batch", pcp.make_partition_batch),
            Patch(f"{_PCP}:PCPManager._convert_to_gathered_slot_mappings", pcp.make_convert_to_gathered_slot_mappings),
        ), reads=(f"{_PCP}:PCPManager.__init__", f"{_PCP}:PCPManager.set_block_tables",
                  *(f"{_PCP}:PCPManager.{name}" for name in (
                      "_build_batch_layout", "replicated_requests", "_iter_rank_chunks", "_get_rank_segments",
                      "_reorder_segments", "_resolve_num_reqs_after_padding")))),
        Point("v1_eagle", (
            Patch(f"{_V1R}:GPUModelRunner.propose_draft_token_ids", v1_eagle.make_propose_draft_token_ids),
            Patch(f"{_V1U}:_eagle_prepare_next_token_padded", v1_eagle.make_prepare_next_token_padded),
            Patch(f"{_V1U}:_eagle_prepare_inputs_padded", v1_eagle.make_prepare_inputs_padded_launch),
            Patch(f"{_V1P}:SpecDecodeBaseProposer.prepare_inputs_padded", v1_eagle.make_prepare_inputs_padded),
            Patch(f"{_V1U}:eagle_step_update_slot_mapping_and_metadata", v1_eagle.make_eagle_step),
            Patch(f"{_V1U}:update_num_computed_tokens_for_batch_change", v1_eagle.make_update_num_computed_tokens),
            Patch(f"{_V1P}:SpecDecodeBaseProposer.set_inputs_first_pass", v1_eagle.make_set_inputs_first_pass,
                  (f"{_V1U}:extend_all_queries_by_N",)),
        ), reads=(f"{_V1P}:SpecDecodeBaseProposer.prepare_next_token_ids_padded",
                  f"{_V1P}:SpecDecodeBaseProposer._update_positions_dependent_metadata",
                  f"{_V1U}:extend_all_queries_by_N"),
              importers=(_V1P, _V1R)),
    )


# The Ascend row (vllm-ascend 0.26.0rc1 with vLLM 0.26.0): its classes and module names.
_NPU = "vllm_ascend.worker.v2"
_IB26 = "vllm.v1.worker.gpu.input_batch"
_AR26 = "vllm.v1.worker.gpu.spec_decode.autoregressive.speculator"
ASCEND_IMPORTERS = (f"{_NPU}.model_runner", f"{_NPU}.input_batch", f"{_NPU}.block_table", _MR, _PCP, _AR26,
                    "vllm.v1.worker.gpu.sample.sampler", "vllm.v1.worker.gpu.spec_decode.rejection_sampler")


def _ascend_points() -> tuple[Point, ...]:
    from specops.integrations.vllm import ascend, ascend_dsa, mrv2

    runner = f"{_NPU}.model_runner:NPUModelRunner"
    tables = f"{_NPU}.block_table:AscendBlockTables"
    loop = f"{_NPU}.spec_decode.autoregressive.speculator:AscendAutoRegressiveSpeculator"
    return (
        Point("input_ids", (
            Patch(f"{runner}.prepare_inputs", ascend.make_prepare_inputs),
            Patch(f"{_IB26}:expand_idx_mapping", mrv2.make_expand_idx_mapping),
            Patch(f"{_IB26}:prepare_prefill_inputs", ascend.make_prepare_prefill_inputs),
            Patch(f"{_IB26}:combine_sampled_and_draft_tokens", ascend.make_combine_sampled_and_draft_tokens,
                  (f"{_IB26}:prepare_prefill_inputs", f"{_IB26}:expand_idx_mapping")),
        ), reads=("vllm.v1.worker.gpu.states:RequestState", f"{_NPU}.states:AscendRequestState")),
        Point("sampled_counts", (Patch(f"{_IB26}:get_num_sampled_and_rejected", mrv2.make_get_num_sampled_and_rejected),)),
        Point("post_update", (
            Patch(f"{_NPU}.input_batch:post_update", mrv2.make_post_update),
            Patch(f"{_IB26}:post_update_num_computed_tokens", mrv2.make_post_update_num_computed_tokens),
        ), reads=(f"{runner}.postprocess_sampled", f"{_MR}:GPUModelRunner.postprocess_sampled")),
        Point("block_tables", (Patch(f"{_BT}:BlockTables.gather_block_tables", ascend.make_gather_block_tables),),
              reads=(f"{_BT}:BlockTables",)),
        Point("target_step", (
            Patch(f"{_IB26}:prepare_pos_seq_lens", ascend.make_prepare_pos_seq_lens),
            Patch(f"{tables}.compute_slot_mappings", ascend.make_compute_slot_mappings),
        ), reads=(f"{_BT}:BlockTables", tables, f"{runner}.prepare_inputs", f"{_MR}:GPUModelRunner.prepare_attn")),
        Point("draft_steps", (
            Patch(f"{loop}.propose", ascend.make_propose),
            Patch(f"{_AR26}:prepare_decode_inputs", ascend.make_prepare_decode_inputs),
            Patch(f"{_AR26}:update_draft_inputs", ascend.make_update_draft_inputs),
        ), reads=(f"{loop}._multi_step_decode", f"{loop}._generate_draft",
                  f"{_AR26}:AutoRegressiveSpeculator._multi_step_decode",
                  f"{_AR26}:AutoRegressiveSpeculator._generate_draft", f"{_AR26}:AutoRegressiveSpeculator.propose")),
        *ascend_dsa.points(Point, Patch),
    )


POINT_NAMES = ("input_ids", "sampled_counts", "post_update", "dcp_local_seq_lens", "block_tables", "draft_steps",
               "target_step", "pcp", "v1_eagle", "dsa_cp_draft")


def release_points() -> tuple[Point, ...]:
    """The points of the release row installed here (vLLM's, or the Ascend row when
    vllm-ascend's platform is in use)."""
    from specops.integrations.vllm._guard import ascend_in_use

    return _ascend_points() if ascend_in_use() else _points()


@dataclasses.dataclass
class Status:
    active: bool = False
    points: tuple[str, ...] = ()
    reason: str = "register() has not run in this process"


_STATUS = Status()


def status() -> Status:
    return _STATUS


def _install(points: tuple[Point, ...]) -> list[str]:
    """Replaces every target, all or nothing; returns where each adapter went."""
    from specops.integrations.vllm._guard import resolve

    from specops.integrations.vllm._guard import ascend_in_use

    importers = ASCEND_IMPORTERS if ascend_in_use() else IMPORTERS
    for name in importers + tuple(m for p in points for m in p.importers):
        importlib.import_module(name)
    originals = {patch.target: resolve(patch.target) for p in points for patch in p.patches}
    planned = []  # (owner, attribute, adapter, original, where)
    for p in points:
        for patch in p.patches:
            original = originals[patch.target]
            adapter = patch.make(original, *(originals.get(t) or resolve(t) for t in patch.also))
            module_name, qualname = patch.target.split(":")
            if "." in qualname:
                class_name, attribute = qualname.split(".")
                owner = getattr(sys.modules[module_name], class_name)
                planned.append((owner, attribute, adapter, vars(owner)[attribute], patch.target))
                continue
            # A function: every loaded vLLM (and vllm-ascend) module holding the original under that name.
            for loaded_name, module in list(sys.modules.items()):
                if loaded_name.split(".")[0] in ("vllm", "vllm_ascend") and getattr(module, qualname, None) is original:
                    planned.append((module, qualname, adapter, original, f"{loaded_name}:{qualname}"))
    done = []
    try:
        for owner, attribute, adapter, original, _ in planned:
            setattr(owner, attribute, adapter)
            done.append((owner, attribute, original))
    except Exception:
        for owner, attribute, original in reversed(done):
            setattr(owner, attribute, original)
        raise
    return [where for *_, where in planned]


def activate(environ: dict | None = None) -> Status:
    """Checks and installs; returns the status. Raises nothing it can catch."""
    global _STATUS
    if _STATUS.active:
        return _STATUS
    try:
        selection = _switch.selected_points(POINT_NAMES, environ)
        if not selection.points:
            _STATUS = Status(False, (), selection.reason)
            return _STATUS
        if _ascend_waits():
            _STATUS = Status(False, (), "waiting for vllm-ascend's worker patches (the plugin patches after them)")
            return _STATUS
        points = tuple(p for p in release_points() if p.name in selection.points)
        from specops.integrations.vllm._guard import Mismatch, check

        try:
            check([target for p in points for target in p.targets])
        except Mismatch as mismatch:
            _STATUS = Status(False, (), f"patched nothing: {mismatch}")
            logger.warning("specops: %s", _STATUS.reason)
            return _STATUS
        except ImportError as exc:
            _STATUS = Status(False, (), f"patched nothing: vLLM cannot be imported ({exc})")
            logger.warning("specops: %s", _STATUS.reason)
            return _STATUS
        installed = _install(points)
        _STATUS = Status(True, selection.points, f"{selection.reason}: {len(installed)} targets patched")
        logger.info("specops: active (%s)", ", ".join(selection.points))
    except Exception as exc:  # never into vLLM
        _STATUS = Status(False, (), f"patched nothing: {type(exc).__name__}: {exc}")
        logger.warning("specops: %s", _STATUS.reason)
    return _STATUS


def diagnose(environ: dict | None = None) -> str:
    """Whether the plugin would be active in a vLLM process started with this environment, and
    why not; installs nothing (`python -m specops` prints it)."""
    if _STATUS.active:
        return f"active in this process: {_STATUS.reason}"
    try:
        import importlib.util

        if importlib.util.find_spec("vllm") is None:
            return "inactive: vLLM is not installed"
        selection = _switch.selected_points(POINT_NAMES, environ)
        if not selection.points:
            return f"inactive: {selection.reason}"
        from specops.integrations.vllm._guard import Mismatch, check

        points = tuple(p for p in release_points() if p.name in selection.points)
        try:
            check([target for p in points for target in p.targets])
        except Mismatch as mismatch:
            return f"inactive (would patch nothing): {mismatch}"
        return f"would be active: {selection.reason}"
    except Exception as exc:
        return f"inactive: {type(exc).__name__}: {exc}"


def _ascend_waits() -> bool:
    """On vllm-ascend's platform, before its worker patches: hooks `adapt_patch` (which
    `NPUWorker.__init__` calls after vLLM loaded the plugins) so that the plugin activates right
    after them, and says so. Its patches rebind the names the Ascend points target."""
    from specops.integrations.vllm._guard import ascend_in_use

    if not ascend_in_use() or "vllm_ascend.patch.worker" in sys.modules:
        return False
    import vllm_ascend.utils

    original = vllm_ascend.utils.adapt_patch
    if getattr(original, "__specops_hook__", False):
        return True

    @functools.wraps(original)
    def adapt_patch(is_global_patch: bool = False):
        result = original(is_global_patch)
        if not is_global_patch:
            vllm_ascend.utils.adapt_patch = original
            activate()
        return result

    adapt_patch.__specops_hook__ = True
    vllm_ascend.utils.adapt_patch = adapt_patch
    return True


def register() -> None:
    """vLLM's entry point (vllm.general_plugins)."""
    try:
        activate()
    except Exception:  # a plugin must never raise into vLLM
        pass
