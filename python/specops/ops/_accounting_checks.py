"""Checks of the count-correction, positions and seq_lens arguments, mirroring csrc/cpu/accounting_checks.h.

Shared by correct_num_computed_tokens, prepare_positions_and_seq_lens and the fused
prepare_spec_decode_inputs.
"""

from __future__ import annotations

import torch

from specops.ops._checks import check_entries, check_no_overlap, check_query_start_loc, check_tensor

ROWS = "n = prev_positions.numel()"


def check_count_correction(
    num_computed_tokens: torch.Tensor,
    num_accepted_tokens: torch.Tensor,
    prev_positions: torch.Tensor,
    valid_sampled_token_count: torch.Tensor,
    prev_num_draft_tokens: torch.Tensor,
    cpu_num_computed_tokens: torch.Tensor,
) -> None:
    """Mirrors csrc/cpu/accounting_checks.h check_count_correction; shared with the fused op."""
    check_tensor(num_computed_tokens, "num_computed_tokens", [torch.int32], 1)
    device = num_computed_tokens.device
    anchor = "num_computed_tokens"
    check_tensor(num_accepted_tokens, "num_accepted_tokens", [torch.int32], 1, device, anchor)
    check_tensor(prev_positions, "prev_positions", [torch.int32, torch.int64], 1, device, anchor)
    # vllm-ascend's valid counts are int64; a runner may keep int64 host counts.
    check_tensor(valid_sampled_token_count, "valid_sampled_token_count", [torch.int32, torch.int64], 1, device, anchor)
    check_tensor(prev_num_draft_tokens, "prev_num_draft_tokens", [torch.int32], 1, device, anchor)
    check_tensor(cpu_num_computed_tokens, "cpu_num_computed_tokens", [torch.int32, torch.int64], 1, device, anchor)
    num_rows = prev_positions.numel()
    check_entries(num_computed_tokens, "num_computed_tokens", num_rows, ROWS)
    check_entries(num_accepted_tokens, "num_accepted_tokens", num_rows, ROWS)
    check_entries(cpu_num_computed_tokens, "cpu_num_computed_tokens", num_rows, ROWS)
    check_no_overlap(num_accepted_tokens, "num_accepted_tokens", num_computed_tokens, "num_computed_tokens")


def check_positions_and_seq_lens(
    num_computed_tokens: torch.Tensor,
    query_start_loc: torch.Tensor,
    positions: torch.Tensor,
    seq_lens: torch.Tensor,
    num_tokens_padded: int,
    num_reqs_padded: int,
    request_indexed: bool = False,
) -> None:
    """Mirrors csrc/cpu/accounting_checks.h check_positions_and_seq_lens; shared with the fused op.

    query_start_loc[R] <= num_tokens_padded needs a value, so only the CPU op checks it; device
    kernels write nothing past num_tokens_padded. Request-indexed counts (read through
    idx_mapping) need no R entries.
    """
    device = num_computed_tokens.device
    check_tensor(positions, "positions", [torch.int64, torch.int32], 1, device, "num_computed_tokens")
    check_tensor(seq_lens, "seq_lens", [torch.int32], 1, device, "num_computed_tokens")
    num_reqs = check_query_start_loc(query_start_loc, device, "num_computed_tokens")
    if not request_indexed:
        check_entries(num_computed_tokens, "num_computed_tokens", num_reqs, "R = query_start_loc.numel() - 1")
    if not 0 <= num_tokens_padded <= positions.numel():
        raise ValueError(f"num_tokens_padded must be in [0, positions.numel() = {positions.numel()}], "
                         f"got {num_tokens_padded}")
    if not num_reqs <= num_reqs_padded <= seq_lens.numel():
        raise ValueError(f"num_reqs_padded must be in [R = {num_reqs}, seq_lens.numel() = {seq_lens.numel()}], "
                         f"got {num_reqs_padded}")
    check_no_overlap(positions, "positions", seq_lens, "seq_lens")
    for output, output_name in ((positions, "positions"), (seq_lens, "seq_lens")):
        check_no_overlap(output, output_name, num_computed_tokens, "num_computed_tokens")
        check_no_overlap(output, output_name, query_start_loc, "query_start_loc")
