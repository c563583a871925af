"""Prefill context parallelism across real processes: specops.pcp_distributed_check over gloo
with 2 and 4 ranks on 127.0.0.1 (every token's KV written exactly once, the restore exact, the
layout identical on every rank), and a rank that fails reported with its error."""

from __future__ import annotations

import pytest

from specops import pcp_distributed_check as check


@pytest.mark.parametrize("world_size", [2, 4])
def test_gloo_ranks_agree(world_size):
    assert check.run_local(world_size, backend="gloo") == []


def test_a_rejected_layout_is_reported_by_every_rank():
    case = check.PCPCase("shard with DCP", (1, 2), (10, 0), (False, True), shard_decode_requests=True,
                         dcp_world_size=2)
    failures = check.run_local(2, cases=[case])
    assert len(failures) == 2 and all("raised" in f and "shard_decode_requests" in f for f in failures), failures
