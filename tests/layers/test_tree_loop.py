"""Token-tree speculation's whole step (examples/tree_loop.py): build, the tree's slots, verify,
the accepted path's compaction pairs and the KV move, checked against plain Python every step
(positions, mask, links, accepted path, every verified cache entry), on every backend."""

from __future__ import annotations

import repo_modules

import specops


def _example():
    return repo_modules.load("examples/tree_loop.py")


def test_the_tree_loop_runs_clean(backend):
    example = _example()
    loop = example.Loop(seed=3)
    steps = {"native": 40, "reference": 20}.get(backend, 8)
    for _ in range(steps):
        loop.step()  # every op's outputs are asserted against plain Python inside
    assert loop.counts["steps"] >= steps // 2
    assert loop.counts["accepted"] > 0 and loop.counts["moved"] > 0
    if backend == "native":
        assert loop.counts["finished"] > 0


def test_the_tree_loop_keeps_its_buffers_in_place():
    example = _example()
    loop = example.Loop(seed=4)
    buffers = [loop.positions, loop.tree_mask, loop.retrive, loop.accept_index, loop.src_slots, loop.dst_slots,
               *loop.slot_mappings, *loop.caches]
    pointers = [b.data_ptr() for b in buffers]
    with specops.backend("native"):
        for _ in range(10):
            loop.step()
    assert [b.data_ptr() for b in buffers] == pointers
