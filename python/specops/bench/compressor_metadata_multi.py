"""Benchmark of compressor_metadata_multi: every compressed group's compressor rows of every
draft pass in one call, against the S x G compressor_metadata calls it replaces (one a group and
pass, the draft loop's former launches) and the torch reference of the same."""

from __future__ import annotations

import torch

import specops
from specops.bench._harness import Case
from specops.ops.registry import OPS
from specops.reference.compressor_metadata_multi import compressor_metadata_multi as torch_multi

BLOCK_SIZE = 128
MAX_POSITIONS = 8192
# (requests, draft passes S, compressed groups G); the groups alternate C4 in (block, offset)
# pairs and C128 flat, rope_dim 64.
SHAPES = [(8, 3, 2), (64, 3, 2), (256, 4, 4)]
QUICK_SHAPES = [(8, 2, 2)]
RATIOS, FORMATS, ROPE_DIM = (4, 128), (2, 1), 64


def cases(device: torch.device, quick: bool) -> list[Case]:
    result = []
    for num_reqs, steps, num_groups in QUICK_SHAPES if quick else SHAPES:
        generator = torch.Generator().manual_seed(num_reqs)
        # Decode-like passes: one token a request a pass, from positions spread over the context.
        start = torch.randint(0, MAX_POSITIONS - steps, (num_reqs,), generator=generator)
        start_pos = (start[None, :] + torch.arange(steps)[:, None]).to(torch.int32).to(device)
        cu_seqlens = torch.arange(num_reqs + 1, dtype=torch.int32).repeat(steps, 1).to(device)
        table_width = MAX_POSITIONS // BLOCK_SIZE
        rope = torch.randn(MAX_POSITIONS, ROPE_DIM, generator=generator).to(torch.bfloat16).to(device)
        ratios = [RATIOS[g % 2] for g in range(num_groups)]
        formats = [FORMATS[g % 2] for g in range(num_groups)]
        tables = [torch.randint(0, 4096, (num_reqs, table_width), generator=generator).to(torch.int32).to(device)
                  for _ in range(num_groups)]
        # Rows a pass can complete: at most one a request (one token each).
        rows = num_reqs
        args = dict(rope_cos=[rope] * num_groups, rope_sin=[rope * 0.5] * num_groups, cu_seqlens=cu_seqlens,
                    start_pos=start_pos, kv_block_tables=tables, kv_block_sizes=[BLOCK_SIZE] * num_groups,
                    slot_mapping_formats=formats, compress_ratios=ratios, num_reqs_actual=num_reqs,
                    compress_cos=[torch.empty(steps, rows, 1, 1, ROPE_DIM, dtype=torch.bfloat16, device=device)
                                  for _ in range(num_groups)],
                    compress_sin=[torch.empty(steps, rows, 1, 1, ROPE_DIM, dtype=torch.bfloat16, device=device)
                                  for _ in range(num_groups)],
                    slot_mappings=[torch.empty((steps, rows) if fmt == 1 else (steps, rows, 2), dtype=torch.int32,
                                               device=device) for fmt in formats])

        def single_ops(a=args, steps=steps):
            for g in range(len(a["rope_cos"])):
                for s in range(steps):
                    specops.compressor_metadata(
                        a["rope_cos"][g], a["rope_sin"][g], a["cu_seqlens"][s], a["start_pos"][s],
                        a["kv_block_tables"][g], a["kv_block_sizes"][g], a["slot_mapping_formats"][g],
                        a["compress_ratios"][g], a["compress_cos"][g].shape[1], a["num_reqs_actual"],
                        compress_cos=a["compress_cos"][g][s], compress_sin=a["compress_sin"][g][s],
                        slot_mapping=a["slot_mappings"][g][s])

        impls = {
            "specops": lambda a=args: specops.compressor_metadata_multi(**a),
            "single ops": single_ops,
            # The reference over the op's argument record (the wrapper's keywords are the schema's).
            "torch-eager": lambda record=OPS["compressor_metadata_multi"].arguments(**args): torch_multi(record),
        }
        result.append(Case("compressor_metadata_multi", f"R={num_reqs} S={steps} G={num_groups}", num_reqs,
                           num_reqs * steps, impls, baselines=("single ops", "torch-eager"), family=f"G={num_groups}"))
    return result
