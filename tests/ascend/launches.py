"""The kernels and how the launchers really launch them, in triton-ascend 3.2's terms.

The capture itself is specops.devtools.kernel_capture's, the one the CUDA compile test uses, with
the NPU target: there, a launch goes through Triton 3.2's binder (`create_function_from_signature`
with the ascend backend, an `AscendAttrsDescriptor`: ints equal to 1 become constexprs), and the
interpreter's `InterpretedFunction.__getitem__` is the entry point intercepted. What is here is
the NPU suite's own: which calls are captured, and which kernels no NPU-route launch reaches.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable, Iterator

import torch

from specops.devtools.kernel_capture import (  # noqa: F401 (the suite's names for them)
    Launch,
    NpuSpecialization,
    defined_kernels,
    kernel_function,
    kernel_id,
    kernel_name,
)
from specops.devtools import kernel_capture
from specops.devtools.targets import NPU_TARGET

NPU_ARCH = NPU_TARGET.arch
# Random valid calls per op on top of the op table's fixed one (SPECOPS_ASCEND_DRAWS widens a run).
DEFAULT_DRAWS = 3
DRAWS = int(os.environ.get("SPECOPS_ASCEND_DRAWS", str(DEFAULT_DRAWS)))


def specialization(launch: Launch) -> NpuSpecialization | None:
    """The launch's NPU specialization (None when triton-ascend's binder could not derive it)."""
    return launch.specializations.get(NPU_TARGET.name)


@contextlib.contextmanager
def capture_launches(label: str = "", run: Callable[[Launch], None] | None = None) -> Iterator[list[Launch]]:
    """Every kernel launch inside the block, specialized for the NPU. run(launch) is called in
    place of the interpreter (with the launch's arguments kept); without it the kernel is not run.
    A launch 3.2 cannot specialize is recorded with its error (and, with `run`, raises)."""
    with kernel_capture.capture_launches([NPU_TARGET], execute=False, label=label, run=run,
                                         keep_going=True) as launches:
        yield launches


def host_routed_kernels() -> set[str]:
    """Kernels that no NPU-route launch reaches: those whose module has `host_route` (the sas
    family's two: on the NPU its members run the host op and one copy; the module says why)."""
    return {kernel for kernel in defined_kernels()
            if callable(getattr(importlib.import_module(kernel.partition(":")[0]), "host_route", None))}


def host_routed(kernel: str) -> bool:
    return kernel in host_routed_kernels()


def op_calls(op, draws: int) -> list[tuple[str, dict]]:
    """(label, call) for the op's valid call and `draws` of its random valid calls."""
    from hypothesis import Phase, given, settings

    found: list[dict] = []
    if draws:
        @settings(max_examples=draws, database=None, derandomize=True, phases=[Phase.generate])
        @given(op.draw_call)
        def collect(call):
            found.append(call)

        collect()
    return [(f"{op.name} {'valid call' if i == 0 else f'draw {i}'}", call)
            for i, call in enumerate([op.valid_call(), *found])]


def clone_call(call: dict) -> dict:
    def clone(value):
        if isinstance(value, torch.Tensor):
            return value.clone()
        if isinstance(value, (list, tuple)):
            return type(value)(clone(item) for item in value)
        return value

    return {name: clone(value) for name, value in call.items()}
