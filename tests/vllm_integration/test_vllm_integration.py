"""vLLM's own model runner V2, and (0.33) its V1 runner's Eagle path, driven on this host without
and with the specops plugin (docs/integrations.md, docs/conformance.md). `make
test-vllm-integration` runs it.

Each configuration runs twice in fresh processes (drive_mrv2.py, or drive_v1.py for the V1 path;
one process runs every configuration of its driver): SPECOPS_VLLM unset, then SPECOPS_VLLM=1, where vLLM's load_general_plugins() loads the plugin through the installed entry
point (this file never imports it). Then:
- every recorded buffer of every step and forward is bitwise equal, bar the named masks of
  masks.py, each checked in both directions; a difference names the buffer, step, phase, index;
- the plugin's run launches strictly fewer kernels;
- no host sync inside any adapter (instruments.py says what counts as one on this host);
- the plugin actually patched the points (and the run without it patched none).
The guard: a faked unsupported release patches nothing and logs one warning naming it; a target
altered, or wrapped by another plugin with functools.wraps, skips its point alone with one
warning naming the point and the target, the other points patched.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import driver_process
from instruments import record_counts
from masks import compare

HERE = Path(__file__).resolve().parent

STEPS = int(os.environ.get("SPECOPS_VLLM_STEPS", "30"))


def _release() -> str:
    """The vLLM release under test (the Makefile names it; else the one installed)."""
    named = os.environ.get("SPECOPS_VLLM_RELEASE")
    if named:
        return named
    import importlib.metadata

    return importlib.metadata.version("vllm")


RELEASE = _release()

# (name, drafts K, DCP size, DCP rank, PCP size, PCP rank) for model runner V2 (drive_mrv2.py); 30
# steps per seed.
CONFIGS = {
    "k3_dcp1": dict(k=3, dcp=1, dcp_rank=0, pcp=1, pcp_rank=0),
    "k1_dcp1": dict(k=1, dcp=1, dcp_rank=0, pcp=1, pcp_rank=0),
    "k3_dcp2_rank0": dict(k=3, dcp=2, dcp_rank=0, pcp=1, pcp_rank=0),
    "k3_dcp2_rank1": dict(k=3, dcp=2, dcp_rank=1, pcp=1, pcp_rank=0),
    "k1_dcp4_rank2": dict(k=1, dcp=4, dcp_rank=2, pcp=1, pcp_rank=0),
    "k3_pcp2_rank0": dict(k=3, dcp=1, dcp_rank=0, pcp=2, pcp_rank=0),
    "k3_pcp2_rank1": dict(k=3, dcp=1, dcp_rank=0, pcp=2, pcp_rank=1),
}
if RELEASE == "0.33.0":  # 0.34 removes the V1 runner
    CONFIGS.update({
        # The V1 runner's Eagle path (drive_v1.py): one KV-cache group, no context parallelism.
        "v1_k3": dict(driver="drive_v1.py", k=3),
        "v1_k1": dict(driver="drive_v1.py", k=1),
        "v1_k3_parallel": dict(driver="drive_v1.py", k=3, parallel=True),
    })

SEED = 1


def _start(cfg: dict | list[dict], plugin: bool, tmp: Path) -> tuple[subprocess.Popen, Path]:
    """A driver process on one configuration, or on a list of them (run one after the other)."""
    driver = HERE / (cfg[0] if isinstance(cfg, list) else cfg).get("driver", "drive_mrv2.py")
    return driver_process.start(driver, cfg, plugin, tmp, "vLLM alone", [HERE])


def _finish(started: tuple[subprocess.Popen, Path], plugin: bool) -> tuple[dict, str]:
    return driver_process.finish(started, plugin, "vLLM alone")


def _drive(cfg: dict, plugin: bool, tmp: Path) -> tuple[dict, str]:
    return _finish(_start(cfg, plugin, tmp), plugin)


@functools.cache
def _batch(driver: str) -> tuple[dict, dict]:
    """Every configuration of one driver without and with the plugin: two processes at once, each
    running the configurations one after the other (vLLM's import is most of a short run)."""
    import tempfile

    configs = [dict(cfg, name=name, seed=SEED, steps=STEPS) for name, cfg in CONFIGS.items()
               if cfg.get("driver", "drive_mrv2.py") == driver]
    tmp = Path(tempfile.mkdtemp(prefix=f"specops_vllm_{driver.removesuffix('.py')}_"))
    alone, with_plugin = _start(configs, False, tmp), _start(configs, True, tmp)
    return _finish(alone, False)[0], _finish(with_plugin, True)[0]


def _runs(name: str) -> tuple[dict, dict]:
    """Both runs of a configuration."""
    theirs, ours = _batch(CONFIGS[name].get("driver", "drive_mrv2.py"))
    return theirs[name], ours[name]


def _launches(run: dict) -> int:
    return sum(step["launches"] for step in run["counts"])


@pytest.mark.parametrize("name", list(CONFIGS))
def test_buffers_equal_on_every_step(name):
    theirs, ours = _runs(name)
    assert theirs["points"] == [], "vLLM alone found adapters installed"
    assert ours["points"], "the plugin installed no adapter (is specops installed with its entry point?)"
    # Every point the release serves is patched (a point it does not serve is skipped as such).
    assert [(n, why) for n, state, why in ours["states"] if state != "active" and " has no " not in why] == []
    compare(theirs, ours)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_fewer_launches_and_no_host_sync(name):
    theirs, ours = _runs(name)
    vllm_launches, our_launches = _launches(theirs), _launches(ours)
    steps = len(theirs["counts"])
    aten = [sum(step["aten"] for step in run["counts"]) / steps for run in (theirs, ours)]
    print(f"{name}: {vllm_launches / steps:.2f} launches a step with vLLM alone, {our_launches / steps:.2f} with the "
          f"plugin ({steps} steps; tensor ops besides: {aten[0]:.1f} -> {aten[1]:.1f} a step)")
    syncs = {}
    for step in ours["counts"]:
        for where, count in step["adapter_syncs"].items():
            syncs[where] = syncs.get(where, 0) + count
    record_counts("vLLM", RELEASE, name, steps, (vllm_launches / steps, our_launches / steps), aten,
                  sum(syncs.values()))
    assert our_launches < vllm_launches
    # The draft-decode loops (drive_mrv2.py counts inside each loop method; "captured": the
    # fused loop's body called alone, as vLLM captures it in a full graph).
    for loop, theirs_loop in theirs.get("loops", {}).items():
        ours_loop = ours["loops"][loop]
        if theirs_loop["steps"]:
            print(f"{name}: {loop} draft loop, {theirs_loop['launches'] / theirs_loop['steps']:.2f} launches a draft "
                  f"step with vLLM alone, {ours_loop['launches'] / ours_loop['steps']:.2f} with the plugin "
                  f"({theirs_loop['steps']} draft steps)")
            assert ours_loop["launches"] < theirs_loop["launches"], loop
    assert syncs == {}, f"host syncs inside adapters: {syncs}"


def test_compare_fails_on_a_changed_entry():
    """The comparison is not vacuous: one entry changed in one record is named."""
    theirs, ours = _runs("k3_dcp1")
    step, phase, buffers = ours["records"][-1]
    tampered = dict(buffers)
    tampered["req.num_computed_tokens"] = buffers["req.num_computed_tokens"].clone()
    tampered["req.num_computed_tokens"][3] += 1
    changed = dict(ours, records=ours["records"][:-1] + [(step, phase, tampered)])
    with pytest.raises(AssertionError, match=r"req.num_computed_tokens: index \[3\]"):
        compare(theirs, changed)


def test_an_unsupported_release_patches_nothing_and_warns_once(tmp_path):
    cfg = dict(CONFIGS["k1_dcp1"], seed=SEED, steps=2, fake_version="0.99.0")
    run, stderr = _drive(cfg, True, tmp_path)
    assert run["points"] == [] and not any(state == "active" for _, state, _ in run["states"])
    warnings = [line for line in stderr.splitlines() if "specops:" in line]
    assert len(warnings) == 1, stderr[-3000:]
    assert "vLLM 0.99.0 is not supported (supported: vLLM " in warnings[0]


_GUARD_CASES = [("alter", "post_update", "vllm.v1.worker.gpu.input_batch:post_update"),
                # Another plugin's functools.wraps wrapper: inspect.unwrap would see vLLM's own.
                ("wrap", "post_update", "vllm.v1.worker.gpu.input_batch:post_update"),
                ("wrap", "draft_steps", "vllm.v1.worker.gpu.spec_decode.target_dependent_ar.speculator:"
                                        "prepare_prefill_inputs")]
if RELEASE == "0.33.0":
    _GUARD_CASES.append(("alter", "v1_eagle", "vllm.v1.spec_decode.utils:eagle_step_update_slot_mapping_and_metadata"))


@pytest.mark.parametrize("how, point, target", _GUARD_CASES)
def test_a_changed_target_skips_its_point_alone_with_one_warning(how, point, target, tmp_path):
    cfg = dict(CONFIGS["k1_dcp1"], seed=SEED, steps=2, **{how: target})
    run, stderr = _drive(cfg, True, tmp_path)
    states = {name: (state, reason) for name, state, reason in run["states"]}
    assert states[point][0] == "skipped" and f"point {point}: {target} differs" in states[point][1]
    # The other points stand: every one the release serves is active (target_step needs draft_steps).
    skipped = {name for name, (state, why) in states.items() if state == "skipped" and " has no " not in why}
    assert skipped == ({point, "target_step"} if point == "draft_steps" else {point}), states
    warnings = [line for line in stderr.splitlines() if "specops:" in line]
    assert len(warnings) == len(skipped), stderr[-3000:]
    assert f"point {point}: {target} differs" in warnings[0]


def test_the_fingerprints_tool_prints_this_release_s_row():
    """`python -m specops.integrations.vllm fingerprints` runs on the installed release and prints
    the row the release table holds for it: every target of its points found, none changed."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "specops.integrations.vllm", "fingerprints"], env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    key = f"vllm {RELEASE}"
    start = lines.index(f"    {key!r}: {{")
    printed = dict(line.strip().rstrip(",").replace("'", "").split(": ") for line in lines[start + 1:-1])
    from specops.integrations.vllm._fingerprints import FINGERPRINTS

    assert printed == FINGERPRINTS[key]
    assert all(line.split()[0] in ("same", "changed", "missing") for line in lines if not line.startswith(("#", " ")))


def test_instruments_count_host_reads_inside_adapters_only():
    """The sync counter is not vacuous: .item() and .tolist() inside a marked adapter count,
    the same calls outside it do not."""
    import types

    from instruments import Instruments, watch_adapters

    def adapter(t):
        return t.sum().item() + len(t.tolist())

    adapter.__specops_point__ = "probe"
    owner = types.ModuleType("probe_owner")
    owner.adapter = adapter
    assert watch_adapters([owner]) == ["probe_owner.adapter"]
    with Instruments() as instruments:
        t = torch.arange(4)
        for _ in range(2):  # every step's counts, not only the first's
            owner.adapter(t)
            t.sum().item()
            t.tolist()
            counts = instruments.step_counts()
            assert counts.adapter_syncs == {"probe: aten::_local_scalar_dense": 1, "probe: Tensor.tolist": 1}


def test_instruments_count_a_launch_not_the_interpreters_tensor_ops():
    """An interpreted kernel is one launch; the interpreter's own copies of its arguments are
    neither tensor ops nor, inside an adapter, host syncs."""
    import types

    import triton
    import triton.language as tl
    from instruments import Instruments, watch_adapters

    @triton.jit
    def add_one(src, dst):
        offsets = tl.arange(0, 4)
        tl.store(dst + offsets, tl.load(src + offsets) + 1)

    def adapter(src, dst):
        add_one[(1,)](src, dst)

    adapter.__specops_point__ = "probe"
    owner = types.ModuleType("probe_owner")
    owner.adapter = adapter
    watch_adapters([owner])
    src, dst = torch.arange(4), torch.zeros(4, dtype=torch.int64)
    with Instruments() as instruments:
        owner.adapter(src, dst)
        counts = instruments.step_counts()
    assert dst.tolist() == [1, 2, 3, 4]
    assert (counts.launches, counts.aten, counts.adapter_syncs) == (1, 0, {})


def test_instruments_count_device_values_given_to_a_host_adapter():
    """A host adapter (host planning, not watched for reads) counts one host sync for each tensor
    it is given, and none for host values; specops' host ops are not counted as launches."""
    import types

    import numpy as np
    from instruments import Instruments, watch_adapters

    import specops

    def plan(owner, counts, pcp_world_size):
        return specops.pcp_partition(counts, counts, counts > 0, pcp_world_size).padded_num_tokens

    plan.__specops_point__, plan.__specops_host__ = "probe", True
    owner = types.ModuleType("probe_owner")
    owner.plan = plan
    assert watch_adapters([owner]) == ["probe_owner.plan"]
    with Instruments() as instruments:
        owner.plan(owner, np.array([3, 1], dtype=np.int32), 2)
        host_only = instruments.step_counts()
        owner.plan(owner, torch.tensor([3, 1], dtype=torch.int32), 2)
        given_a_tensor = instruments.step_counts()
    assert host_only.adapter_syncs == {} and host_only.host == {"pcp_partition": 1} and host_only.launches == 0
    assert given_a_tensor.adapter_syncs == {"probe: tensor argument to a host adapter": 1}
