"""advance_draft_step and advance_draft_steps with max_model_len as vLLM 0.34 passes it to its
draft-step update: a 0-D int32 device tensor (`max_model_len_gpu`), which a captured graph reads
at each replay. On every backend the tensor form gives what the int gives; its value is read on
the device (no host read on the device paths; never frozen into a compiled graph); the host op
rejects a value below 1, the device paths take it as 1 and stay in bounds; bad metadata names
max_model_len_tensor and writes nothing."""

from __future__ import annotations

import pytest
import torch
from conftest import device_backends
from strategies import assert_rejected_without_writes
from torch.utils._python_dispatch import TorchDispatchMode

import specops
from specops.ops.advance_draft_steps import empty_draft_steps

PAD = specops.PAD_SLOT_ID


def t32(values):
    return torch.tensor(values, dtype=torch.int32)


def _step_call(max_model_len, rule: str = "clamp") -> dict:
    """Requests near the limit 40 (positions 38, 39, 45 and two far from it), two groups."""
    tables = [torch.arange(1, 21, dtype=torch.int32).view(5, 4), torch.arange(100, 140, dtype=torch.int32).view(5, 8)]
    return dict(positions=torch.tensor([5, 38, 39, 45, 0]), seq_lens=t32([6, 39, 40, 46, 1, 9]),
                block_tables=tables, block_sizes=[16, 8], max_model_len=max_model_len, past_max_model_len=rule,
                num_rejected_tokens=t32([1, 0, 0, 0, 0]), idx_mapping=t32([4, 3, 2, 1, 0]),
                slot_mappings=[torch.full((7,), 555), torch.full((7,), 555, dtype=torch.int32)],
                query_start_loc=torch.full((7,), 99, dtype=torch.int32), num_tokens_padded=7, num_reqs_padded=6)


def _written(call: dict) -> list[torch.Tensor]:
    return [call["positions"], call["seq_lens"], *call["slot_mappings"], call["query_start_loc"]]


@pytest.mark.parametrize("rule", ["clamp", "reset"])
@pytest.mark.parametrize("limit", [40, 44, 1, 100])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_the_tensor_gives_what_the_int_gives(backend, rule, limit, dtype):
    by_int, by_tensor = _step_call(limit, rule), _step_call(torch.tensor(limit, dtype=dtype), rule)
    specops.advance_draft_step(**by_int)
    specops.advance_draft_step(**by_tensor)
    for a, b in zip(_written(by_int), _written(by_tensor)):
        assert torch.equal(a, b)
    assert by_tensor["max_model_len"].item() == limit  # read, not written


def test_the_hand_computed_clamp_step():
    call = _step_call(torch.tensor(40, dtype=torch.int32))
    specops.advance_draft_step(**call)
    # 5 + 1; 38 + 1; 39 is L - 1: stays; 45 past L: L - 1; 0 + 1. seq_lens min(base + 1, 40).
    assert call["positions"].tolist() == [6, 39, 39, 39, 1]
    assert call["seq_lens"].tolist() == [6, 40, 40, 40, 2, 0]
    assert call["query_start_loc"].tolist() == [0, 1, 2, 3, 4, 5, 5]


class _HostReads(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.reads = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.name() in ("aten::_local_scalar_dense", "aten::item", "aten::is_nonzero", "aten::equal"):
            self.reads.append(func.name())
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name", device_backends())
def test_the_device_paths_read_the_limit_on_the_device(name):
    """No host read of the limit (or of anything else) on the Triton launcher's and the
    reference's way to the kernel: what a graph captures reads the tensor at each replay."""
    call = _step_call(torch.tensor(40, dtype=torch.int32))
    with specops.backend(name), _HostReads() as mode:
        specops.advance_draft_step(**call)
    assert mode.reads == []
    assert call["positions"].tolist() == [6, 39, 39, 39, 1]


def test_a_compiled_step_reads_the_limit_at_each_call():
    """torch.compile(fullgraph=True) keeps the tensor an input: a new value after compiling is
    what the next call uses, without a recompile (no value frozen into the graph)."""
    from torch._dynamo.testing import CompileCounter

    limit = torch.tensor(40, dtype=torch.int32)

    def step(positions, seq_lens, slots):
        call = _step_call(limit)
        call.update(positions=positions, seq_lens=seq_lens, slot_mappings=[slots, call["slot_mappings"][1]])
        specops.advance_draft_step(**call)
        return positions + 0, seq_lens + 0

    counter = CompileCounter()
    compiled = torch.compile(step, fullgraph=True, backend=counter)
    fresh = _step_call(0)
    first = compiled(fresh["positions"].clone(), fresh["seq_lens"].clone(), torch.full((7,), 555))
    limit.fill_(20)
    second = compiled(fresh["positions"].clone(), fresh["seq_lens"].clone(), torch.full((7,), 555))
    assert counter.frame_count == 1
    assert first[0].tolist() == [6, 39, 39, 39, 1] and second[0].tolist() == [6, 19, 19, 19, 1]
    assert second[1].tolist() == [6, 20, 20, 20, 2, 0]


def test_opcheck():
    call = _step_call(torch.tensor(40, dtype=torch.int32))
    args = (call["positions"], call["seq_lens"], call["block_tables"], None, call["num_rejected_tokens"],
            call["idx_mapping"], call["positions"], call["slot_mappings"], call["query_start_loc"], [], -1, 1, 7, 6, 1,
            0, 1, [16, 8], [1, 1], [True, True], [True, True])
    torch.library.opcheck(torch.ops.specops.advance_draft_step.default, args,
                          kwargs=dict(max_model_len_tensor=call["max_model_len"]))


@pytest.mark.parametrize("value", [0, -3])
def test_the_host_op_rejects_a_limit_below_one_and_writes_nothing(value):
    with specops.backend("native"):
        assert_rejected_without_writes(specops.advance_draft_step, _step_call(torch.tensor(value, dtype=torch.int32)),
                                       argument="max_model_len_tensor must hold a value >= 1",
                                       written=("positions", "seq_lens", "query_start_loc"))


@pytest.mark.parametrize("name", device_backends())
def test_the_device_paths_take_a_limit_below_one_as_one(name):
    """What the host op rejects, a device kernel cannot: it takes the limit as 1, so every
    position is 0 (clamp) and every slot is a slot of the tables or PAD, never out of bounds."""
    call = _step_call(torch.tensor(-7, dtype=torch.int32))
    with specops.backend(name):
        specops.advance_draft_step(**call)
    expected = _step_call(1)
    specops.advance_draft_step(**expected)
    for a, b in zip(_written(call), _written(expected)):
        assert torch.equal(a, b)
    assert call["positions"].tolist() == [0] * 5


@pytest.mark.parametrize("change,argument", [
    (dict(max_model_len=None, max_model_len_tensor=torch.tensor(40.0)),
     "max_model_len_tensor must have dtype int32 or int64"),
    (dict(max_model_len=None, max_model_len_tensor=torch.tensor(40, dtype=torch.int16)),
     "max_model_len_tensor must have dtype int32 or int64"),
    (dict(max_model_len=t32([40])), "max_model_len_tensor must be 0-D"),
    (dict(max_model_len=torch.tensor(40, device="meta")), "max_model_len_tensor must be"),
    (dict(max_model_len_tensor=torch.tensor(40)), "give max_model_len or max_model_len_tensor, not both"),
    (dict(max_model_len=None), "max_model_len must be given"),
    # A bool tensor as max_model_len is not a limit on the device: an int argument, rejected as one.
    (dict(max_model_len=torch.tensor(True)), "max_model_len must be an int"),
])
def test_bad_limit_metadata_names_it_and_writes_nothing(backend, change, argument):
    call = _step_call(40)
    call.update(change)
    assert_rejected_without_writes(specops.advance_draft_step, call, argument=argument,
                                   written=("positions", "seq_lens", "query_start_loc"))


def test_the_schema_int_must_say_the_tensor_gives_the_limit(backend):
    call = _step_call(torch.tensor(40, dtype=torch.int32))
    op = torch.ops.specops.advance_draft_step
    before = call["positions"].clone()
    with pytest.raises((ValueError, RuntimeError), match="max_model_len must be -1 when max_model_len_tensor"):
        op(call["positions"], call["seq_lens"], call["block_tables"], None, None, None, call["positions"],
           call["slot_mappings"], None, [], 40, 1, -1, -1, 1, 0, 1, [16, 8], [1, 1], [True, True], [True, True],
           max_model_len_tensor=call["max_model_len"])
    assert torch.equal(call["positions"], before)


def test_the_limit_must_not_alias_an_output(backend):
    call = _step_call(40)
    call["max_model_len"] = call["seq_lens"][5]  # 9, a 0-D view of an output
    assert_rejected_without_writes(specops.advance_draft_step, call, argument="max_model_len_tensor",
                                   written=("positions", "query_start_loc"))


def _steps_call(max_model_len) -> dict:
    rope = torch.arange(64 * 4, dtype=torch.float32).view(64, 4)
    out = empty_draft_steps(4, 4, 2, 2, 1, rope, [torch.int64], torch.device("cpu"))
    return dict(query_start_loc=t32([0, 2, 3]), positions=torch.tensor([10, 11, 17]), seq_lens=t32([12, 18]),
                token_indices=t32([1, 2]), num_rejected_tokens=t32([0, 0]), block_tables=[t32([[3, 4], [7, 8]])],
                block_sizes=16, rope_cos_sin_cache=rope, num_steps=4, num_actual_tokens=3, num_input_tokens=4,
                max_model_len=max_model_len, target_slot_mappings=[torch.arange(3)], num_reqs_padded=2,
                past_max_model_len="clamp", out=out)


@pytest.mark.parametrize("limit", [14, 19, 30])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_advance_draft_steps_takes_the_tensor_as_the_int(backend, limit, dtype):
    by_int, by_tensor = _steps_call(limit), _steps_call(torch.tensor(limit, dtype=dtype))
    a, b = specops.advance_draft_steps(**by_int), specops.advance_draft_steps(**by_tensor)
    for x, y in zip((*a[:8], *a.slots, *a.slot_pairs), (*b[:8], *b.slots, *b.slot_pairs)):
        assert torch.equal(x, y)
    if limit == 19:  # request 1 at position 17: passes 2..4 go 18, then L - 1 = 18, 18
        assert b.positions[1:, 1].tolist() == [18, 18, 18]


def test_advance_draft_steps_rejects_bad_limits():
    with specops.backend("native"), pytest.raises(ValueError, match="max_model_len_tensor must hold a value >= 1"):
        specops.advance_draft_steps(**_steps_call(torch.tensor(0, dtype=torch.int32)))
    for name in ["native", *device_backends()]:
        with specops.backend(name), pytest.raises((ValueError, RuntimeError), match="max_model_len_tensor must be 0-D"):
            specops.advance_draft_steps(**_steps_call(t32([20])))
