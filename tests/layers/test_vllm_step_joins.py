"""The vLLM plugin's joined launches on stand-ins of model runner V2's objects (no vLLM needed):
the target step's launch takes the step's input ids (prepare_inputs' last call) and the DCP-local
seq_lens (execute_model's next call); postprocess_sampled's post_update joins the draft prefill's
launch inside sample_tokens (point "update_prefill"). Each join runs only for exactly the calls it
was made for; anything else launches as before. vLLM's own classes drive the same points in
tests/vllm_integration.
"""

from __future__ import annotations

import types

import pytest
import torch

import specops
from specops.integrations.vllm import draft_steps, mrv2, target_step

ROWS, COLS, WIDTH = 6, 4, 16
IDX = torch.tensor([2, 0, 3])
QSL = torch.tensor([0, 2, 5, 6, 6], dtype=torch.int32)  # R = 3, padded to 4 requests
CU = torch.tensor([0, 2, 3, 4], dtype=torch.int32)


class _Tables:
    """BlockTables' attributes the adapters read (two groups, blocks of 16 and 8)."""

    num_kv_cache_groups = 2
    has_sliding_window_groups = False

    def __init__(self, block_sizes, max_num_reqs, max_num_batched_tokens, max_num_blocks_per_group, device,
                 cp_size=1, cp_rank=0, cp_interleave=1, slot_mapping_enabled=None, dcp_sharded=None,
                 sliding_window_reach=None):
        self.block_sizes = block_sizes
        self.cp_size, self.cp_rank, self.cp_interleave = cp_size, cp_rank, cp_interleave
        generator = torch.Generator().manual_seed(3)
        self.block_tables = [types.SimpleNamespace(gpu=torch.randint(1, 99, (ROWS, COLS), generator=generator,
                                                                     dtype=torch.int32)) for _ in block_sizes]
        self.num_blocks = types.SimpleNamespace(gpu=torch.full((2, ROWS), COLS, dtype=torch.int32))
        self.slot_mappings = torch.full((2, WIDTH), 77, dtype=torch.int64)
        self.input_block_tables = [torch.full((ROWS, COLS), 55, dtype=torch.int32) for _ in block_sizes]
        self._num_dirty_rows = 0


def _runner(dcp: int = 1, tables_dcp: int | None = None):
    tables = _Tables.__new__(_Tables)
    world = dcp if tables_dcp is None else tables_dcp
    draft_steps.make_block_tables_init(_Tables.__init__)(tables, [16, 8], ROWS, WIDTH, [COLS, COLS], "cpu",
                                                         cp_size=world, cp_rank=world - 1)
    return types.SimpleNamespace(
        block_tables=tables, pcp_manager=None, adaptive_verification=None, dcp_size=dcp, dcp_rank=dcp - 1,
        cp_interleave=1, model_state=types.SimpleNamespace(num_new_sampled_tokens_per_step=1),
        input_buffers=types.SimpleNamespace(positions=torch.full((WIDTH,), 99, dtype=torch.int64),
                                            seq_lens=torch.full((ROWS,), 99, dtype=torch.int32),
                                            input_ids=torch.full((WIDTH,), 99, dtype=torch.int32),
                                            dcp_local_seq_lens=torch.full((ROWS,), 99, dtype=torch.int32)),
        req_states=types.SimpleNamespace(
            num_computed_tokens=types.SimpleNamespace(gpu=torch.tensor([5, 0, 20, 9, 0, 0], dtype=torch.int32)),
            prefill_len=types.SimpleNamespace(gpu=torch.tensor([3, 0, 4, 2, 0, 0], dtype=torch.int32)),
            last_sampled_tokens=torch.arange(100, 100 + ROWS).view(ROWS, 1),
            draft_tokens=torch.arange(ROWS * 2).view(ROWS, 2) + 500))


def _step(runner, *, combine_idx: torch.Tensor = IDX):
    """prepare_inputs through its seam, its body calling prepare_pos_seq_lens and then
    combine_sampled_and_draft_tokens as vLLM's does; returns the logits indices."""
    pos_seq_lens = target_step.make_prepare_pos_seq_lens(lambda *args: pytest.fail("vLLM's own launch"))
    combine = mrv2.make_combine_sampled_and_draft_tokens(lambda *args: pytest.fail("vLLM's own launch"), None, None)
    out = {}

    def body(self, scheduler_output, batch_req_state, batch_desc, num_active_loras):
        states, buffers = self.req_states, self.input_buffers
        pos_seq_lens(IDX, QSL, states.num_computed_tokens.gpu, buffers.positions, buffers.seq_lens)
        out["logits"] = combine(buffers.input_ids, combine_idx, states.last_sampled_tokens, QSL, buffers.seq_lens[:4],
                                states.prefill_len.gpu, states.draft_tokens, CU, 4)

    seam = mrv2.make_prepare_inputs(body)
    seam(runner, None, types.SimpleNamespace(num_tokens=6, req_ids=["a", "b", "c"]), types.SimpleNamespace(num_reqs=4), 0)
    return out["logits"]


def _counted(patch, *names: str) -> list[str]:
    """Calls of the named specops ops (each still runs)."""
    calls = []
    for name in names:
        op = getattr(specops, name)
        patch.setattr(specops, name, lambda *args, _op=op, _name=name, **kwargs: (calls.append(_name),
                                                                                   _op(*args, **kwargs))[1])
    return calls


def _input_ids_alone(runner) -> tuple[torch.Tensor, torch.Tensor]:
    states = runner.req_states
    input_ids = torch.full((WIDTH,), 99, dtype=torch.int32)
    result = specops.prepare_input_ids(input_ids, IDX, QSL[:4], states.num_computed_tokens.gpu, states.prefill_len.gpu,
                                       states.last_sampled_tokens, states.draft_tokens, CU, num_logits=4)
    return input_ids, result.logits_indices


def test_the_input_ids_join_the_target_steps_launch():
    runner = _runner()
    with pytest.MonkeyPatch.context() as patch:
        calls = _counted(patch, "prepare_spec_decode_inputs", "prepare_input_ids")
        logits = _step(runner)
    assert calls == ["prepare_spec_decode_inputs"]
    input_ids, expected_logits = _input_ids_alone(_runner())
    assert torch.equal(runner.input_buffers.input_ids, input_ids) and torch.equal(logits, expected_logits)
    # The target step's outputs too: the consuming ends find them written.
    compute = draft_steps.make_compute_slot_mappings(lambda *args: "vllm")
    assert compute(runner.block_tables, IDX, QSL, runner.input_buffers.positions[:8], 8).shape == (2, 8)


def test_a_combine_over_another_batch_leaves_the_target_step_its_own_launch():
    runner = _runner()
    with pytest.MonkeyPatch.context() as patch:
        calls = _counted(patch, "prepare_spec_decode_inputs", "prepare_input_ids")
        _step(runner, combine_idx=IDX.clone())
    assert calls == ["prepare_spec_decode_inputs", "prepare_input_ids"]


def test_without_its_last_call_prepare_inputs_still_launches_the_target_step():
    runner = _runner()
    pos_seq_lens = target_step.make_prepare_pos_seq_lens(lambda *args: pytest.fail("vLLM's own launch"))

    def body(self, *args):
        pos_seq_lens(IDX, QSL, self.req_states.num_computed_tokens.gpu, self.input_buffers.positions,
                     self.input_buffers.seq_lens)
        assert (self.input_buffers.seq_lens == 99).all()  # deferred to the last call

    with pytest.MonkeyPatch.context() as patch:
        calls = _counted(patch, "prepare_spec_decode_inputs")
        mrv2.make_prepare_inputs(body)(runner, None, types.SimpleNamespace(num_tokens=6, req_ids=["a", "b", "c"]),
                                       types.SimpleNamespace(num_reqs=4), 0)
    assert calls == ["prepare_spec_decode_inputs"] and runner.input_buffers.seq_lens[:3].tolist() == [22, 8, 10]


def _dcp_call(runner, adapter):
    buffers = runner.input_buffers
    return adapter(buffers.dcp_local_seq_lens, buffers.seq_lens[:4], 3, runner.dcp_size, runner.dcp_rank,
                   runner.cp_interleave, num_reqs_padded=4)


def test_the_dcp_local_seq_lens_join_the_target_steps_launch_once():
    runner = _runner(dcp=2)
    adapter = mrv2.make_prepare_dcp_local_seq_lens(None)
    _step(runner)
    # Rank 1 of 2 holds the odd positions: 11 of 22, 4 of 8, 5 of 10; 0 past R.
    assert runner.input_buffers.dcp_local_seq_lens.tolist() == [11, 4, 5, 0, 0, 0]
    with pytest.MonkeyPatch.context() as patch:
        calls = _counted(patch, "dcp_local_seq_lens")
        assert _dcp_call(runner, adapter).tolist() == [11, 4, 5, 0]
        assert calls == []
        _dcp_call(runner, adapter)  # consumed: the same call again launches
        assert calls == ["dcp_local_seq_lens"]


def test_block_tables_of_another_cp_layout_leave_the_dcp_local_seq_lens_to_their_launch():
    runner = _runner(dcp=2, tables_dcp=1)
    _step(runner)
    assert (runner.input_buffers.dcp_local_seq_lens == 99).all()
    with pytest.MonkeyPatch.context() as patch:
        calls = _counted(patch, "dcp_local_seq_lens")
        _dcp_call(runner, mrv2.make_prepare_dcp_local_seq_lens(None))
    assert calls == ["dcp_local_seq_lens"]


# Point "update_prefill".
def _interface_postprocess_state(self, idx_mapping, num_sampled, num_computed_tokens=None):
    return None


class _Speculator:
    def propose(self, *args, **kwargs):
        pass


_Speculator.propose.__specops_point__ = "draft_steps"  # vLLM's propose, served by the draft_steps seam


class _OwnPropose(_Speculator):
    def propose(self, *args, **kwargs):  # a subclass's own: what it reads is not known
        pass


class _ModelState:
    postprocess_state = _interface_postprocess_state


class _Watermarking:
    pass


def _sampling(own_state: bool = False, speculator=_Speculator, sampler=object):
    """A runner inside sample_tokens' seam, and one step's post_update and draft-prefill arguments."""
    runner = types.SimpleNamespace(speculator=speculator(), sampler=sampler(), model_state=_ModelState())
    if own_state:
        runner.model_state = type("OwnState", (), {"postprocess_state": lambda self, *args: None})()
    rows = 4
    batch = types.SimpleNamespace(
        num_reqs=2, idx_mapping=torch.tensor([2, 0]), query_start_loc=torch.tensor([0, 3, 4], dtype=torch.int32),
        input_ids=torch.tensor([11, 12, 13, 21], dtype=torch.int32), positions=torch.tensor([5, 6, 7, 9]),
        seq_lens=torch.tensor([8, 10], dtype=torch.int32))
    state = dict(num_computed_tokens=torch.tensor([3, 0, 5, 0], dtype=torch.int32),
                 last_sampled_tokens=torch.arange(100, 100 + rows).view(rows, 1),
                 all_token_ids=torch.zeros(rows, 10, dtype=torch.int32), total_len=torch.tensor([3, 0, 6, 0],
                                                                                               dtype=torch.int32))
    sampled = dict(sampled_tokens=torch.tensor([[41, 42, -1], [51, -1, -1]]), num_sampled=torch.tensor([2, 0],
                                                                                                         dtype=torch.int32),
                   num_rejected=torch.tensor([1, 0], dtype=torch.int32))
    drafter = types.SimpleNamespace(last_token_indices=torch.full((4,), 99), current_draft_step=torch.tensor(7),
                                    buffers=types.SimpleNamespace(
                                        input_ids=torch.full((6,), 99, dtype=torch.int32),
                                        positions=torch.full((6,), 99),
                                        query_start_loc=torch.full((5,), 99, dtype=torch.int32),
                                        seq_lens=torch.full((4,), 99, dtype=torch.int32)),
                                    next_prefill_tokens=torch.tensor([[200, 201, 202, 203]], dtype=torch.int32))
    return runner, batch, state, sampled, drafter


def _sample_tokens(runner, batch, state, sampled, drafter, *, prefill_batch=None, prefill: bool = True):
    """sample_tokens through its seam, its body calling post_update and the draft prefill as vLLM's."""
    post_update = mrv2.make_post_update(None)
    prepare_prefill = draft_steps.make_prepare_prefill_inputs(lambda *args: pytest.fail("vLLM's own launch"))

    def body(self, grammar_output):
        post_update(batch.idx_mapping, state["num_computed_tokens"], state["last_sampled_tokens"], None,
                    sampled["sampled_tokens"], sampled["num_sampled"], sampled["num_rejected"], batch.query_start_loc,
                    state["all_token_ids"], state["total_len"], None, None)
        if prefill:
            prepare_prefill(drafter.last_token_indices, drafter.current_draft_step, drafter.buffers,
                            prefill_batch or batch, sampled["num_sampled"], sampled["num_rejected"],
                            state["last_sampled_tokens"], drafter.next_prefill_tokens, 4)

    seam = mrv2.make_sample_tokens(body, _interface_postprocess_state, _Watermarking)
    seam(runner, None)


def _expected(batch, state, sampled, drafter) -> dict:
    state = {k: v.clone() for k, v in state.items()}
    buffers = {k: v.clone() for k, v in vars(drafter.buffers).items()}
    last_token_indices = drafter.last_token_indices.clone()
    specops.post_update_after_sampling(batch.idx_mapping, state["num_computed_tokens"],
                                       query_start_loc=batch.query_start_loc, last_sampled_tokens=state["last_sampled_tokens"],
                                       all_token_ids=state["all_token_ids"], total_len=state["total_len"], **sampled)
    specops.prepare_draft_prefill_inputs(
        batch.input_ids, batch.positions, batch.idx_mapping, batch.query_start_loc, batch.seq_lens,
        sampled["num_sampled"], sampled["num_rejected"], state["last_sampled_tokens"], drafter.next_prefill_tokens,
        input_ids=buffers["input_ids"], positions=buffers["positions"], out_query_start_loc=buffers["query_start_loc"],
        out_seq_lens=buffers["seq_lens"], last_token_indices=last_token_indices)
    return dict(state, last_token_indices=last_token_indices, **{f"drafter.{k}": v for k, v in buffers.items()})


def _written(state, drafter) -> dict:
    return dict(state, last_token_indices=drafter.last_token_indices,
                **{f"drafter.{k}": v for k, v in vars(drafter.buffers).items()})


def test_post_update_joins_the_draft_prefills_launch():
    runner, batch, state, sampled, drafter = _sampling()
    expected = _expected(batch, state, sampled, drafter)
    with pytest.MonkeyPatch.context() as patch:
        calls = _counted(patch, "post_update_after_sampling", "prepare_draft_prefill_inputs")
        _sample_tokens(runner, batch, state, sampled, drafter)
    assert calls == ["prepare_draft_prefill_inputs"]
    for name, value in _written(state, drafter).items():
        assert torch.equal(value, expected[name]), name


@pytest.mark.parametrize("case", ["another batch", "no prefill"])
def test_a_post_update_no_prefill_takes_runs_before_anything_reads_it(case):
    runner, batch, state, sampled, drafter = _sampling()
    expected = _expected(batch, state, sampled, drafter)
    other = types.SimpleNamespace(**{**vars(batch), "idx_mapping": batch.idx_mapping.clone()})
    with pytest.MonkeyPatch.context() as patch:
        calls = _counted(patch, "post_update_after_sampling", "prepare_draft_prefill_inputs")
        _sample_tokens(runner, batch, state, sampled, drafter, prefill_batch=other, prefill=case == "another batch")
    if case == "another batch":
        # Its own launch first (the prefill reads the last sampled tokens it writes), then the prefill's.
        assert calls == ["post_update_after_sampling", "prepare_draft_prefill_inputs"]
        for name, value in _written(state, drafter).items():
            assert torch.equal(value, expected[name]), name
    else:  # launched at the seam's exit
        assert calls == ["post_update_after_sampling"]
        for name in state:
            assert torch.equal(state[name], expected[name]), name


@pytest.mark.parametrize("how", ["a model state of its own", "a speculator's own propose", "a watermarking sampler"])
def test_post_update_runs_at_once_where_code_between_may_read_it(how):
    runner, batch, state, sampled, drafter = _sampling(
        own_state=how == "a model state of its own", speculator=_OwnPropose if "propose" in how else _Speculator,
        sampler=_Watermarking if "watermark" in how else object)
    with pytest.MonkeyPatch.context() as patch:
        calls = _counted(patch, "post_update_after_sampling", "prepare_draft_prefill_inputs")
        _sample_tokens(runner, batch, state, sampled, drafter)
    assert calls == ["post_update_after_sampling", "prepare_draft_prefill_inputs"]


def test_outside_sample_tokens_post_update_launches_at_once():
    _, batch, state, sampled, _ = _sampling()
    with pytest.MonkeyPatch.context() as patch:
        calls = _counted(patch, "post_update_after_sampling")
        mrv2.make_post_update(None)(batch.idx_mapping, state["num_computed_tokens"], state["last_sampled_tokens"], None,
                                    sampled["sampled_tokens"], sampled["num_sampled"], sampled["num_rejected"],
                                    batch.query_start_loc, state["all_token_ids"], state["total_len"], None, None)
    assert calls == ["post_update_after_sampling"] and state["total_len"].tolist() == [3, 0, 8, 0]
