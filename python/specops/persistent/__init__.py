"""Graph-stable block tables and slot mappings of every KV-cache group (docs/persistent_buffers.md).

A captured graph (CUDA graph, Ascend ACL graph) reads its metadata at the addresses it saw
during capture. `PersistentMappings` owns those buffers for every KV-cache group and rewrites
them in place each step, so a replay reads this step's block ids and slots and nothing stale.
Modules: `groups` (MappingGroup and what the mappings derive from the groups), `mappings` (the
buffers, `refresh`, `prepare_step`) and `staging` (the staged-write engine behind
`append_blocks`, `move_row`, `swap_rows` and `apply_staged`).

Invariant: a source row never holds a block id past its count (an overwrite also writes NULL
over the old tail), so slot mappings read through it can never reach a stale block.

Not thread-safe: the staging state and the captured buffers belong to one runner thread (a
PersistentMappings shared by two threads corrupts its staged writes).
"""

from specops.persistent.groups import MappingGroup
from specops.persistent.mappings import PersistentMappings, RunnerStepInputs
from specops.persistent.staging import StagedBlockWrites

__all__ = ["MappingGroup", "PersistentMappings", "RunnerStepInputs", "StagedBlockWrites"]
