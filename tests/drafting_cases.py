"""Shared inputs of the drafting-layer tests: the model and group configs, a random draft step,
and the field-by-field comparisons (against another metadata, or against the layer's naive form)."""

from __future__ import annotations

import dataclasses
import random

import torch
from strategies import query_start_loc_of

import specops
from specops.drafting import (
    CommonDraftInputs,
    DraftAttnMetadata,
    DraftMetadataBuilder,
    GroupConfig,
    ModelConfig,
)
from specops.drafting import naive

MAX_POSITION = 512
ROT_DIM = 8
MAX_NUM_REQS = 12
MAX_NUM_TOKENS = 160

SWA = GroupConfig("swa", block_size=16, storage_block_size=16, sliding_window=24)
FULL = GroupConfig("full", block_size=16, storage_block_size=16, sliding_window=None)
COMPRESSED = GroupConfig("c4", block_size=16, storage_block_size=4, sliding_window=None)
DSPARK = GroupConfig("dspark", block_size=8, storage_block_size=8, sliding_window=24, dspark=True)
SWA_OTHER_WINDOW = GroupConfig("swa8", block_size=16, storage_block_size=32, sliding_window=8)
ALL_GROUPS = (SWA, FULL, COMPRESSED, DSPARK, SWA_OTHER_WINDOW)


def make_model(num_speculative_tokens: int = 3, cp_size: int = 1, cp_rank: int = 0, *, head_dim: int = 64,
               cache: torch.Tensor | None = None, device: str = "cpu") -> ModelConfig:
    if cache is None:
        cache = torch.randn(MAX_POSITION, ROT_DIM, generator=torch.Generator().manual_seed(7)).to(device)
    return ModelConfig(num_heads_q=8, num_heads_kv=2, head_dim=head_dim, rope_cos_sin_cache=cache,
                       num_speculative_tokens=num_speculative_tokens, cp_size=cp_size, cp_rank=cp_rank,
                       num_cube_cores=4, num_vector_cores=8, soc_version="Ascend910B1")


def make_builders(model: ModelConfig, groups, device: str = "cpu") -> list[DraftMetadataBuilder]:
    return [DraftMetadataBuilder(model, group, MAX_NUM_REQS, MAX_NUM_TOKENS, device=device) for group in groups]


def make_step(rng: random.Random, groups, num_speculative_tokens: int, *, num_reqs: int | None = None,
              host_seq_lens: bool | None = None, oversized: bool | None = None) -> CommonDraftInputs:
    """A random draft step: decodes of 1 .. 1 + k tokens, some short prefills, some empty
    requests, padding tokens, a block table and a slot mapping (with PAD) per group. With
    `oversized`, the tensors are longer than R / T, like a runner's persistent buffers."""
    if num_reqs is None:
        num_reqs = rng.randint(0, MAX_NUM_REQS)
    query_lens = []
    for _ in range(num_reqs):
        kind = rng.random()
        if kind < 0.1:
            query_lens.append(0)
        elif kind < 0.8:
            query_lens.append(rng.randint(1, 1 + num_speculative_tokens))
        else:
            query_lens.append(rng.randint(2 + num_speculative_tokens, 12))
    num_tokens = sum(query_lens)
    while num_tokens > MAX_NUM_TOKENS - 8:
        num_tokens -= query_lens.pop()
    num_reqs = len(query_lens)
    context = [rng.randint(0, 300) for _ in query_lens]
    seq_lens = torch.tensor([c + q for c, q in zip(context, query_lens)], dtype=torch.int32)
    query_start_loc = query_start_loc_of(query_lens)
    positions = torch.tensor([c + i for c, q in zip(context, query_lens) for i in range(q)], dtype=torch.int64)
    num_input_tokens = num_tokens + rng.randint(0, 8)
    generator = torch.Generator().manual_seed(rng.randint(0, 2**31))
    block_tables, slot_mappings = {}, {}
    for group in groups:
        cols = -(-MAX_POSITION // group.block_size)
        block_tables[group.name] = torch.randint(0, 1 << 12, (num_reqs, cols), dtype=torch.int32, generator=generator)
        slots = torch.randint(0, 1 << 20, (num_tokens,), generator=generator)
        slots[torch.rand(num_tokens, generator=generator) < 0.1] = specops.PAD_SLOT_ID
        slot_mappings[group.name] = slots
    if host_seq_lens is None:
        host_seq_lens = rng.random() < 0.5
    if oversized is None:
        oversized = rng.random() < 0.3
    if oversized:
        query_start_loc = torch.cat([query_start_loc, torch.full((3,), num_tokens, dtype=torch.int32)])
        seq_lens = torch.cat([seq_lens, torch.zeros(3, dtype=torch.int32)])
        positions = torch.cat([positions, torch.zeros(5, dtype=torch.int64)])
        block_tables = {name: torch.cat([t, t[:1].clone() if t.size(0) else torch.zeros_like(t[:0])])
                        for name, t in block_tables.items()}
        slot_mappings = {name: torch.cat([t, torch.full((4,), -1, dtype=torch.int64)])
                         for name, t in slot_mappings.items()}
    return CommonDraftInputs(
        query_start_loc=query_start_loc, query_start_loc_cpu=query_start_loc.clone(), seq_lens=seq_lens,
        seq_lens_cpu=seq_lens.clone() if host_seq_lens else None, positions=positions, num_reqs=num_reqs,
        num_actual_tokens=num_tokens, num_input_tokens=num_input_tokens, causal=rng.random() < 0.8,
        block_tables=block_tables, slot_mappings=slot_mappings,
    )


FIELDS = [field.name for field in dataclasses.fields(DraftAttnMetadata)]
CP_FIELDS = [field.name for field in dataclasses.fields(specops.CPLocalMetadata)]


def _assert_value(actual, expected, what: str) -> None:
    """Tensors: dtype, shape, device and values (a meta tensor, standing in for a device tensor,
    has only dtype and shape to compare); anything else: type and value."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), what
        assert actual.dtype == expected.dtype and actual.shape == expected.shape, \
            f"{what}: {actual.dtype} {tuple(actual.shape)} != {expected.dtype} {tuple(expected.shape)}"
        if actual.device.type != "meta" and expected.device.type != "meta":
            assert actual.device == expected.device, what
            assert torch.equal(actual, expected), f"{what}: {actual} != {expected}"
    else:
        assert type(actual) is type(expected) and actual == expected, f"{what}: {actual!r} != {expected!r}"


def assert_same_metadata(actual: DraftAttnMetadata, expected: DraftAttnMetadata, what: str = "") -> None:
    """Field by field: tensors equal in dtype, shape and values; host ints equal; None alike."""
    for name in FIELDS:
        a, e = getattr(actual, name), getattr(expected, name)
        if name == "cp":
            for cp_name in CP_FIELDS:
                _assert_value(getattr(a, cp_name), getattr(e, cp_name), f"{what} cp.{cp_name}")
        else:
            _assert_value(a, e, f"{what} {name}")


def _metadata_tensors(meta: DraftAttnMetadata) -> dict[str, torch.Tensor]:
    tensors = {name: getattr(meta, name) for name in FIELDS if isinstance(getattr(meta, name), torch.Tensor)}
    tensors.update({f"cp.{name}": getattr(meta.cp, name) for name in CP_FIELDS
                    if isinstance(getattr(meta.cp, name), torch.Tensor)})
    return tensors


def assert_matches_definitions(meta: DraftAttnMetadata, model: ModelConfig, group: GroupConfig,
                               common: CommonDraftInputs) -> None:
    """Every field against the layer's naive form (specops.drafting.naive: plain Python and
    direct op calls, one group at a time)."""
    expected = naive.draft_metadata(model, group, common)
    for name in FIELDS:
        if name == "cp":
            for cp_name in CP_FIELDS:
                _assert_value(getattr(meta.cp, cp_name), getattr(expected.cp, cp_name), f"{group.name} cp.{cp_name}")
        elif getattr(expected, name) is None:
            assert getattr(meta, name) is None, name
        else:
            _assert_value(getattr(meta, name), getattr(expected, name), f"{group.name} {name}")
