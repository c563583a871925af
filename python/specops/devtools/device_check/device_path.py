"""Step 2: every op's device path on the op specs' inputs against the native CPU op.

Each op of the op table (tests/op_table.py) is called on its valid call, on random valid calls
(`OpSpec.draw_call`) and on its edge cases (`OpSpec.corruptions`: unusual or invalid values the
device kernels must handle, and entries at the int32 / int64 extremes). The device call gets
every tensor (but the host copies, `OpSpec.host_tensors`) as a view in the middle of a larger
device buffer filled with a canary, as tests/hardening/test_guard_bands.py does on the CPU: after the call
no band changed, no input changed, and every output equals the oracle's:

- valid calls, and edge cases the native op accepts: the native CPU op (C++) on the same inputs;
- edge cases the native op rejects (where a device kernel writes PAD or a documented neutral
  value instead of raising): the pure-torch reference on the CPU;
- edge cases whose outputs are unspecified (the input contradicts itself): bands and inputs only.

On a device the call goes through the dispatcher (`torch.ops.specops.<op>` on device tensors:
the op's check, then its Triton kernel); without one, through the Triton launchers on CPU
tensors under the interpreter. Examples are drawn deterministically (derandomized Hypothesis)
and run round-robin over the ops, so a budget that runs out leaves no op without its valid call.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import specops
from specops.devtools.device_check._common import Deadline, Target, cloned, error_text, moved, round_robin

GUARD = 4
# Values no op computes, per dtype: the float ones exact in bfloat16 and float16; the unsigned
# ones for build_tree_kernel_efficient's bit-packed mask words; float16 / int8 for KV caches.
OUTPUT_CANARY = {torch.int32: -0x21524111, torch.int64: -0x2152411021524111, torch.bool: True,
                 torch.float32: -12288.0, torch.bfloat16: -12288.0, torch.float16: -12288.0, torch.int8: -99,
                 torch.uint8: 0xA5, torch.uint16: 0xBEEF, torch.uint32: 0xDEADBEEF}
INPUT_CANARY = {torch.int32: 0x3EADBEEF, torch.int64: 0x3EADBEEF3EADBEEF, torch.bool: True,
                torch.float32: -20480.0, torch.bfloat16: -20480.0, torch.float16: -20480.0, torch.int8: -77,
                torch.uint8: 0x5A, torch.uint16: 0x4EEF, torch.uint32: 0x3EADBEEF}


@dataclasses.dataclass
class Example:
    """One call of an op: `oracle` names what its outputs are compared with ("native",
    "reference", or "bounds": only the bands and the inputs)."""

    kind: str  # "valid", "random", "edge: <label>", "extreme: <tensor>"
    call: dict[str, Any]
    oracle: str


def _collect(strategy: st.SearchStrategy, count: int) -> list:
    """`count` examples of a strategy (fewer when it has fewer), the same on every run."""
    found: list = []
    if count <= 0:
        return found

    @settings(max_examples=count, derandomize=True, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(value=strategy)
    def collect(value):
        found.append(value)

    collect()
    return found[:count]


def examples(spec, random_calls: int, edge_cases: int) -> list[Example]:
    """The valid call, `random_calls` random valid calls and `edge_cases` edge cases (half
    corruptions, half extreme entries) of one op."""
    result = [Example("valid", spec.valid_call(), "native")]
    result += [Example("random", call, "native") for call in _collect(spec.draw_call, random_calls)]
    if edge_cases and spec.corruptions:
        result += _collect(_corrupted(spec), (edge_cases + 1) // 2)
    if edge_cases:
        result += _collect(_extreme(spec), edge_cases // 2)
    return result


def _corrupted(spec) -> st.SearchStrategy[Example]:
    @st.composite
    def draw(data_draw):
        call = data_draw(spec.draw_call)
        corruption = data_draw(st.sampled_from(spec.corruptions))
        native_must_raise = corruption.apply(data_draw, call)
        oracle = "bounds" if corruption.device != "agree" else "reference" if native_must_raise else "native"
        return Example(f"edge: {corruption.label}", call, oracle)
    return draw()


def _extreme(spec) -> st.SearchStrategy[Example]:
    inputs = [key for key in spec.tensors if key not in spec.outputs]

    @st.composite
    def draw(data_draw):
        call = data_draw(spec.draw_call)
        key = _extreme_entries(data_draw, call, inputs)
        if key is None:
            return Example("random", call, "native")
        # The native op may reject an extreme (it writes nothing then); the reference is the
        # device's oracle. Offsets at an extreme describe no layout: bounds only.
        return Example(f"extreme: {key}", call, "bounds" if key in spec.offsets else "reference")
    return draw()


def extreme_values(dtype: torch.dtype) -> tuple[int, ...]:
    """Where int32 index math wraps (and, in int64 tensors, where int32 stops and int64 ends):
    op_specs._spec.extreme_values, which the guard-band tests use."""
    values = (-(2**31), -(2**31) + 1, -1, 0, 2**31 - 2, 2**31 - 1)
    if dtype == torch.int64:
        values += (-(2**63), -(2**31) - 1, 2**31, 2**32, 2**63 - 1)
    return values


def _extreme_entries(data_draw, call: dict, inputs: list[str]) -> str | None:
    """Up to three entries of one integer input tensor set to extremes; the tensor's key, or
    None when the call has no such tensor with entries."""
    present = [key for key in inputs if _present(call, key) and isinstance(_get(call, key), torch.Tensor)
               and _get(call, key).numel() and _get(call, key).dtype in (torch.int32, torch.int64)]
    if not present:
        return None
    key = data_draw(st.sampled_from(present))
    entries = _get(call, key).view(-1)
    for _ in range(data_draw(st.integers(1, 3))):
        index = data_draw(st.integers(0, entries.numel() - 1))
        entries[index] = data_draw(st.sampled_from(extreme_values(entries.dtype)))
    return key


# ---------------------------------------------------------------- running one example

@dataclasses.dataclass
class Banded:
    view: torch.Tensor
    buffer: torch.Tensor
    region: tuple[slice, ...]
    fill: Any


def _banded(t: torch.Tensor, row_stride: bool, fill: Any, device: torch.device) -> Banded:
    if row_stride and t.dim() >= 2:
        shape = (t.size(0) + 2 * GUARD, *t.shape[1:-1], t.size(-1) + 2 * GUARD)
        region = (slice(GUARD, GUARD + t.size(0)), *[slice(None)] * (t.dim() - 2), slice(GUARD, GUARD + t.size(-1)))
        buffer = torch.full(shape, fill, dtype=t.dtype, device=device)
        view = buffer[region]
    else:
        region = (slice(GUARD, GUARD + t.numel()),)
        buffer = torch.full((t.numel() + 2 * GUARD,), fill, dtype=t.dtype, device=device)
        view = buffer[region].view(t.shape)
    view.copy_(t.to(device))
    return Banded(view, buffer, region, fill)


def _breach(band: Banded) -> str | None:
    outside = band.buffer.cpu().clone()
    outside[band.region] = band.fill
    changed = (outside != band.fill).nonzero()
    if changed.numel() == 0:
        return None
    index = tuple(changed[0].tolist())
    return f"buffer{list(index)} = {outside[index].item()} ({changed.size(0)} changed)"


def _present(call: dict, key: str) -> bool:
    name, _, index = key.partition("[")
    return name in call and (not index or int(index[:-1]) < len(call[name] or []))


def _get(call: dict, key: str) -> Any:
    name, _, index = key.partition("[")
    return call.get(name) if not index else call[name][int(index[:-1])]


def _set(call: dict, key: str, value: Any) -> None:
    name, _, index = key.partition("[")
    if not index:
        call[name] = value
    else:
        position = int(index[:-1])
        call[name] = [value if i == position else item for i, item in enumerate(call[name])]


def _host_values(result: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(result):
        return {field.name: getattr(result, field.name) for field in dataclasses.fields(result)
                if not isinstance(getattr(result, field.name), torch.Tensor)}
    return {}


def _oracle_outputs(spec, call: dict, oracle: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]] | str:
    """The outputs of the CPU oracle on a copy of the call, or its error's text."""
    args = {name: cloned(value) for name, value in call.items()}
    try:
        with specops.backend(oracle):
            result = spec.wrapper(**args)
    except (ValueError, RuntimeError, IndexError) as error:
        return error_text(error)
    outputs = {key: _get(args, key) for key in spec.outputs if _present(args, key)}
    # Optional outputs a call leaves out (None) are not compared.
    return {key: value for key, value in outputs.items() if isinstance(value, torch.Tensor)}, _host_values(result)


def run_example(spec, example: Example, target: Target) -> str | None:
    """None when the device call agrees and stays inside its buffers, else what went wrong."""
    device = target.tensor_device
    call = example.call
    oracle = example.oracle
    if oracle == "native" and not target.native:
        oracle = "reference"  # no extension (its build failed): the reference stands in
    expected = _oracle_outputs(spec, call, oracle) if oracle != "bounds" else None
    if isinstance(expected, str):
        if example.kind in ("valid", "random"):
            return f"the {oracle} CPU op rejected a valid call: {expected}"
        expected = None  # an edge case the reference cannot compute: the bands and inputs only
    bands: dict[str, Banded] = {}
    args = {name: (value if name in spec.host_tensors else moved(value, device)) for name, value in call.items()}
    for key, arg in spec.tensors.items():
        if key in spec.host_tensors or not _present(call, key):
            continue
        tensor = _get(call, key)
        if isinstance(tensor, torch.Tensor):
            fill = (OUTPUT_CANARY if key in spec.outputs else INPUT_CANARY)[tensor.dtype]
            bands[key] = _banded(tensor, arg.row_stride, fill, device)
            _set(args, key, bands[key].view)
    before = {key: band.buffer.cpu().clone() for key, band in bands.items()}
    with specops.backend(target.device_backend):
        result = spec.wrapper(**args)
    target.synchronize()
    for key, band in bands.items():
        breach = _breach(band)
        if breach is not None:
            return f"wrote outside {key}: {breach}"
        if key not in spec.outputs and not torch.equal(band.buffer.cpu(), before[key]):
            return f"changed its input {key}"
    if expected is None:
        return None
    outputs, host_values = expected
    for key, want in outputs.items():
        got = bands[key].view.cpu() if key in bands else _get(args, key)
        if got.shape != want.shape or not torch.equal(got, want.cpu()):
            mismatch = (got != want).nonzero() if got.shape == want.shape else None
            where = f", first at {tuple(mismatch[0].tolist())}" if mismatch is not None and mismatch.numel() else ""
            return f"{key} differs from the {oracle} CPU op ({_count(mismatch)} entries{where})"
    if _host_values(result) != host_values:
        return f"host values {_host_values(result)} != the {oracle} CPU op's {host_values}"
    return None


def _count(mismatch: torch.Tensor | None) -> str:
    return "shape" if mismatch is None else str(mismatch.size(0))


def run(target: Target, op_table: tuple, deadline: Deadline, *, random_calls: int, edge_cases: int,
        progress=None) -> dict[str, Any]:
    """Every op's examples, round-robin, until the deadline. Per op: calls run, failures (the
    first few), and the kinds covered."""
    ops: dict[str, dict[str, Any]] = {}
    queues: dict[str, list[Example]] = {}
    for spec in op_table:
        ops[spec.name] = {"status": "ok", "calls": 0, "failed": 0, "failures": [], "kinds": []}
        try:
            queues[spec.name] = examples(spec, random_calls, edge_cases)
        except Exception as error:  # noqa: BLE001  (one op's specs must not stop the others)
            ops[spec.name].update(status="failed", failures=[f"drawing its examples: {error_text(error)}"])
            queues[spec.name] = [Example("valid", spec.valid_call(), "native")]
    by_name = {spec.name: spec for spec in op_table}
    started = time.monotonic()
    unrun = sum(len(queue) for queue in queues.values())
    for name, example in round_robin(queues):
        if deadline.passed():
            break
        unrun -= 1
        entry = ops[name]
        entry["calls"] += 1
        if example.kind.split(":")[0] not in entry["kinds"]:
            entry["kinds"].append(example.kind.split(":")[0])
        try:
            problem = run_example(by_name[name], example, target)
        except Exception as error:  # noqa: BLE001
            problem = f"raised {error_text(error)}"
        if problem is not None:
            entry["failed"] += 1
            entry["status"] = "failed"
            if len(entry["failures"]) < 3:
                entry["failures"].append(f"{example.kind}: {problem}")
        if progress is not None:
            progress(ops)
    for entry in ops.values():
        if entry["calls"] == 0 and entry["status"] == "ok":
            entry["status"] = "skipped"
            entry["reason"] = "time budget spent before its first call"
    failed_ops = sorted(name for name, entry in ops.items() if entry["status"] == "failed")
    return {
        "status": "failed" if failed_ops else "ok" if unrun == 0 else "partial",
        "reason": (f"failed: {', '.join(failed_ops)}" if failed_ops else
                   f"time budget: {unrun} examples not run" if unrun else ""),
        "mode": (f"torch.ops.specops on {target.device} vs the native CPU op" if target.device is not None
                 else "Triton interpreter on CPU tensors vs the native CPU op (no device)"),
        "wall_s": round(time.monotonic() - started, 1),
        "ops": ops,
    }
