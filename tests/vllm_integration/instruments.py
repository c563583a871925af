"""What the drivers measure: the buffers (Recorder), kernel launches and host syncs.

Launches. vLLM's kernels run under Triton's interpreter: each launch is one call of
`InterpretedFunction.run`, wrapped here. specops' ops reach the dispatcher as
`torch.ops.specops.*` (the native backend: on a GPU one Triton launch each) or, with the triton
backend, launch through the same interpreter entry; a TorchDispatchMode counts the first kind.
The two never overlap (a native op on CPU tensors runs C++, no interpreter), so their sum is
the step's kernel launches in either run. specops' host ops (a C++ body on host data, no device
kernel: pcp_partition) are not SpecOps (specops.ops.registry) and are counted apart (`host`).

Tensor ops. The aten ops the runner and the adapters issue outside any kernel are counted apart
(`aten`, views excluded), for information: on a GPU most are kernels too (the tensor ops of
vLLM's PCP partition, its slot-mapping conversion), some are host work on host tensors, and
neither vLLM's counts nor specops' goals include them. The interpreter's own tensor ops while it
runs a kernel (about seven per tensor argument: it emulates the device on host copies) and the
Recorder's snapshots are neither counted nor watched for syncs.

Host syncs. On a GPU a host read of a device value is `aten::_local_scalar_dense` (`.item()`,
`int(t)`, `bool(t)`), a device-to-host copy (`copy_` / `_to_copy` into host memory), or
`.tolist()` / `.numpy()` of a device tensor. On this host every tensor of the runner stands for
a device tensor, so inside an adapter (a function or method the plugin installed, recognised by
its `__specops_point__` attribute; a seam, which wraps one of vLLM's own methods and runs its
body, is not watched itself: the adapters it calls are) each of these counts as one host sync: `_local_scalar_dense`,
`copy_` and `_to_copy` seen by the dispatch mode, and `Tensor.tolist`, `Tensor.numpy`,
`Tensor.__array__` called from Python (they bypass the dispatcher). An adapter is meant to launch
ops into buffers vLLM handed it and nothing else, so the rule has no exception.

A host adapter (`point(..., host=True)`: the PCP layout) replaces vLLM's host planning: it reads
host tensors it made itself and copies its result to the device once, which on this host looks
like the reads above. What makes it sync-free is what it is given: every argument must be a
host value (a NumPy array, a Python number, None), and its `self` gives it host settings only
(the fingerprinted `__init__`). The proof checks the arguments on every call and counts a tensor
argument as a host sync.
"""

from __future__ import annotations

import collections
import contextvars
import functools
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_in_adapter: contextvars.ContextVar[str | None] = contextvars.ContextVar("in_adapter", default=None)
# Set while the interpreter runs a kernel or the Recorder copies buffers: not the runner's work.
_uncounted: contextvars.ContextVar[bool] = contextvars.ContextVar("uncounted", default=False)
_SYNC_OPS = ("aten::_local_scalar_dense", "aten::copy_", "aten::_to_copy")
# Device values given to a host adapter, until Instruments.step_counts collects them.
_host_adapter_syncs: collections.Counter = collections.Counter()


class Counts:
    def __init__(self):
        self.triton = collections.Counter()  # kernel name -> launches
        self.specops = collections.Counter()  # op name -> calls
        self.host = collections.Counter()  # specops host op name -> calls
        self.aten = 0
        self.adapter_syncs = collections.Counter()  # "point: op" -> count

    @property
    def launches(self) -> int:
        return sum(self.triton.values()) + sum(self.specops.values())

    def as_dict(self) -> dict:
        return {"triton": dict(self.triton), "specops": dict(self.specops), "host": dict(self.host), "aten": self.aten,
                "adapter_syncs": dict(self.adapter_syncs), "launches": self.launches}


@functools.cache
def _device_ops() -> frozenset[str]:
    from specops.ops.registry import OPS

    return frozenset(OPS)


class _Mode(TorchDispatchMode):
    def __init__(self, counts: Counts):
        super().__init__()
        self.counts = counts

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if _uncounted.get():  # the interpreter emulating a kernel, or a snapshot
            return func(*args, **(kwargs or {}))
        name = func.name()
        if func.namespace == "specops":
            op = name.split("::")[1].split(".")[0]
            (self.counts.specops if op in _device_ops() else self.counts.host)[op] += 1
        elif not func.is_view:
            self.counts.aten += 1
        point = _in_adapter.get()
        if point is not None and name in _SYNC_OPS:
            self.counts.adapter_syncs[f"{point}: {name}"] += 1
        return func(*args, **(kwargs or {}))


class Recorder:
    """Copies of the buffers a driver records, in order: (step, phase, {name: tensor})."""

    def __init__(self):
        self.records = []

    def add(self, step: int, phase: str, buffers: dict) -> None:
        token = _uncounted.set(True)
        try:
            self.records.append((step, phase, {n: t.detach().clone() for n, t in buffers.items() if t is not None}))
        finally:
            _uncounted.reset(token)


_ACTIVE: list = [None]  # the Instruments the hooks count into
_HOOKED: list[bool] = [False]


def _install_hooks() -> None:
    if _HOOKED[0]:
        return
    _HOOKED[0] = True
    from triton.runtime import interpreter

    original_run = interpreter.InterpretedFunction.run

    def run(self, *args, **kwargs):
        if _ACTIVE[0] is not None:
            _ACTIVE[0].counts.triton[getattr(self.fn, "__name__", repr(self.fn))] += 1
        token = _uncounted.set(True)
        try:
            return original_run(self, *args, **kwargs)
        finally:
            _uncounted.reset(token)

    interpreter.InterpretedFunction.run = run
    for name in ("tolist", "numpy", "__array__"):
        _wrap_host_read(name)


def _wrap_host_read(name: str) -> None:
    original = getattr(torch.Tensor, name)

    @functools.wraps(original)
    def host_read(tensor, *args, **kwargs):
        point = _in_adapter.get()
        if point is not None and not _uncounted.get() and _ACTIVE[0] is not None:
            _ACTIVE[0].counts.adapter_syncs[f"{point}: Tensor.{name}"] += 1
        return original(tensor, *args, **kwargs)

    setattr(torch.Tensor, name, host_read)


class Instruments:
    """Installs the counters; `step_counts()` hands out the counts since the last call. The hooks
    (the interpreter's launch entry, the host reads) are installed once per process and count
    into the newest Instruments: a driver may run several configurations in one process."""

    def __init__(self):
        self.counts = Counts()
        _install_hooks()
        _ACTIVE[0] = self
        self.mode = _Mode(self.counts)

    def step_counts(self) -> Counts:
        counts, self.counts = self.counts, Counts()
        counts.adapter_syncs.update(_host_adapter_syncs)
        _host_adapter_syncs.clear()
        self.mode.counts = self.counts
        return counts

    def __enter__(self):
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


def _watched(function, point: str):
    @functools.wraps(function)
    def watched(*args, **kwargs):
        token = _in_adapter.set(point)
        try:
            return function(*args, **kwargs)
        finally:
            _in_adapter.reset(token)

    watched.__specops_watched__ = True
    return watched


def _host_checked(function, point: str):
    @functools.wraps(function)
    def checked(self, *args, **kwargs):
        for value in (*args, *kwargs.values()):
            if isinstance(value, torch.Tensor):
                _host_adapter_syncs[f"{point}: tensor argument to a host adapter"] += 1
        return function(self, *args, **kwargs)

    checked.__specops_watched__ = True
    return checked


def current() -> "Instruments | None":
    """The Instruments the hooks count into."""
    return _ACTIVE[0]


def watch_adapters(owners) -> list[str]:
    """Wraps every attribute of `owners` (modules and classes) that the plugin installed, so
    that host syncs inside it (or, for a host adapter, a device value given to it) are counted;
    returns the names of the points found."""
    found = []
    for owner in owners:
        for name, value in list(vars(owner).items()):
            point = getattr(value, "__specops_point__", None)
            if point is None:
                continue
            found.append(f"{owner.__name__}.{name}")
            if getattr(value, "__specops_watched__", False):
                continue  # watched by an earlier run in this process
            if getattr(value, "__specops_host__", False):
                setattr(owner, name, _host_checked(value, point))
            elif not getattr(value, "__specops_seam__", False):
                setattr(owner, name, _watched(value, point))
    return sorted(set(found))


def plugin_states() -> list[tuple[str, str, str]]:
    """The plugin's own account of each point (name, state, reason), if vLLM loaded it: read from
    the module vLLM's plugin loader imported, never imported here."""
    plugin = sys.modules.get("specops.integrations.vllm")
    if plugin is None:
        return []
    return [(s.name, s.state, s.reason) for s in plugin.status().states]


def record_counts(runner: str, release: str, configuration: str, steps: int, launches: tuple[float, float],
                  tensor_ops: tuple[float, float], host_syncs: int) -> None:
    """A configuration's counts a step (the runner alone, then with the plugin) as a row of
    SPECOPS_VLLM_COUNTS (a CSV; `make test-vllm-integration` and `make test-vllm-ascend` name
    bench-results/vllm-proof.csv), the file specops-bench draws its runner figure from; nothing
    without the variable."""
    import os

    path = os.environ.get("SPECOPS_VLLM_COUNTS")
    if not path:
        return
    from specops.bench._runner_counts import record_runner_counts

    record_runner_counts(path, dict(runner=runner, release=release, configuration=configuration, steps=steps,
                                    launches_before=f"{launches[0]:.2f}", launches_after=f"{launches[1]:.2f}",
                                    tensor_ops_before=f"{tensor_ops[0]:.1f}", tensor_ops_after=f"{tensor_ops[1]:.1f}",
                                    host_syncs=host_syncs))
