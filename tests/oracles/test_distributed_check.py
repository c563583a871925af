"""The CP math across real processes: specops.distributed_check over gloo with 2 and 4 ranks on
127.0.0.1, and its verification logic on shares computed in this process, intact and broken."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from specops import distributed_check as check


@pytest.mark.parametrize("world_size", [2, 4])
def test_gloo_ranks_agree(world_size):
    assert check.run_local(world_size, backend="gloo") == []


def _shares(case, world_size):
    batch = check.make_case_batch(case, world_size)
    shares = [check.compute_share(case, batch, world_size, rank, torch.device("cpu")) for rank in range(world_size)]
    return batch, shares


@pytest.mark.parametrize("world_size", [1, 3, 8])
def test_properties_hold_for_other_world_sizes(world_size):
    for case in check.default_cases():
        batch, shares = _shares(case, world_size)
        assert check.verify(case, batch, shares) == []


CASE = check.CheckCase("broken", (37, 1, 0, 23), (0, 70, 12, 9), padding=5, zero_seq_lens=(1,), cp_interleave=4)


def _break_query_split(shares):
    shares[1].local_query_start_loc[2:] += 1  # rank 1 claims one token too many


def _break_causal_seq_lens(shares):
    shares[0].local_seq_lens[0] += 1


def _break_host_maxima(shares):
    shares[1].local_range[2] += 1


def _break_kv_ownership(shares):
    stored = (shares[0].slot_mapping != -1).nonzero()[0]
    shares[1].slot_mapping[stored] = 12345  # a token stored on two ranks


def _break_kv_collision(shares):
    stored = (shares[0].slot_mapping != -1).nonzero().flatten()
    shares[0].slot_mapping[stored[1]] = shares[0].slot_mapping[stored[0]]


def _break_dspark_slice(shares):
    shares[1].dspark_indices[[0, -1]] = shares[1].dspark_indices[[-1, 0]]


def _break_dspark_lens(shares):
    shares[0].dspark_lens[0] += 1


@pytest.mark.parametrize("breakage,message", [
    (_break_query_split, "local query lengths sum"),
    (_break_causal_seq_lens, "local seq_lens"),
    (_break_host_maxima, "host maxima"),
    (_break_kv_ownership, "not exactly one"),
    (_break_kv_collision, "share a KV slot"),
    (_break_dspark_slice, "DSpark slices"),
    (_break_dspark_lens, "DSpark lens"),
])
def test_verify_reports_each_broken_property(breakage, message):
    batch, shares = _shares(CASE, 2)
    assert check.verify(CASE, batch, shares) == []
    shares = [dataclasses.replace(s, **{f.name: getattr(s, f.name).clone() for f in dataclasses.fields(s)})
              for s in shares]
    breakage(shares)
    failures = check.verify(CASE, batch, shares)
    assert failures and any(message in failure for failure in failures), failures


def test_a_rank_that_fails_is_reported_with_its_error():
    failures = check.run_local(2, cases=[dataclasses.replace(CASE, window=-1)])
    message = "window must be in [0, 2^31 - 1], got -1"
    # Both ranks raise the same error; under load one rank may leave first, and the other then
    # reports the broken connection instead: each rank reports, and the error is named.
    assert len(failures) == 2 and all("raised" in f for f in failures), failures
    assert any(message in f for f in failures), failures
