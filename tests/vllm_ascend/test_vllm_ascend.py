"""vllm-ascend 0.26.0rc1's own classes (with vLLM 0.26.0) driven on this host without and with the
specops plugin (docs/integrations.md, "Ascend"). `make test-vllm-ascend` runs it.

Each configuration runs twice in fresh processes: SPECOPS_VLLM unset, then SPECOPS_VLLM=1, where
vLLM's load_general_plugins() loads the plugin through the installed entry point (the drivers
never import it). drive_runner.py drives the model runner V2 (NPUModelRunner, AscendBlockTables,
the MTP and Eagle speculators, AscendPCPManager); drive_dsa_cp.py the V1 proposer's DSA-CP draft
metadata (build_draft_attn_metadata over AscendDSACPMetadataBuilder). Then:
- every recorded buffer and every field of every draft metadata is bitwise equal, bar the
  documented masks (tests/vllm_integration/masks.py, checked both ways);
- launches a step strictly fewer with the plugin (and the goal ratios, printed);
- no host sync inside any adapter; device-to-host reads a step counted in both runs;
- the plugin patched its points (and the run without it none).
"""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

import pytest

# tests/vllm_integration (make test-vllm-ascend puts it on the path)
import driver_process
from instruments import record_counts
from masks import compare

HERE = Path(__file__).resolve().parent

_MRV2 = dict(driver="drive_runner.py", k=3, method="mtp", dcp=1, dcp_rank=0, pcp=1, pcp_rank=0)
_DSA = dict(driver="drive_dsa_cp.py", k=3, method="mtp", cp=2, cp_rank=0)
CONFIGS = {
    # Model runner V2: 3 KV-cache groups (tests/vllm_integration/workload.py, drive_runner.py).
    "mtp_k3": dict(_MRV2),
    "eagle_k3": dict(_MRV2, method="eagle"),
    "mtp_k1": dict(_MRV2, k=1),
    "eagle_k1": dict(_MRV2, k=1, method="eagle"),
    "mtp_k3_dcp2_rank0": dict(_MRV2, dcp=2),
    "mtp_k3_dcp2_rank1": dict(_MRV2, dcp=2, dcp_rank=1),
    # vLLM 0.26's PCP manager refuses drafts: PCP without them.
    "pcp2_rank0": dict(_MRV2, k=0, pcp=2),
    "pcp2_rank1": dict(_MRV2, k=0, pcp=2, pcp_rank=1),
    # The DSA-CP draft metadata, CP 2: the MTP first pass (build) over SWA / C4 / C128 mixes, and
    # DSpark's parallel-drafting pass (build_for_drafting; SWA groups only in 0.26.0rc1).
    "dsa_mtp_g2": dict(_DSA, groups=["swa", "c4"]),
    "dsa_mtp_g3_rank0": dict(_DSA, groups=["swa", "c4", "c128"]),
    "dsa_mtp_g3_rank1": dict(_DSA, groups=["swa", "c4", "c128"], cp_rank=1),
    "dsa_mtp_g4": dict(_DSA, groups=["swa", "c4", "c128", "swa"], cp_rank=1),
    "dsa_mtp_g6": dict(_DSA, groups=["swa", "c4", "c128", "swa", "c4", "c128"]),
    "dsa_dspark_g2": dict(_DSA, method="dspark", groups=["swa", "swa"]),
    "dsa_dspark_g3_rank0": dict(_DSA, method="dspark", groups=["swa", "swa", "swa"]),
    "dsa_dspark_g3_rank1": dict(_DSA, method="dspark", groups=["swa", "swa", "swa"], cp_rank=1),
    "dsa_dspark_g6": dict(_DSA, method="dspark", groups=["swa"] * 6, cp_rank=1),
}
STEPS = int(os.environ.get("SPECOPS_VLLM_STEPS", "30"))
SEED = 1


def _start(cfg: dict, plugin: bool, tmp: Path):
    # The runner frees a step's finished requests in the set's order: one hash seed for both runs.
    return driver_process.start(HERE / cfg["driver"], cfg, plugin, tmp, "vllm-ascend alone",
                                [HERE, HERE / "stand_ins", HERE.parent / "vllm_integration", HERE.parent],
                                env={"PYTHONHASHSEED": "0"})


def _finish(started, plugin: bool) -> tuple[dict, str]:
    return driver_process.finish(started, plugin, "vllm-ascend alone")


def _drive(cfg: dict, plugin: bool, tmp: Path) -> tuple[dict, str]:
    return _finish(_start(cfg, plugin, tmp), plugin)


@functools.cache
def _runs(name: str) -> tuple[dict, dict]:
    """Both runs of a configuration, in two processes at once."""
    cfg = dict(CONFIGS[name], seed=SEED, steps=STEPS)
    tmp = Path(tempfile.mkdtemp(prefix=f"specops_ascend_{name}_"))
    alone, with_plugin = _start(cfg, False, tmp), _start(cfg, True, tmp)
    return _finish(alone, False)[0], _finish(with_plugin, True)[0]


def _per_step(run: dict, key: str) -> float:
    steps = run.get("costs") or run["counts"]
    return sum(step[key] for step in steps) / len(steps)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_buffers_equal_on_every_step(name):
    theirs, ours = _runs(name)
    assert theirs["points"] == [], "vllm-ascend alone found adapters installed"
    assert ours["points"], "the plugin installed no adapter (is specops installed with its entry point?)"
    compare(theirs, ours)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_fewer_launches_and_no_host_sync(name):
    theirs, ours = _runs(name)
    before, after = _per_step(theirs, "launches"), _per_step(ours, "launches")
    line = f"{name}: {before:.2f} launches a step with vllm-ascend alone, {after:.2f} with the plugin"
    if "costs" in theirs:
        line += f"; device-to-host reads a step {_per_step(theirs, 'd2h'):.2f} -> {_per_step(ours, 'd2h'):.2f}"
    print(line + f" ({len(theirs['counts'])} steps)")
    assert after < before
    syncs = {}
    for step in ours["counts"]:
        for where, count in step["adapter_syncs"].items():
            syncs[where] = syncs.get(where, 0) + count
    assert syncs == {}, f"host syncs inside adapters: {syncs}"
    if CONFIGS[name]["driver"] == "drive_runner.py":
        # Model runner V2's rows only: the DSA-CP draft metadata's counts are a pass's, not a step's.
        record_counts("vllm-ascend", "0.26.0rc1", name, len(theirs["counts"]), (before, after),
                      (_per_step(theirs, "aten"), _per_step(ours, "aten")), sum(syncs.values()))


def test_an_unsupported_release_patches_nothing_and_warns_once(tmp_path):
    cfg = dict(CONFIGS["mtp_k1"], seed=SEED, steps=2, fake_ascend_version="0.27.0")
    run, log = _drive(cfg, True, tmp_path)
    assert run["points"] == [] and not any(state == "active" for _, state, _ in run["states"])
    warnings = [line for line in log.splitlines() if "specops:" in line]
    assert len(warnings) == 1, log[-3000:]
    assert "vllm-ascend 0.27.0 is not supported (supported: " in warnings[0]


def test_a_changed_target_skips_its_point_alone_with_one_warning(tmp_path):
    """AscendBlockTables.compute_slot_mappings altered: target_step is skipped, and draft_steps,
    which needs it; every other point of the row patches."""
    target = "vllm_ascend.worker.v2.block_table:AscendBlockTables.compute_slot_mappings"
    cfg = dict(CONFIGS["mtp_k1"], seed=SEED, steps=2, alter=target)
    run, log = _drive(cfg, True, tmp_path)
    states = {name: (state, reason) for name, state, reason in run["states"]}
    assert states["target_step"][0] == "skipped" and f"point target_step: {target} differs" in states["target_step"][1]
    # Points the row does not serve are listed as skipped too (without a warning).
    skipped = {name for name, (state, reason) in states.items() if state == "skipped" and " has no " not in reason}
    assert skipped == {"target_step", "draft_steps"}, states
    assert {name for name, (state, _) in states.items() if state == "active"} == {
        "request_state", "input_ids", "sampled_counts", "post_update", "block_tables", "dsa_cp_draft"}
    warnings = [line for line in log.splitlines() if "specops:" in line]
    assert len(warnings) == 2, log[-3000:]
    assert any(f"point target_step: {target} differs" in w for w in warnings)
    assert any("point draft_steps needs target_step" in w for w in warnings)
