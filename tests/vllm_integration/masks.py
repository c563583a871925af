"""The deliberate differences between a step run by vLLM alone and with the specops plugin: a
fixed list of named masks, each documented in docs/conformance.md ("vLLM's own runner with the
plugin"). A mask says which entries of which recorded buffer may differ and what the plugin's
value there must be; the comparison checks both: every difference lies inside a mask, and every
entry a mask excuses holds the value the mask documents (so a mask cannot hide a wrong value).

Each mask is `(name, applies(buffer_name) -> bool, allowed(theirs, ours) -> bool tensor)`; the
bool tensor marks the entries excused, where `ours` must satisfy `documented(ours)`. `compare`
runs both runs' records through them (both proofs: tests/vllm_integration, tests/vllm_ascend).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch


class Mask(NamedTuple):
    name: str
    applies: Callable[[str], bool]
    excused: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (theirs, ours) -> where they may differ
    documented: Callable[[torch.Tensor], torch.Tensor]  # ours -> where ours holds the documented value


def _zero_row_tail(ours: torch.Tensor) -> torch.Tensor:
    """Entries that are 0 with only 0s after them in their row: the tail past a row's block count
    (real block ids are >= 1; 0 is the null block)."""
    zero = ours == 0
    return zero.flip(-1).cumprod(-1).flip(-1).bool()


def _gathered_table(name: str) -> bool:
    return name.startswith(("block_tables[", "bt.input_block_tables[", "pcp.local_block_tables["))


def _target_positions(name: str) -> bool:
    return name in ("in.positions", "positions")


def _next_prefill_tokens(name: str) -> bool:
    return name == "req.next_prefill_tokens"


def _local_rope(name: str) -> bool:
    return ".cp_metadata.local_cos[" in name or ".cp_metadata.local_sin[" in name


MASKS: list[Mask] = [
    # Point block_tables: past a row's block count gather_block_tables_multi writes the null block
    # where vLLM leaves the ids the batch row held before (docs/conformance.md).
    Mask("stale_table_entries", _gathered_table, lambda theirs, ours: ours == 0, _zero_row_tail),
    # Point target_step: prepare_spec_decode_inputs zeroes the target positions past the step's
    # tokens (to the slot-mapping width), where vLLM's prepare_pos_seq_lens leaves the values an
    # earlier step wrote (docs/conformance.md).
    Mask("target_positions_past_tokens", _target_positions, lambda theirs, ours: ours == 0, _zero_row_tail),
    # Point input_ids on vLLM 0.26 (the vllm-ascend row): prepare_input_ids writes a request's next
    # prefill token as 0 once its prompt is done, where vLLM 0.26's prepare_prefill_inputs leaves
    # the last one it stored (vLLM 0.33 writes 0 too); only a request still in its prompt reads
    # it (docs/conformance.md).
    Mask("next_prefill_token_past_prompt", _next_prefill_tokens, lambda theirs, ours: ours == 0, lambda ours: ours == 0),
    # Point dsa_cp_draft (the vllm-ascend row): this rank's RoPE rows of the padding tokens
    # (stream index >= the step's real tokens) are 0, where vllm-ascend 0.26.0rc1 keeps the rows of
    # their padding positions up to the padded token count (zeros past it); a padding token's
    # attention output is never read (docs/conformance.md).
    Mask("local_rope_padding_rows", _local_rope, lambda theirs, ours: ours == 0, lambda ours: ours == 0),
]


def compare(theirs: dict, ours: dict) -> dict[str, int]:
    """Bitwise comparison of every record, bar the masks; returns each mask's excused entries."""
    hits = {mask.name: 0 for mask in MASKS}
    assert [(s, p) for s, p, _ in theirs["records"]] == [(s, p) for s, p, _ in ours["records"]], "the runs diverged"
    for (step, phase, their_buffers), (_, _, our_buffers) in zip(theirs["records"], ours["records"]):
        assert their_buffers.keys() == our_buffers.keys(), f"step {step} {phase}: recorded buffers differ"
        for name, t in their_buffers.items():
            o = our_buffers[name]
            where = f"step {step} {phase} {name}"
            assert (t.shape, t.dtype) == (o.shape, o.dtype), f"{where}: {t.shape}/{t.dtype} vs {o.shape}/{o.dtype}"
            differ = t != o if not t.is_floating_point() else ~((t == o) | (t.isnan() & o.isnan()))
            excused = torch.zeros_like(differ)
            for mask in MASKS:
                if mask.applies(name):
                    mine = mask.excused(t, o) & differ
                    bad = mine & ~mask.documented(o)
                    assert not bad.any(), (f"{where}: mask {mask.name} excuses index {bad.nonzero()[0].tolist()} "
                                           f"where the plugin's value is not the documented one")
                    hits[mask.name] += int(mine.sum())
                    excused |= mine
            left = differ & ~excused
            if left.any():
                index = left.nonzero()[0].tolist()
                raise AssertionError(f"{where}: index {index}: vLLM {t[tuple(index)].item()}, "
                                     f"plugin {o[tuple(index)].item()} ({int(left.sum())} entries differ)")
    return hits
