"""The golden vectors of the DSA metadata family's AI-CPU kernels (produced by the kernels' own
code), read from tests/golden (sas_checker.golden_dir), and the
argument each kernel message is about. A missing file is one failing case naming where it
looked."""

from __future__ import annotations

import json
import re

import pytest
import torch
from sas_checker import golden_dir
from strategies import assert_same

UNTOUCHED = 0x0BADF00D
# The platform arguments of an A2/A3 call planned on the host for no particular device: a
# schedule not bound for an NPU must be given all three (docs/sas_metadata.md).
PLATFORM = dict(num_cube_cores=24, num_vector_cores=48, soc_version="Ascend910B1")
# The length tensors of sas_metadata and kv_quant_sas_metadata, in their schema order.
SAS_TENSORS = ("cu_seqlens_q", "cu_seqlens_ori_kv", "cu_seqlens_cmp_kv", "seqused_q", "seqused_kv")


def golden_cases(file_name: str) -> list:
    directory, looked = golden_dir()
    path = directory / file_name if directory is not None else None
    if path is None or not path.is_file():
        where = ", ".join(looked)
        return [pytest.param(None, f"{file_name} not found; looked in: {where}", id="golden-file-missing")]
    cases = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [pytest.param(case, str(path), id=f"{i}-{case['label']}") for i, case in enumerate(cases)]


def argument_of(kernel_message: str, table: list[tuple[str, str]]) -> str:
    for pattern, argument in table:
        if re.search(pattern, kernel_message):
            return argument
    raise AssertionError(f"no argument known for the kernel's message {kernel_message!r}")


def is_undefined(case: dict) -> bool:
    """A call the kernel leaves undefined (the harness refused to run it)."""
    return case.get("error", "").startswith("harness:")


def check_unwritten_words_are_zero(case: dict) -> None:
    written = set(case["written"])
    assert all(word == 0 for i, word in enumerate(case["words"]) if i not in written), "golden: unwritten word != 0"


def tensor_call(args: dict, tensors: tuple[str, ...]) -> dict:
    """A golden case's arguments with its length lists as int32 tensors."""
    call = dict(args)
    for name in tensors:
        if call[name] is not None:
            call[name] = torch.tensor(call[name], dtype=torch.int32)
    return call


def with_words(golden: list) -> list:
    """The golden cases the kernel accepted (and the missing-file case, which fails)."""
    return [p for p in golden if p.values[0] is None or "words" in p.values[0]]


def check_golden_schedule(wrapper, case: dict | None, source: str, tensors: tuple[str, ...],
                          message_arguments: list[tuple[str, str]], zeros_instead: bool = False) -> None:
    """A family member's wrapper on one golden case: an accepted call gives the kernel's words
    exactly, into out; a rejected or undefined one a ValueError naming the argument the kernel's
    message is about, with out untouched, or, with `zeros_instead` (values a device cannot check
    without a sync), 1024 zero words."""
    assert case is not None, source
    call = tensor_call(case["args"], tensors)
    out = torch.full((1024,), UNTOUCHED, dtype=torch.int32)
    if "error" in case:
        argument = argument_of(case["error"], message_arguments)
        if zeros_instead:
            wrapper(**call, out=out)
            assert out.tolist() == [0] * 1024
            return
        with pytest.raises(ValueError, match=rf"\b{argument}\b"):
            wrapper(**call, out=out)
        assert out.eq(UNTOUCHED).all(), "a rejected call wrote out"
        return
    check_unwritten_words_are_zero(case)
    assert wrapper(**call, out=out).data_ptr() == out.data_ptr()
    assert out.tolist() == case["words"]


def check_schedule_compiles(step, *inputs: torch.Tensor) -> None:
    """`step(*inputs, out)`, which writes a family member's schedule into out and returns
    out + 1, compiles without a graph break and gives what it gives eagerly, out included."""
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    out = torch.zeros(1024, dtype=torch.int32)
    expected = step(*inputs, out.clone())
    assert_same(compiled(*inputs, out), expected)
    assert_same(out + 1, expected)
