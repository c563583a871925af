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
import re
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
    """(label, call) for the op's valid call, `draws` of its random valid calls, the widened
    ones (widened_calls: every dtype of every tensor argument, rows past the previous step's
    buffers) and the calls of its other modes (OpSpec.mode_calls). A few random draws alone left
    specializations unlaunched: the lowered correct_optimistic_seq_lens read outside its tensors
    at one whose pointers are not all int32."""
    from hypothesis import HealthCheck, Phase, given, settings

    found: list[dict] = []
    if draws:
        # No health checks: a draw that takes seconds on a loaded machine is still the same draw.
        @settings(max_examples=draws, database=None, derandomize=True, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(op.draw_call)
        def collect(call):
            found.append(call)

        collect()
    base = [(f"{op.name} {'valid call' if i == 0 else f'draw {i}'}", call)
            for i, call in enumerate([op.valid_call(), *found])]
    modes = [(f"{op.name} {label}", call) for label, call in op.mode_calls()]
    return base + widened_calls(op, base[0][1]) + modes


def widened_calls(op, call: dict) -> list[tuple[str, dict]]:
    """Valid calls around `call` that reach the specializations random draws may miss: each
    tensor argument in each other dtype the op takes for it (with the arguments the op ties to
    its dtype, where casting it alone is rejected), and a correction whose rows point past the
    previous step's buffers (any row is valid there: it takes the host value)."""
    from op_table import get_arg, set_arg

    variants = []
    for key, arg in op.tensors.items():
        value = get_arg(call, key)
        if not isinstance(value, torch.Tensor):
            continue
        for dtype in arg.dtypes:
            # A bool tensor widens only to uint8 (a mask's other one-byte form); no op takes
            # the same tensor as bool and as a wider integer.
            if dtype == value.dtype or (torch.bool in (dtype, value.dtype)
                                        and {dtype, value.dtype} != {torch.bool, torch.uint8}):
                continue
            # The argument alone; else with the tensors of its dtype that take the new one; and
            # each time with each tensor the op then says must follow ("expanded_idx_mapping
            # must have dtype int64": idx_mapping's).
            tied = [other for other, other_arg in op.tensors.items()
                    if other != key and dtype in other_arg.dtypes
                    and isinstance(get_arg(call, other), torch.Tensor) and get_arg(call, other).dtype == value.dtype]
            found = None
            for keys in ([key], [key, *tied]):
                while found is None and keys is not None:
                    variant = clone_call(call)
                    for cast in keys:
                        set_arg(variant, cast, get_arg(variant, cast).to(dtype))
                    error = _rejection(op, variant)
                    if error is None:
                        found = (f"{op.name} valid call, {', '.join(keys)} {str(dtype)[6:]}", variant)
                    follows = re.match(rf"(\S+) must have dtype {str(dtype)[6:]}\b", error or "")
                    keys = (keys + [follows.group(1)] if follows and follows.group(1) in op.tensors
                            and follows.group(1) not in keys else None)
            if found is not None:
                variants.append(found)
    rows = call.get("prev_positions")
    if isinstance(rows, torch.Tensor) and rows.numel():
        previous = ("valid_sampled_token_count", "prev_num_draft_tokens")
        num_previous = min(get_arg(call, name).numel() for name in previous)
        for dtype in op.tensors["prev_positions"].dtypes:
            variant = clone_call(call)
            past = torch.arange(rows.numel(), dtype=torch.int64) + num_previous
            past[-1] = torch.iinfo(dtype).max
            variant["prev_positions"] = past.to(dtype)
            if _accepted(op, variant):
                variants.append((f"{op.name} valid call, prev_positions {str(dtype)[6:]} past the previous rows",
                                 variant))
        # The first step after a reset: a previous step of no rows, every row past its (empty)
        # buffers, in every dtype the valid counts take.
        for dtype in op.tensors["valid_sampled_token_count"].dtypes:
            variant = clone_call(call)
            for name in previous:
                variant[name] = variant[name][:0]
            variant["valid_sampled_token_count"] = variant["valid_sampled_token_count"].to(dtype)
            if _accepted(op, variant):
                variants.append((f"{op.name} valid call, empty previous buffers (valid counts {str(dtype)[6:]})",
                                 variant))
    return variants


def _rejection(op, call: dict) -> str | None:
    """The op's ValueError for the call, None where it takes it (run on a copy by the reference:
    no kernel, no capture)."""
    import specops

    try:
        with specops.backend("reference"):
            op.wrapper(**clone_call(call))
    except ValueError as error:
        return str(error)
    return None


def _accepted(op, call: dict) -> bool:
    return _rejection(op, call) is None


def clone_call(call: dict) -> dict:
    def clone(value):
        if isinstance(value, torch.Tensor):
            return value.clone()
        if isinstance(value, (list, tuple)):
            return type(value)(clone(item) for item in value)
        return value

    return {name: clone(value) for name, value in call.items()}
