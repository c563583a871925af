"""The world drive_mrv2.py runs vLLM's model runner V2 in: its sizes, its three KV-cache groups,
and the proofs' scheduler (workload.py) over them."""

from __future__ import annotations

import types

import host

host.apply()

import workload  # noqa: E402
from vllm.version import __version__ as VLLM_VERSION  # noqa: E402
from workload import MAX_MODEL_LEN, MAX_NUM_REQS, MAX_NUM_TOKENS, VOCAB  # noqa: E402,F401 (the drivers' names)

VLLM_0_33 = VLLM_VERSION.startswith("0.33.")

HIDDEN = 8
# The three KV-cache groups: full attention (CP-sharded), sliding window (replicated, reach 24),
# and a group without a slot mapping (a state-space layer's table, gathered but never mapped).
BLOCK_SIZES = [16, 16, 32]
DCP_SHARDED = [True, False, True]
SLOT_MAPPING_ENABLED = [True, True, False]
SLIDING_WINDOW_REACH = [0, 24, 0]


class Config(types.SimpleNamespace):
    """name, seed, steps, k (drafts), dcp (size), dcp_rank, pcp (size), pcp_rank."""


def dcp_widths(dcp: int) -> list[int]:
    """Each group's CP width: the DCP size for a sharded group, 1 for a replicated one."""
    return [dcp if sharded else 1 for sharded in DCP_SHARDED]


def groups_blocks(num_tokens: int, dcp: int) -> list[int]:
    """Blocks each group's table needs for positions [0, num_tokens)."""
    return workload.groups_blocks(num_tokens, BLOCK_SIZES, dcp_widths(dcp))


def scheduler(cfg: Config) -> workload.Scheduler:
    """The proofs' scheduler (workload.py) over these groups."""
    return workload.Scheduler(cfg, BLOCK_SIZES, dcp_widths(cfg.dcp))
