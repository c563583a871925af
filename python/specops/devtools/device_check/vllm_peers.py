"""vLLM's own Triton kernels beside specops' ops on the same work, for the timing step.

The kernels come as source (build/device-carry/vllm_kernels.py, written by
tools/device_carry.py from vLLM 0.33's wheel) and are launched as vLLM's Python launchers launch
them (grid, arguments, constexprs). Each pair is first run once on fresh copies of one input and
its outputs compared; a pair that disagrees is reported and not timed, since its timing would
compare different work. Where a vLLM launcher serves several KV-cache groups through pointer
tables, both sides here do one group.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Callable
from pathlib import Path

import torch

import specops

I32, I64 = torch.int32, torch.int64
PAD = specops.PAD_SLOT_ID


@dataclasses.dataclass
class PeerCase:
    """One piece of work done by specops and by vLLM: `make()` returns fresh inputs and the two
    calls on them; `outputs(inputs)` names the tensors compared."""

    op: str
    label: str
    make: Callable[[], tuple[dict, Callable[[], object], Callable[[], object]]]
    compared: tuple[str, ...]


def load_kernels(carry_dir: str | Path):
    """The carried module, or None when it is missing."""
    path = Path(carry_dir) / "vllm_kernels.py"
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("specops_device_check_vllm_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def cases(vllm, device: torch.device, num_reqs: int) -> list[PeerCase]:
    """The pairs at one batch size (decode: 4 tokens per request)."""
    query, block_size, cols = 4, 16, 256
    generator = torch.Generator().manual_seed(num_reqs)
    max_reqs = num_reqs + 8
    on = dict(device=device)

    def batch():
        rows = torch.randperm(max_reqs, generator=generator)[:num_reqs].to(I32)
        counts = torch.randint(0, (cols - 2) * block_size, (max_reqs,), generator=generator, dtype=I32)
        table = torch.randint(1, 1 << 20, (max_reqs, cols), generator=generator, dtype=I32)
        qsl = torch.arange(num_reqs + 1, dtype=I32) * query
        positions = (counts[rows.long()].to(I64).repeat_interleave(query) + torch.arange(query).repeat(num_reqs))
        return {"rows": rows.to(**on), "counts": counts.to(**on), "table": table.to(**on), "qsl": qsl.to(**on),
                "positions": positions.to(**on)}

    def gather():
        x = batch()
        x["num_blocks"] = torch.randint(0, cols + 1, (max_reqs,), generator=generator, dtype=I32).to(**on)
        x["ours"] = torch.zeros(max_reqs, cols, dtype=I32, **on)
        x["theirs"] = torch.zeros(max_reqs, cols, dtype=I32, **on)
        num_blocks_2d = x["num_blocks"].view(1, max_reqs)
        src = torch.tensor([x["table"].data_ptr()], dtype=I64, **on)
        dst = torch.tensor([x["theirs"].data_ptr()], dtype=I64, **on)
        strides = torch.tensor([cols], dtype=I64, **on)
        zeros = torch.zeros(1, dtype=I32, **on)
        sizes = torch.tensor([block_size], dtype=I32, **on)
        x["keep"] = (src, dst, strides, zeros, sizes)

        def theirs():
            vllm._gather_block_tables_kernel[(1, max_reqs)](
                x["rows"], src, dst, strides, num_blocks_2d, num_blocks_2d.stride(0), num_reqs, x["counts"], zeros,
                sizes, MASK_SLIDING_WINDOW=False, BLOCK_SIZE=1024)

        def ours():
            specops.gather_block_tables(x["table"], x["num_blocks"], x["rows"], out=x["ours"],
                                        num_reqs_padded=max_reqs)
        return x, ours, theirs

    def slots():
        x = batch()
        tokens = num_reqs * query
        x["ours"] = torch.zeros(tokens + 8, dtype=I64, **on)
        x["theirs"] = torch.zeros(1, tokens + 8, dtype=I64, **on)
        ptrs = torch.tensor([x["table"].data_ptr()], dtype=I64, **on)
        strides = torch.tensor([cols], dtype=I64, **on)
        sizes = torch.tensor([block_size], dtype=I32, **on)
        enabled = torch.ones(1, dtype=torch.bool, **on)
        sharded = torch.ones(1, dtype=torch.bool, **on)
        x["keep"] = (ptrs, strides, sizes, enabled, sharded)

        def theirs():
            vllm._compute_slot_mappings_kernel[(1, num_reqs + 1)](
                x["theirs"].shape[1], x["rows"], x["qsl"], x["positions"], ptrs, strides, sizes, enabled, sharded,
                x["theirs"], x["theirs"].stride(0), 0, CP_SIZE=1, CP_INTERLEAVE=1, PAD_ID=PAD, TRITON_BLOCK_SIZE=1024)

        def ours():
            specops.compute_slot_mapping(x["qsl"], x["positions"], x["table"], block_size, out=x["ours"],
                                         idx_mapping=x["rows"], num_tokens_padded=tokens + 8)
        x["theirs_flat"] = x["theirs"][0]
        return x, ours, theirs

    def positions():
        x = batch()
        tokens = num_reqs * query
        for side in ("ours", "theirs"):
            x[f"{side}_positions"] = torch.zeros(tokens, dtype=I64, **on)
            x[f"{side}_seq_lens"] = torch.zeros(max_reqs, dtype=I32, **on)

        def theirs():
            vllm._prepare_pos_seq_lens_kernel[(num_reqs + 1,)](
                x["theirs_positions"], x["theirs_seq_lens"], x["rows"], x["qsl"], x["counts"], max_reqs,
                BLOCK_SIZE=1024)

        def ours():
            specops.prepare_positions_and_seq_lens(x["counts"], x["qsl"], positions=x["ours_positions"],
                                                   seq_lens=x["ours_seq_lens"], idx_mapping=x["rows"],
                                                   num_reqs_padded=max_reqs)
        return x, ours, theirs

    def sampled_counts():
        x = batch()
        x["cu"] = x["qsl"]
        x["seq_lens"] = torch.randint(1, 4096, (num_reqs,), generator=generator, dtype=I32).to(**on)
        x["prefill_len"] = torch.randint(0, 4096, (max_reqs,), generator=generator, dtype=I32).to(**on)
        kept = torch.randint(0, query + 1, (num_reqs,), generator=generator, dtype=I32).to(**on)
        x["ours_sampled"], x["theirs_sampled"] = kept.clone(), kept.clone()
        x["ours"] = torch.zeros(num_reqs, dtype=I32, **on)
        x["theirs"] = torch.zeros(num_reqs, dtype=I32, **on)

        def theirs():
            vllm._get_num_sampled_and_rejected_kernel[(num_reqs,)](
                x["theirs_sampled"], x["theirs"], x["seq_lens"], x["cu"], x["rows"], x["prefill_len"])

        def ours():
            specops.count_sampled_and_rejected(x["ours_sampled"], x["seq_lens"], x["cu"], x["rows"],
                                               x["prefill_len"], num_rejected=x["ours"])
        return x, ours, theirs

    def next_tokens():
        x = {}
        vocab = 32000
        kept = torch.randint(0, query + 1, (num_reqs,), generator=generator)
        sampled = torch.randint(0, vocab, (num_reqs, query), generator=generator, dtype=I32)
        sampled[torch.arange(query).expand(num_reqs, query) >= kept.unsqueeze(1)] = -1
        x["sampled"] = sampled.to(**on)
        x["discard"] = (torch.rand(num_reqs, generator=generator) < 0.2).to(**on)
        x["backup"] = torch.randint(0, vocab, (num_reqs,), generator=generator, dtype=I32).to(**on)
        for side in ("ours", "theirs"):
            x[f"{side}_next"] = torch.zeros(num_reqs, dtype=I32, **on)
            x[f"{side}_count"] = torch.zeros(num_reqs, dtype=I32, **on)

        def theirs():
            vllm.eagle_prepare_next_token_padded_kernel[(num_reqs,)](
                x["sampled"], x["discard"], x["backup"], x["theirs_next"], x["theirs_count"], vocab, query, num_reqs,
                x["sampled"].stride(0), BLOCK_SIZE_TOKENS=_pow2(query))

        def ours():
            specops.prepare_next_token_ids(x["sampled"], vocab, discard_request_mask=x["discard"],
                                           backup_next_token_ids=x["backup"], next_token_ids=x["ours_next"],
                                           valid_sampled_token_count=x["ours_count"])
        return x, ours, theirs

    def draft_step():
        x = batch()
        limit = (cols - 1) * block_size
        x["start"] = torch.randint(0, limit - 8, (num_reqs,), generator=generator).to(**on)
        x["draft_table"] = x["table"][:num_reqs].contiguous()
        for side in ("ours", "theirs"):
            x[f"{side}_seq_lens"] = (x["start"] + 1).to(I32)
            x[f"{side}_slots"] = torch.full((num_reqs + 8,), 77, dtype=I64, **on)
            x[f"{side}_positions"] = torch.zeros(num_reqs, dtype=I64, **on)

        def theirs():
            vllm.eagle_step_slot_mapping_metadata_kernel[(num_reqs + 8,)](
                x["start"], x["draft_table"], x["draft_table"].stride(0), x["theirs_seq_lens"], x["theirs_positions"],
                x["theirs_slots"], block_size=block_size, max_model_len=limit, n_blocks_per_req=cols, PAD_ID=PAD,
                batch_size=num_reqs)

        def ours():
            specops.advance_draft_step(x["start"], x["ours_seq_lens"], [x["draft_table"]], block_size,
                                       max_model_len=limit, out_positions=x["ours_positions"],
                                       slot_mappings=[x["ours_slots"]], num_tokens_padded=num_reqs + 8)
        return x, ours, theirs

    label = f"R={num_reqs}"
    return [
        PeerCase("gather_block_tables", f"{label} cols={cols} G=1", gather, ("ours:theirs",)),
        PeerCase("compute_slot_mapping", f"{label} q={query} G=1", slots, ("ours:theirs_flat",)),
        PeerCase("prepare_positions_and_seq_lens", f"{label} q={query}", positions,
                 ("ours_positions:theirs_positions", "ours_seq_lens:theirs_seq_lens")),
        PeerCase("count_sampled_and_rejected", f"{label} q={query}", sampled_counts,
                 ("ours_sampled:theirs_sampled", "ours:theirs")),
        PeerCase("prepare_next_token_ids", f"{label} k={query - 1}", next_tokens,
                 ("ours_next:theirs_next", "ours_count:theirs_count")),
        PeerCase("advance_draft_step", f"{label} G=1", draft_step,
                 ("ours_positions:theirs_positions", "ours_seq_lens:theirs_seq_lens", "ours_slots:theirs_slots")),
    ]


def disagreement(case: PeerCase, inputs: dict) -> str | None:
    """After one call of each side on fresh inputs: None when every compared pair is equal."""
    for pair in case.compared:
        mine, theirs = pair.split(":")
        got, want = inputs[mine].cpu(), inputs[theirs].cpu()
        if got.shape != want.shape:
            return f"{mine} {tuple(got.shape)} vs vLLM's {theirs} {tuple(want.shape)}"
        if got.dtype != want.dtype:
            got, want = got.to(I64), want.to(I64)
        if not torch.equal(got, want):
            index = tuple((got != want).nonzero()[0].tolist())
            return f"{mine}{list(index)} = {got[index].item()}, vLLM's {want[index].item()}"
    return None
