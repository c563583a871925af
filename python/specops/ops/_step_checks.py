"""Metadata checks shared by the step-bookkeeping ops, mirroring csrc/cpu/step_checks.h."""

from __future__ import annotations

import torch

from specops.ops._checks import checked_size


def padded_end(out: torch.Tensor, out_name: str, padded: int, padded_name: str, real: int, real_name: str) -> int:
    """Where the padding of out ends: `padded` (-1: the buffer's end), in [real, out.numel()]."""
    if padded < 0:
        return max(out.numel(), real)
    if not real <= padded <= out.numel():
        raise ValueError(f"{padded_name} must be in [{real_name} = {real}, {out_name}.numel() = {out.numel()}], "
                         f"got {padded}")
    return padded


def padded_argument(value: int | None, name: str) -> int:
    """A wrapper's optional *_padded argument as the schema takes it (-1: each buffer's end).
    Checked before the wrapper sizes an output from it: a padded extent is an int32 count."""
    if value is None:
        return -1
    value = checked_size(value, name, 0)
    if value >= 2**31 - 1:
        raise ValueError(f"{name} must be < 2^31 - 1, got {value}")
    return value
