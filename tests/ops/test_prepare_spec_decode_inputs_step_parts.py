"""prepare_spec_decode_inputs' two optional parts of a request-indexed call (model runner V2's
target step in one launch): the step's input ids (prepare_input_ids' work) and the DCP-local
seq_lens (dcp_local_seq_lens' work), beside the positions, seq_lens, slot mappings and gather.

Expectations: tests/step_expectations.py's plain-Python input ids and tests/expectations.py's
DCP-local lengths, from the seq_lens written out by hand (counts through idx_mapping plus query
lengths); the rest of the call is test_prepare_spec_decode_inputs_request_indexed.py's.
"""

from __future__ import annotations

import random

import pytest
import torch
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from step_expectations import input_ids as expected_input_ids
from strategies import assert_compiles_like_eager, assert_same

import expectations
import specops

E = torch.empty(0, dtype=torch.int32)
STALE = -7


def _i32(*values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


def _stale(*shape, dtype=torch.int32) -> torch.Tensor:
    return torch.full(shape, STALE, dtype=dtype)


def _call(case: dict, **changes):
    kwargs = dict(case["kwargs"], **changes)
    return specops.prepare_spec_decode_inputs(case["counts"], E.clone(), E, E, E, E, case["qsl"], case["tables"],
                                              case["block_sizes"], **kwargs)


def _hand_case() -> dict:
    """Three requests: row 2 decoding with two drafts (count 20, prefill 6), no row, row 0
    prefilling (count 3 of a 10-token prompt); tokens 3, 1, 2; DCP 2, interleave 1."""
    tables = [torch.tensor([[1, 2], [0, 0], [5, 6]], dtype=torch.int32)]
    tokens = (1000 + torch.arange(3 * 12).view(3, 12)).to(torch.int32)
    return dict(counts=_i32(3, 0, 20), qsl=_i32(0, 3, 4, 6), tables=tables, block_sizes=[16], kwargs=dict(
        positions=_stale(8, dtype=torch.int64), seq_lens=_stale(4), slot_mappings=[_stale(8, dtype=torch.int64)],
        idx_mapping=torch.tensor([2, -1, 0]), num_blocks=[_i32(2, 0, 2)], request_indexed_counts=True,
        gathered_block_tables=[_stale(4, 2)], num_gathered_rows=4, cp_world_size=2, cp_rank=1,
        input_ids=_stale(8), prefill_len=_i32(10, 0, 6), last_sampled_tokens=torch.tensor([0, 0, 501]),
        draft_tokens=torch.tensor([[0, 0], [0, 0], [601, 602]]), cu_num_logits=_i32(0, 3, 4, 5),
        all_token_ids=tokens, next_prefill_tokens=_stale(2, 3), logits_indices=_stale(6, dtype=torch.int64),
        expanded_idx_mapping=_stale(6, dtype=torch.int64), expanded_local_pos=_stale(6),
        dcp_local_seq_lens=_stale(5)))


def test_hand_computed(backend):
    case = _hand_case()
    kw = case["kwargs"]
    result = _call(case)
    assert result.seq_lens.tolist() == [23, 1, 5, 0]
    # Request 0 decodes: its sampled token, then its drafts; request 1 has no row (nothing);
    # request 2 copies prompt tokens 3 and 4 of row 0. Not padded past T = 6.
    assert kw["input_ids"].tolist() == [501, 601, 602, STALE, 1003, 1004, STALE, STALE]
    assert kw["next_prefill_tokens"].tolist() == [[1005, STALE, STALE], [1006, STALE, STALE]]
    assert kw["logits_indices"].tolist() == [0, 1, 2, 3, 5, 0]
    assert kw["expanded_idx_mapping"].tolist() == [2, 2, 2, -1, 0, -1]
    assert kw["expanded_local_pos"].tolist() == [0, 1, 2, 0, 0, 0]
    # Rank 1 of 2 holds the odd positions: 11 of 23, 0 of 1, 2 of 5; 0 past R.
    assert kw["dcp_local_seq_lens"].tolist() == [11, 0, 2, 0, 0]


def _random_case(rng: random.Random) -> dict:
    """A valid request-indexed call with both parts: distinct rows, decoding and prefilling
    requests (and requests without a row), logits within each query, prompts within the table."""
    num_reqs = rng.randint(0, 5)
    num_rows = num_reqs + rng.randint(1, 3)
    num_groups, cols, drafts = rng.randint(1, 3), rng.randint(1, 4), rng.randint(1, 3)
    block_sizes = [rng.choice([4, 8, 16]) for _ in range(num_groups)]
    rows = rng.sample(range(num_rows), num_reqs)
    idx = [row if rng.random() < 0.8 else -1 for row in rows]
    counts = [rng.randint(0, max(min(block_sizes) * cols - 5, 0)) for _ in range(num_rows)]
    prefill = [0] * num_rows
    qsl, cu = [0], [0]
    for row in idx:
        query = rng.randint(0, 4)
        qsl.append(qsl[-1] + query)
        if row < 0:
            n_log = rng.randint(0, min(query, drafts + 1))
        elif rng.random() < 0.5:  # prefilling: a prompt past the count
            prefill[row] = counts[row] + rng.randint(1, 6)
            n_log = rng.randint(min(query, 1), min(query, drafts + 1))
        else:  # decoding: a logit for the sampled token and up to `drafts` drafts
            prefill[row] = rng.randint(0, counts[row]) if query > 0 else counts[row]
            n_log = rng.randint(min(query, 1), min(query, drafts + 1))
        cu.append(cu[-1] + n_log)
    width = max([counts[r] + 4 for r in range(num_rows)] + prefill) + rng.randint(0, 2)
    tokens_padded, reqs_padded = qsl[-1] + rng.randint(0, 3), num_reqs + rng.randint(0, 2)
    world = rng.choice([1, 2, 4])
    idx_dtype = rng.choice([torch.int32, torch.int64])
    return dict(
        counts=torch.tensor(counts, dtype=torch.int32), qsl=torch.tensor(qsl, dtype=torch.int32),
        tables=[torch.randint(1, 1000, (num_rows, cols), dtype=torch.int32) for _ in range(num_groups)],
        block_sizes=block_sizes, kwargs=dict(
            positions=_stale(tokens_padded, dtype=torch.int64), seq_lens=_stale(reqs_padded),
            slot_mappings=[_stale(tokens_padded, dtype=torch.int64) for _ in range(num_groups)],
            idx_mapping=torch.tensor(idx, dtype=idx_dtype),
            num_blocks=[torch.full((num_rows,), cols, dtype=torch.int32) for _ in range(num_groups)],
            cp_world_size=world, cp_rank=rng.randrange(world), cp_interleave=rng.choice([1, 2, 4]),
            cp_sharded=[rng.random() < 0.5 for _ in range(num_groups)], request_indexed_counts=True,
            gathered_block_tables=[_stale(reqs_padded, cols) for _ in range(num_groups)],
            num_gathered_rows=reqs_padded, input_ids=_stale(qsl[-1] + rng.randint(0, 3)),
            prefill_len=torch.tensor(prefill, dtype=torch.int32),
            last_sampled_tokens=torch.randint(0, 500, (num_rows,), dtype=rng.choice([torch.int32, torch.int64])),
            draft_tokens=torch.randint(500, 900, (num_rows, drafts), dtype=torch.int64),
            cu_num_logits=torch.tensor(cu, dtype=torch.int32),
            all_token_ids=torch.randint(1000, 2000, (num_rows, width), dtype=torch.int32),
            next_prefill_tokens=_stale(rng.randint(1, 2), num_rows),
            logits_indices=_stale(cu[-1] + rng.randint(0, 2), dtype=torch.int64),
            expanded_idx_mapping=_stale(cu[-1] + rng.randint(0, 2), dtype=idx_dtype),
            expanded_local_pos=_stale(cu[-1] + rng.randint(0, 2)),
            dcp_local_seq_lens=_stale(num_reqs + rng.randint(0, 3))))


def _expected_parts(case: dict) -> dict:
    kw = case["kwargs"]
    idx, qsl, counts = kw["idx_mapping"].tolist(), case["qsl"].tolist(), case["counts"].tolist()
    ids, nxt, logits, expanded, local = expected_input_ids(
        idx, qsl, counts, kw["prefill_len"].tolist(), kw["last_sampled_tokens"].tolist(), kw["draft_tokens"].tolist(),
        kw["cu_num_logits"].tolist(), all_token_ids=kw["all_token_ids"].tolist(),
        num_lookahead=kw["next_prefill_tokens"].size(0), input_ids_before=kw["input_ids"].tolist(),
        next_prefill_before=kw["next_prefill_tokens"].tolist())
    # The logits outputs are padded to their ends (0; expanded_idx_mapping -1).
    pad = {"logits_indices": 0, "expanded_idx_mapping": -1, "expanded_local_pos": 0}
    outputs = dict(input_ids=ids, next_prefill_tokens=nxt)
    for name, values in (("logits_indices", logits), ("expanded_idx_mapping", expanded),
                         ("expanded_local_pos", local)):
        outputs[name] = values + [pad[name]] * (kw[name].numel() - len(values))
    seq_lens = [(counts[row] if row >= 0 else 0) + qsl[r + 1] - qsl[r] for r, row in enumerate(idx)]
    dcp = [expectations.dcp_local_seq_len(s, kw["cp_world_size"], kw["cp_rank"], kw["cp_interleave"])
           for s in seq_lens]
    outputs["dcp_local_seq_lens"] = dcp + [0] * (kw["dcp_local_seq_lens"].numel() - len(dcp))
    return outputs


@settings(max_examples=examples(25), deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_random_against_the_expectation(backend, seed):
    case = _random_case(random.Random(seed))
    expected = _expected_parts(case)
    _call(case)
    for name, values in expected.items():
        assert case["kwargs"][name].tolist() == values, name


def test_equals_the_call_without_parts_then_the_parts_ops(backend):
    """One call equals prepare_spec_decode_inputs without the parts, then prepare_input_ids and
    dcp_local_seq_lens, each on its own."""
    for seed in range(6):
        case = _random_case(random.Random(seed))
        kw = case["kwargs"]
        parts = ("input_ids", "next_prefill_tokens", "logits_indices", "expanded_idx_mapping", "expanded_local_pos",
                 "dcp_local_seq_lens")
        alone = {name: t.clone() if isinstance(t, torch.Tensor) else [x.clone() for x in t]
                 for name, t in kw.items() if name in parts + ("positions", "seq_lens", "slot_mappings",
                                                               "gathered_block_tables")}
        _call(case)
        rest = {name: value for name, value in kw.items() if name not in parts and name not in alone}
        rest.update({name: alone[name] for name in ("positions", "seq_lens", "slot_mappings", "gathered_block_tables")})
        specops.prepare_spec_decode_inputs(case["counts"], E.clone(), E, E, E, E, case["qsl"], case["tables"],
                                           case["block_sizes"], **{k: v for k, v in rest.items()
                                                                   if k not in ("prefill_len", "last_sampled_tokens",
                                                                                "draft_tokens", "cu_num_logits",
                                                                                "all_token_ids")})
        specops.prepare_input_ids(alone["input_ids"], kw["idx_mapping"], case["qsl"], case["counts"],
                                  kw["prefill_len"], kw["last_sampled_tokens"], kw["draft_tokens"], kw["cu_num_logits"],
                                  all_token_ids=kw["all_token_ids"], next_prefill_tokens=alone["next_prefill_tokens"],
                                  logits_indices=alone["logits_indices"],
                                  expanded_idx_mapping=alone["expanded_idx_mapping"],
                                  expanded_local_pos=alone["expanded_local_pos"])
        num_reqs = case["qsl"].numel() - 1
        specops.dcp_local_seq_lens(alone["seq_lens"][:num_reqs], kw["cp_world_size"], kw["cp_rank"],
                                   kw["cp_interleave"], out=alone["dcp_local_seq_lens"])
        for name, value in alone.items():
            for ours, theirs in zip(kw[name] if isinstance(value, list) else [kw[name]],
                                    value if isinstance(value, list) else [value]):
                assert_same(ours, theirs)


_PARTS_ONLY = ("prefill_len", "last_sampled_tokens", "draft_tokens", "cu_num_logits", "all_token_ids",
               "next_prefill_tokens", "logits_indices", "expanded_idx_mapping", "expanded_local_pos")


def _bad():
    shared = torch.zeros(16, dtype=torch.int64)
    return [
        ("a part without input_ids", dict(input_ids=None, dcp_local_seq_lens=None),
         r"prefill_len is part of the input ids: it needs input_ids"),
        ("input ids of batch-indexed counts", dict(request_indexed_counts=False, gathered_block_tables=None),
         r"input_ids needs request_indexed_counts"),
        ("input ids without cu_num_logits", dict(cu_num_logits=None), r"cu_num_logits must be given with input_ids"),
        ("input_ids int64", dict(input_ids=_stale(8, dtype=torch.int64)), r"input_ids must have dtype"),
        ("all_token_ids alone", dict(next_prefill_tokens=None), r"all_token_ids and next_prefill_tokens"),
        ("logits_indices sharing positions", dict(positions=shared[:8], logits_indices=shared[6:12]),
         r"logits_indices must not share memory with positions|positions must not share memory with logits_indices"),
        ("dcp_local_seq_lens int64", dict(dcp_local_seq_lens=_stale(5, dtype=torch.int64)),
         r"dcp_local_seq_lens must have dtype"),
        ("dcp_local_seq_lens shorter than R", dict(dcp_local_seq_lens=_stale(2)),
         r"dcp_local_seq_lens must have at least R"),
        ("dcp_local_seq_lens sharing seq_lens", dict(seq_lens=shared.view(torch.int32)[:4],
                                                     dcp_local_seq_lens=shared.view(torch.int32)[2:7]),
         r"dcp_local_seq_lens must not share memory with seq_lens|seq_lens must not share memory with dcp"),
    ]


# Values only the host op reads (device paths keep every access in bounds instead: the test below).
_BAD_VALUES = [
    ("more logits than a query", dict(cu_num_logits=_i32(0, 4, 5, 6)), r"cu_num_logits gives request 0 4 logits"),
    ("a prompt past all_token_ids", dict(all_token_ids=torch.zeros(3, 4, dtype=torch.int32)),
     r"past the all_token_ids width 4"),
    ("a position past the blocks of its row", dict(num_blocks=[_i32(2, 0, 0)]), r"num_blocks\[0\]"),
]


@pytest.mark.parametrize("label, changes, message", _bad(), ids=[b[0] for b in _bad()])
def test_bad_input_names_the_argument_and_writes_nothing(backend, label, changes, message):
    _assert_rejected(label, changes, message)


@pytest.mark.parametrize("label, changes, message", _BAD_VALUES, ids=[b[0] for b in _BAD_VALUES])
def test_bad_values_are_rejected_by_the_host_op_before_any_write(label, changes, message):
    _assert_rejected(label, changes, message)


def _assert_rejected(label: str, changes: dict, message: str) -> None:
    case = _hand_case()
    kw = dict(case["kwargs"], **changes)
    outputs = [t for name in ("positions", "seq_lens", "input_ids", "next_prefill_tokens", "logits_indices",
                              "expanded_idx_mapping", "expanded_local_pos", "dcp_local_seq_lens")
               if (t := kw.get(name)) is not None] + kw["slot_mappings"] + (kw["gathered_block_tables"] or [])
    before = [t.clone() for t in outputs]
    with pytest.raises((ValueError, TypeError), match=message):
        specops.prepare_spec_decode_inputs(case["counts"], E.clone(), E, E, E, E, case["qsl"], case["tables"],
                                           case["block_sizes"], **kw)
    for t, b in zip(outputs, before):
        assert torch.equal(t, b), label


def test_an_input_id_output_on_a_block_table_is_rejected(backend):
    case = _hand_case()
    buffer = torch.zeros(14, dtype=torch.int32)
    buffer[:6] = _i32(1, 2, 0, 0, 5, 6)
    case["tables"] = [buffer[:6].view(3, 2)]
    with pytest.raises(ValueError, match=r"input_ids must not share memory with block_tables\[0\]"):
        _call(case, input_ids=buffer[4:12])


def _opcheck_args(case: dict) -> tuple[tuple, dict]:
    kw = case["kwargs"]
    args = (case["counts"], E.clone(), E, E, E, E, case["qsl"], kw["positions"], kw["seq_lens"], case["tables"],
            kw["slot_mappings"], kw["idx_mapping"], 8, 4, 2, 1, 1, case["block_sizes"], [1], [True], [True],
            kw["num_blocks"], True, kw["gathered_block_tables"], 4, [])
    parts = {name: kw[name] for name in ("input_ids", "prefill_len", "last_sampled_tokens", "draft_tokens",
                                         "cu_num_logits", "all_token_ids", "next_prefill_tokens", "logits_indices",
                                         "expanded_idx_mapping", "expanded_local_pos", "dcp_local_seq_lens")}
    return args, parts


def test_opcheck():
    args, parts = _opcheck_args(_hand_case())
    torch.library.opcheck(torch.ops.specops.prepare_spec_decode_inputs.default, args, parts)


def test_compiles_without_graph_break():
    case = _hand_case()
    kw = case["kwargs"]

    def step(positions, seq_lens, input_ids, logits_indices, dcp):
        specops.prepare_spec_decode_inputs(
            case["counts"], E.clone(), E, E, E, E, case["qsl"], case["tables"], case["block_sizes"],
            **dict(kw, positions=positions, seq_lens=seq_lens, input_ids=input_ids, logits_indices=logits_indices,
                   dcp_local_seq_lens=dcp))
        return input_ids + 1, dcp * 2

    assert_compiles_like_eager(step, kw["positions"], kw["seq_lens"], kw["input_ids"], kw["logits_indices"],
                               kw["dcp_local_seq_lens"])


_BANDED = ("positions", "seq_lens", "input_ids", "next_prefill_tokens", "logits_indices", "expanded_idx_mapping",
           "expanded_local_pos", "dcp_local_seq_lens")


@settings(max_examples=examples(10), deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_device_paths_stay_in_bounds_and_agree_on_hostile_values(seed):
    """Rows past the tables and the request-indexed tensors, counts and logits offsets at the int32
    limits: Triton and the reference write the same values and nothing outside their outputs
    (each output in the middle of a canary-filled buffer)."""
    rng = random.Random(seed)
    case = _random_case(rng)
    if case["qsl"].numel() == 1:
        return
    kw = case["kwargs"]
    idx = kw["idx_mapping"]
    for r in range(idx.numel()):
        idx[r] = rng.choice([int(idx[r]), -5, 10**6, case["counts"].numel()])
    for row in range(case["counts"].numel()):
        case["counts"][row] = rng.choice([int(case["counts"][row]), -(2**31), 2**31 - 1, -3])
    kw["cu_num_logits"][rng.randrange(kw["cu_num_logits"].numel())] = rng.choice([-(2**31), 2**31 - 1, 10**6])
    results = {}
    for backend in ("triton", "reference"):
        current = dict(kw)
        bands = []

        def banded(t):
            buffer = torch.full((t.numel() + 16,), 0x5A5A, dtype=t.dtype)
            bands.append(buffer)
            return buffer[8:-8].view(t.shape).copy_(t)

        for name in _BANDED:
            current[name] = banded(kw[name])
        current["slot_mappings"] = [banded(t) for t in kw["slot_mappings"]]
        current["gathered_block_tables"] = [banded(t) for t in kw["gathered_block_tables"]]
        with specops.backend(backend):
            _call(dict(case, kwargs=current))
        for buffer in bands:
            assert (buffer[:8] == 0x5A5A).all() and (buffer[-8:] == 0x5A5A).all(), backend
        results[backend] = [current[name] for name in _BANDED] + current["slot_mappings"] + \
            current["gathered_block_tables"]
    for ours, theirs in zip(results["triton"], results["reference"]):
        assert_same(ours, theirs)
