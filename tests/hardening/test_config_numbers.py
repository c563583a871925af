"""Numbers and flags through every constructor (docs/changelog.md, third round).

Config fields take ints and bools as the ops take their int and bool arguments: a Python int
or a NumPy integer (stored as a Python int), never a float (16.0 and 16.5 alike: torch's schema
rejects both); a bool field True or False or a NumPy bool, never a truthy non-bool ("no", 1,
None). Once MappingGroup(16.0), 16.5, sliding_window_reach=2.5 and cp_rank=0.0 were accepted and
every later refresh failed half-way, max_num_blocks_per_req=np.int64(4) was a TypeError, and
cp_sharded="no" was taken as True.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specops import MappingGroup, PersistentMappings
from specops.drafting import DraftMetadataBuilder, GroupConfig, ModelConfig


def _model(**change) -> ModelConfig:
    fields = dict(num_heads_q=8, num_heads_kv=1, head_dim=64, rope_cos_sin_cache=torch.zeros(16, 8),
                  num_speculative_tokens=2, cp_size=2, cp_rank=1, num_cube_cores=24, num_vector_cores=48,
                  soc_version="Ascend910B1")
    return ModelConfig(**{**fields, **change})


def _group(**change) -> GroupConfig:
    fields = dict(name="swa", block_size=16, storage_block_size=64, sliding_window=8, dspark=True,
                  dspark_index_width=128)
    return GroupConfig(**{**fields, **change})


def _mappings(**change) -> PersistentMappings:
    fields = dict(groups=[MappingGroup(16), MappingGroup(4)], max_num_reqs=4, max_num_blocks_per_req=4,
                  max_num_tokens=8, cp_world_size=2, cp_rank=1, cp_interleave=2)
    return PersistentMappings(**{**fields, **change})


def _builder(**change) -> DraftMetadataBuilder:
    fields = dict(model=_model(), group=_group(), max_num_reqs=4, max_num_tokens=8)
    return DraftMetadataBuilder(**{**fields, **change})


def _mapping_group(**change) -> MappingGroup:
    fields = dict(block_size=16, blocks_per_kv_block=2, cp_sharded=True, slot_mapping_enabled=True,
                  sliding_window_reach=4)
    return MappingGroup(**{**fields, **change})


# (constructor, its int fields and their valid values, its bool fields)
CONSTRUCTORS = {
    "MappingGroup": (_mapping_group, dict(block_size=16, blocks_per_kv_block=2, sliding_window_reach=4),
                     ("cp_sharded", "slot_mapping_enabled")),
    "PersistentMappings": (_mappings, dict(max_num_reqs=4, max_num_blocks_per_req=4, max_num_tokens=8,
                                           cp_world_size=2, cp_rank=1, cp_interleave=2), ()),
    "ModelConfig": (_model, dict(num_heads_q=8, num_heads_kv=1, head_dim=64, num_speculative_tokens=2, cp_size=2,
                                 cp_rank=1, num_cube_cores=24, num_vector_cores=48, index_topk=512, index_n_heads=64,
                                 index_head_dim=128), ()),
    # compress_ratio 1: this group is a DSpark group, which no compressed group is.
    "GroupConfig": (_group, dict(block_size=16, storage_block_size=64, sliding_window=8, dspark_index_width=128,
                                 compress_ratio=1),
                    ("dspark",)),
    "DraftMetadataBuilder": (_builder, dict(max_num_reqs=4, max_num_tokens=8), ()),
}
INT_CASES = [(kind, name) for kind, (_, ints, _) in CONSTRUCTORS.items() for name in ints]
BOOL_CASES = [(kind, name) for kind, (_, _, bools) in CONSTRUCTORS.items() for name in bools]


def _field(obj, kind: str, name: str):
    if kind == "PersistentMappings" and name == "max_num_blocks_per_req":
        return obj.max_num_blocks_per_group[0]
    return getattr(obj, name)


@pytest.mark.parametrize("kind,name", INT_CASES, ids=[f"{k}-{n}" for k, n in INT_CASES])
@pytest.mark.parametrize("as_float", [float, lambda v: v + 0.5, lambda v: np.float64(v)],
                         ids=["integral float", "fraction", "numpy float"])
def test_a_float_is_rejected_naming_the_field(kind, name, as_float):
    make, ints, _ = CONSTRUCTORS[kind]
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        make(**{name: as_float(ints[name])})


@pytest.mark.parametrize("kind,name", INT_CASES, ids=[f"{k}-{n}" for k, n in INT_CASES])
@pytest.mark.parametrize("numpy_int", [np.int64, np.int32])
def test_a_numpy_int_is_taken_as_the_int(kind, name, numpy_int):
    make, ints, _ = CONSTRUCTORS[kind]
    made = make(**{name: numpy_int(ints[name])})
    value = _field(made, kind, name)
    assert value == ints[name] and type(value) is int


@pytest.mark.parametrize("kind,name", BOOL_CASES, ids=[f"{k}-{n}" for k, n in BOOL_CASES])
@pytest.mark.parametrize("value", ["no", "", 1, 0, None, 1.0], ids=repr)
def test_a_truthy_non_bool_is_rejected_naming_the_field(kind, name, value):
    make, _, _ = CONSTRUCTORS[kind]
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        make(**{name: value})


@pytest.mark.parametrize("kind,name", BOOL_CASES, ids=[f"{k}-{n}" for k, n in BOOL_CASES])
def test_a_numpy_bool_is_taken_as_the_bool(kind, name):
    make, _, _ = CONSTRUCTORS[kind]
    for value in (np.True_, np.False_):
        if kind == "GroupConfig" and not value:
            made = make(**{name: value}, dspark_index_width=None)
        else:
            made = make(**{name: value})
        assert getattr(made, name) is bool(value)


def test_per_group_widths_take_numpy_ints_and_reject_floats():
    mappings = _mappings(max_num_blocks_per_req=[np.int64(4), 3])
    assert mappings.max_num_blocks_per_group == (4, 3)
    with pytest.raises(ValueError, match=r"max_num_blocks_per_req\[1\]"):
        _mappings(max_num_blocks_per_req=[4, 3.0])


def test_a_numpy_configured_mapping_refreshes_like_an_int_one():
    """The accepted values behave as the ints they are (once 16.0 was kept and broke refresh)."""
    results = []
    for number in (int, np.int64):
        groups = [MappingGroup(number(4), sliding_window_reach=number(3)), MappingGroup(number(2))]
        mappings = PersistentMappings(groups, max_num_reqs=number(2), max_num_blocks_per_req=number(4),
                                      max_num_tokens=number(4))
        mappings.append_blocks(1, [[5, 6], [7, 8, 9]])
        mappings.apply_staged()
        mappings.refresh(torch.tensor([1], dtype=torch.int32), torch.tensor([0, 2], dtype=torch.int32),
                         torch.tensor([4, 5]), num_computed_tokens=torch.tensor([0, 4], dtype=torch.int32))
        results.append([t.clone() for t in (*mappings.block_tables, *mappings.slot_mappings)])
    assert all(torch.equal(a, b) for a, b in zip(*results))
