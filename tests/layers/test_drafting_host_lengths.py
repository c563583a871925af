"""The drafting layer hands the host-planned schedule ops (sas_metadata, lightning_indexer_metadata)
host copies of the CP-local lengths on every device (issue 41 item 4): a drafting step whose
device CP-local lengths are device stand-ins (tests/device_stand_in.py: any host read of them
fails) writes the same schedules as with host tensors, reading none of them."""

from __future__ import annotations

import random

import pytest
import torch
from device_stand_in import DeviceStandIn
from draft_loop_cases import MAX_REQS, allocate_rows, make_setup, target_step

import specops
from specops.drafting import build_draft_attn_metadata
from specops.drafting import invariant as invariant_module


def _step(kinds, cp_size, cp_rank, seed):
    mappings, builders, _ = make_setup(kinds, num_steps=1, max_model_len=60, cp_size=cp_size, cp_rank=cp_rank)
    rng = random.Random(seed)
    allocate_rows(mappings, rng, [1])
    step = target_step(mappings, rng, num_steps=1, max_model_len=60, num_reqs=MAX_REQS)
    qsl = step["qsl"]
    common = mappings.draft_inputs(qsl, qsl, torch.tensor(step["seq_lens"], dtype=torch.int32),
                                   num_reqs=step["num_reqs"], num_actual_tokens=step["num_tokens"],
                                   num_input_tokens=step["num_tokens"] + 1)
    return builders, common


def _schedules(metadata) -> list[torch.Tensor | None]:
    return [None if m.sas_metadata is None else m.sas_metadata.clone() for m in metadata] + \
        [None if m.qli_metadata is None else m.qli_metadata.clone() for m in metadata]


@pytest.mark.parametrize("cp_size,cp_rank", [(1, 0), (2, 1)])
def test_a_drafting_step_reads_no_device_length(monkeypatch, cp_size, cp_rank):
    kinds = ["swa", "c4", "c128"]
    with specops.backend("native"):
        builders, common = _step(kinds, cp_size, cp_rank, seed=5)
        expected = _schedules(build_draft_attn_metadata(builders, common, 1))
        assert any(s is not None for s in expected[:len(builders)]) and any(s is not None for s in expected[len(builders):])

        # The step's device CP-local query starts and seq_lens become device stand-ins: a schedule
        # op fed from them would read them (or be refused on the NPU route).
        real = invariant_module.CPLocalMetadata

        def on_device(local_query_start_loc, local_seq_lens, *rest):
            return real(DeviceStandIn(local_query_start_loc), DeviceStandIn(local_seq_lens), *rest)

        monkeypatch.setattr(invariant_module, "CPLocalMetadata", on_device)
        DeviceStandIn.reset_log()
        builders, common = _step(kinds, cp_size, cp_rank, seed=5)
        metadata = build_draft_attn_metadata(builders, common, 1)
    assert isinstance(metadata[0].cp.local_seq_lens, DeviceStandIn)  # the stand-ins did reach the step
    assert DeviceStandIn.reads == []
    for got, want in zip(_schedules(metadata), expected):
        assert (got is None) == (want is None)
        if want is not None:
            assert torch.equal(got, want)


def test_the_host_copies_are_cp_local_metadata_s():
    """What the step hands the schedule ops equals what cp_local_metadata writes on the device."""
    with specops.backend("native"):
        builders, common = _step(["swa", "c4"], 4, 2, seed=11)
        metadata = build_draft_attn_metadata(builders, common, 1)
    captured = {}
    real = invariant_module.GroupInvariant.local_lengths_cpu

    def record(self):
        captured["lengths"] = real(self)
        return captured["lengths"]

    with pytest.MonkeyPatch.context() as patch, specops.backend("native"):
        patch.setattr(invariant_module.GroupInvariant, "local_lengths_cpu", record)
        builders, common = _step(["swa", "c4"], 4, 2, seed=11)
        build_draft_attn_metadata(builders, common, 1)
    starts, seq_lens = captured["lengths"]
    assert starts.device.type == "cpu" and seq_lens.device.type == "cpu"
    assert starts.dtype == seq_lens.dtype == torch.int32
    assert torch.equal(starts, metadata[0].cp.local_query_start_loc.cpu())
    assert torch.equal(seq_lens, metadata[0].cp.local_seq_lens.cpu())
