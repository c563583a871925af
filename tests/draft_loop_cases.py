"""A target step on PersistentMappings and a DraftLoopPlan over it, with the oracle: the per-pass
path (advance_draft_step applied k - 1 times, build_draft_attn_metadata with exact host lengths)."""

from __future__ import annotations

import random

import torch

from specops import MappingGroup, PersistentMappings
from specops.drafting import DraftLoopPlan, DraftMetadataBuilder, GroupConfig, ModelConfig, build_draft_attn_metadata

ROT_DIM = 8
MAX_REQS = 6
I32 = torch.int32
# The device the setups' schedules are for, given (their builders are on the CPU).
PLATFORM = dict(num_cube_cores=4, num_vector_cores=8, soc_version="Ascend910B1")

# The group kinds: (name, block size, storage block size, window, compress ratio, dspark).
KINDS = {
    "swa": (16, 16, 24, 1, False),
    "full": (16, 16, None, 1, False),
    "c4": (16, 4, 24, 4, False),
    "c128": (16, 8, 24, 128, False),
    "dspark": (8, 8, 24, 1, True),
    "swa_wide": (16, 32, 8, 1, False),
    "full8": (8, 4, None, 1, False),
    "swa4": (4, 2, 12, 1, False),
}


def make_setup(kinds: list[str], *, num_steps: int, max_model_len: int, cp_size: int = 1, cp_rank: int = 0,
               rule: str = "reset", slot_dtype=torch.int64, formats: list[str] | None = None, seed: int = 0,
               shared_schedule: bool = False, sas_variant: str | None = None, device: str = "cpu",
               num_heads_q: int = 64, platform: dict | None = None):
    """Mappings, builders and a DraftLoopPlan over `kinds`. platform: ModelConfig's core counts and
    SoC (default PLATFORM; {} leaves them to the builders' NPU)."""
    rope_rows = max_model_len + 2
    gen = torch.Generator().manual_seed(seed)
    rope = torch.randn(rope_rows, ROT_DIM, generator=gen).to(device)
    tables = {4: torch.randn(rope_rows, ROT_DIM, generator=gen).to(device),
              128: torch.randn(rope_rows, ROT_DIM, generator=gen).to(device)}
    model = ModelConfig(num_heads_q=num_heads_q, num_heads_kv=1, head_dim=64, rope_cos_sin_cache=rope,
                        num_speculative_tokens=num_steps, cp_size=cp_size, cp_rank=cp_rank,
                        **(PLATFORM if platform is None else platform), index_topk=512,
                        compress_rope_cos_sin_caches=tables, sas_variant=sas_variant)
    names = [f"{kind}{i}" for i, kind in enumerate(kinds)]
    groups = [MappingGroup(block_size=KINDS[kind][0], name=name) for kind, name in zip(kinds, names)]
    max_tokens = MAX_REQS * (num_steps + 2)
    mappings = PersistentMappings(groups, max_num_reqs=MAX_REQS,
                                  max_num_blocks_per_req=[-(-(max_model_len + 1) // g.block_size) for g in groups],
                                  max_num_tokens=max_tokens, slot_dtype=slot_dtype, device=device)
    formats = formats or ["int64_padded"] * len(kinds)
    builders = []
    for kind, name, fmt in zip(kinds, names, formats):
        block, storage, window, ratio, dspark = KINDS[kind]
        group = GroupConfig(name, block_size=block, storage_block_size=storage, sliding_window=window,
                            compress_ratio=ratio, dspark=dspark, slot_mapping_format=fmt)
        builders.append(DraftMetadataBuilder(model, group, MAX_REQS, max_tokens, device=device))
    plan = DraftLoopPlan(mappings, builders, num_speculative_tokens=num_steps, max_model_len=max_model_len,
                         past_max_model_len=rule, shared_schedule=shared_schedule)
    return mappings, builders, plan


def allocate_rows(mappings, rng: random.Random, next_block: list[int]) -> None:
    """Blocks for every position below max_model_len + 1 in every group, for every row."""
    for row in range(mappings.max_num_reqs):
        blocks = []
        for g, width in enumerate(mappings.max_num_blocks_per_group):
            ids = rng.sample(range(next_block[0], next_block[0] + 4 * width), width)
            next_block[0] += 4 * width
            blocks.append(ids)
        mappings.append_blocks(row, blocks, overwrite=True)
    mappings.apply_staged()


def target_step(mappings, rng: random.Random, *, num_steps: int, max_model_len: int, num_reqs: int | None = None):
    """A target step's batch written into the mappings: (idx, qsl, seq_lens, token_indices,
    rejected, num_tokens) as host lists/tensors; seq_lens up to max_model_len, some requests
    close to it so that their drafts cross it mid-loop."""
    if num_reqs is None:
        num_reqs = rng.randint(0, MAX_REQS)
    rows = rng.sample(range(MAX_REQS), num_reqs)
    query_lens = [rng.randint(1, num_steps + 1) for _ in rows]
    seq_lens = []
    for q in query_lens:
        near = rng.random() < 0.4
        seq_lens.append(rng.randint(max(q, max_model_len - num_steps - 1), max_model_len) if near else
                        rng.randint(q, max_model_len))
    starts = [0]
    for q in query_lens:
        starts.append(starts[-1] + q)
    num_tokens = starts[-1]
    positions = [s - q + j for q, s in zip(query_lens, seq_lens) for j in range(q)]
    rejected = [rng.randint(0, q - 1) for q in query_lens]
    token_indices = [starts[r + 1] - 1 - rejected[r] for r in range(num_reqs)]
    idx = torch.tensor(rows, dtype=I32)
    qsl = torch.tensor(starts, dtype=I32)
    device = mappings.device
    mappings.positions[:num_tokens] = torch.tensor(positions, dtype=torch.int64)
    mappings.seq_lens.zero_()
    mappings.seq_lens[:num_reqs] = torch.tensor(seq_lens, dtype=I32)
    mappings.refresh(idx.to(device), qsl.to(device), mappings.positions[:num_tokens], num_reqs_padded=num_reqs)
    return dict(idx=idx, qsl=qsl, seq_lens=seq_lens, token_indices=torch.tensor(token_indices, dtype=I32),
                rejected=torch.tensor(rejected, dtype=I32), num_tokens=num_tokens, num_reqs=num_reqs)


def oracle(mappings, builders, step: dict, *, num_steps: int, max_model_len: int, rule: str, num_input_tokens: int,
           num_reqs_padded: int):
    """Every pass's metadata on the per-pass path, plus the exact host seq_lens and the slot
    mappings of each pass (values, cloned)."""
    num_reqs, device = step["num_reqs"], mappings.device
    qsl = step["qsl"]
    common = mappings.draft_inputs(qsl.to(device), qsl, torch.tensor(step["seq_lens"], dtype=I32), num_reqs=num_reqs,
                                   num_actual_tokens=step["num_tokens"], num_input_tokens=num_input_tokens)
    passes = [(build_draft_attn_metadata(builders, common, 1), list(step["seq_lens"]),
               [s[:num_input_tokens].clone() for s in mappings.slot_mappings])]
    draft_qsl = torch.zeros(MAX_REQS + 1, dtype=I32, device=device)
    for k in range(2, num_steps + 1):
        first = k == 2
        result = mappings.advance_draft_step(
            step["idx"].to(device), max_model_len=max_model_len, past_max_model_len=rule,
            token_indices=step["token_indices"].to(device) if first else None,
            num_rejected_tokens=step["rejected"].to(device) if first else None, query_start_loc=draft_qsl,
            num_reqs_padded=num_reqs_padded, num_tokens_padded=num_reqs_padded)
        exact = mappings.seq_lens[:num_reqs].cpu()
        common = mappings.draft_inputs(result.query_start_loc, result.query_start_loc.cpu(), exact, num_reqs=num_reqs,
                                       num_actual_tokens=num_reqs, num_input_tokens=num_reqs_padded,
                                       positions=result.positions)
        passes.append((build_draft_attn_metadata(builders, common, k), exact.tolist(),
                       [s[:num_reqs_padded].clone() for s in mappings.slot_mappings]))
    return passes
