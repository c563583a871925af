"""store_kv_block_metadata: the golden vectors of the AI-CPU kernel on every backend, outputs
sized for the worst case, the capacity vllm-ascend gives them (too small when a request crosses a
block), random slot mappings against the plain-Python restatement, opcheck and compile.

The golden vectors are read from tests/golden (sas_checker.golden_dir);
the tests fail, naming where they looked, when it is missing."""

from __future__ import annotations

import pytest
import torch
from conftest import BACKENDS, examples
from golden_cases import UNTOUCHED, argument_of, check_unwritten_words_are_zero, golden_cases
from hypothesis import given, settings
from hypothesis import strategies as st

import specops
from specops.bench.store_kv_block_metadata import python_store_kv_block_metadata

GOLDEN = golden_cases("store_kv_block_metadata.jsonl")

_KERNEL_MESSAGE_ARGUMENT = [
    (r"^block_size must be positive", "block_size"),
    (r"^slot_mapping is empty", "slot_mapping"),
    (r"^input tensor is empty", "group_len"),
    (r"^harness: the kernel wrote more groups than the output capacity", "group_len"),
    (r"^harness: slot_mapping\[\d+\] is INT32_MAX", "slot_mapping"),
]


def _outputs(capacity: int) -> list[torch.Tensor]:
    return [torch.full((capacity,), UNTOUCHED, dtype=torch.int32) for _ in range(3)]


@pytest.mark.parametrize("case,source", GOLDEN)
def test_golden(backend, case, source):
    """Each accepted call gives the kernel's words (group_len, group_key_idx, group_key_cache_idx
    one after another); each rejected or undefined call a ValueError naming the argument with the
    outputs untouched. Undefined values on a device: the runs that fit, nothing past them."""
    assert case is not None, source
    args = case["args"]
    slots = torch.tensor(args["slot_mapping"], dtype=torch.int32)
    outputs = _outputs(args["capacity"])
    call = lambda: specops.store_kv_block_metadata(slots, *outputs, block_size=args["block_size"])  # noqa: E731
    if "error" in case:
        argument = argument_of(case["error"], _KERNEL_MESSAGE_ARGUMENT)
        # The Triton kernel stands for a device (the runs that fit); the reference on these host
        # tensors is the host op and refuses alike.
        if backend == "triton" and case["error"].startswith("harness:"):
            call()
            expected = python_store_kv_block_metadata(args["slot_mapping"], args["capacity"], args["block_size"])
            assert torch.cat(outputs).tolist() == expected
            return
        with pytest.raises(ValueError, match=rf"\b{argument}\b"):
            call()
        assert all(t.eq(UNTOUCHED).all() for t in outputs), "a rejected call wrote an output"
        return
    check_unwritten_words_are_zero(case)
    groups = call()
    assert [t.data_ptr() for t in groups] == [t.data_ptr() for t in outputs]
    assert torch.cat(outputs).tolist() == case["words"]


@pytest.mark.parametrize("case,source", [p for p in GOLDEN if p.values[0] is None or "words" in p.values[0]])
def test_golden_python_restatement(case, source):
    assert case is not None, source
    args = case["args"]
    assert python_store_kv_block_metadata(args["slot_mapping"], args["capacity"], args["block_size"]) == case["words"]


def test_outputs_sized_for_the_worst_case_where_vllm_ascend_sizes_them_too_small(backend):
    # vllm-ascend passes group tensors of num_reqs entries (model_runner_v1: group_len.gpu[:num_reqs_padded]).
    # Two requests of 3 new tokens each; the first crosses the block boundary at slot 16: three
    # runs for two requests. The allocated outputs hold slot_mapping's length, so all three fit.
    slots = torch.tensor([14, 15, 16, 40, 41, 42], dtype=torch.int32)
    groups = specops.store_kv_block_metadata(slots, block_size=16)
    assert groups.group_len.tolist() == [2, 1, 3, 0, 0, 0]
    assert groups.group_key_idx.tolist() == [0, 2, 3, 0, 0, 0]
    assert groups.group_key_cache_idx.tolist() == [14, 16, 40, 0, 0, 0]
    requests = _outputs(2)
    if backend != "triton":  # the host op, and the reference on host tensors
        with pytest.raises(ValueError, match="group_len"):
            specops.store_kv_block_metadata(slots, *requests, block_size=16)
        assert all(t.eq(UNTOUCHED).all() for t in requests)
    else:
        # A device cannot refuse without a sync: the runs that fit, nothing written past them.
        specops.store_kv_block_metadata(slots, *requests, block_size=16)
        assert [t.tolist() for t in requests] == [[2, 1], [0, 2], [14, 16]]


@st.composite
def slot_mappings(draw):
    block_size = draw(st.sampled_from([1, 4, 16, 128]))
    slots = []
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["run", "pad", "any"]))
        if kind == "pad":
            slots += [-1] * draw(st.integers(1, 3))
        elif kind == "run":
            first = draw(st.integers(0, 600))
            slots += list(range(first, first + draw(st.integers(1, 70))))
        else:
            slots.append(draw(st.integers(-5, 600)))
    return slots, block_size


@pytest.mark.parametrize("name", BACKENDS)
@settings(max_examples=examples(12))
@given(call=slot_mappings(), wide=st.booleans())
def test_random_slot_mappings_against_the_restatement(name, call, wide):
    slots, block_size = call
    tensor = torch.tensor(slots, dtype=torch.int64 if wide else torch.int32)
    with specops.backend(name):
        groups = specops.store_kv_block_metadata(tensor, block_size=block_size)
    assert torch.cat(list(groups)).tolist() == python_store_kv_block_metadata(slots, len(slots), block_size)


def test_opcheck():
    slots = torch.tensor([3, 4, -1, 5, 6, 40], dtype=torch.int32)
    outputs = [torch.zeros(6, dtype=torch.int32) for _ in range(3)]
    torch.library.opcheck(torch.ops.specops.store_kv_block_metadata.default, (slots, *outputs, 8))


def test_compiles_without_graph_break():
    slots = torch.tensor([3, 4, -1, 5, 6, 40], dtype=torch.int32)

    def step(slots, group_len, key_idx, cache_idx):
        specops.store_kv_block_metadata(slots + 0, group_len, key_idx, cache_idx, block_size=8)
        return group_len + key_idx + cache_idx

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    outputs = [torch.zeros(6, dtype=torch.int32) for _ in range(3)]
    expected = step(slots, *[t.clone() for t in outputs])
    assert compiled(slots, *outputs).tolist() == expected.tolist()
