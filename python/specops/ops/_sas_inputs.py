"""The wrappers' common front of the sas family (sas_metadata, kv_quant_sas_metadata,
lightning_indexer_metadata): layout strings to the schema's codes, soc_version, where out is
allocated. The three ops' checks are their C++ (csrc/cpu/sas_inputs.h and each op's file)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import torch

from specops.sas_layout import ASCEND950, LAYOUT_KV_CODES, LAYOUT_Q_CODES, NUM_WORDS

# What each layout argument accepts, as the messages name it.
LAYOUT_Q_CHOICES = "TND or BSND"
LAYOUT_KV_CHOICES = "TND, BSND or PA_ND"


class StringCodes(NamedTuple):
    """A wrapper's string arguments as the schema takes them."""

    first_layout: int  # layout_q / layout_query
    second_layout: int  # layout_kv / layout_key
    ascend950: bool  # from soc_version


class StringArguments:
    """Resolves a member's two layout strings and soc_version, each rejected by name as the
    wrappers always have; the answers for the few combinations a runner passes are kept, so the
    hot path is one dict lookup (`kept`, which a wrapper may look in itself, saving the call)."""

    _KEPT = 64  # combinations kept (a runner passes one or two)

    def __init__(self, first: tuple[str, Mapping[str, int], str], second: tuple[str, Mapping[str, int], str]):
        self._layouts = (first, second)  # (name, codes, choices as the messages name them)
        self.kept: dict[tuple[object, object, object], StringCodes] = {}

    def __call__(self, first: object, second: object, soc_version: object) -> StringCodes:
        try:
            return self.kept[first, second, soc_version]
        except (KeyError, TypeError):  # TypeError: an unhashable value, rejected below
            pass
        codes = StringCodes(*(layout_code(value, *layout) for value, layout in zip((first, second), self._layouts)),
                            is_ascend950(soc_version))
        if len(self.kept) < self._KEPT:
            self.kept[first, second, soc_version] = codes
        return codes


def layout_code(layout: object, name: str, codes: Mapping[str, int], choices: str) -> int:
    """The schema's code for a layout string (the wrappers take the strings)."""
    code = codes.get(layout) if isinstance(layout, str) else None
    if code is None:
        raise ValueError(f"{name} must be {choices}, got {layout!r}")
    return code


def is_ascend950(soc_version: object) -> bool:
    if not isinstance(soc_version, str):
        raise ValueError(f"soc_version must be a str, got {type(soc_version).__name__}")
    return ASCEND950 in soc_version


# sas_metadata's and kv_quant_sas_metadata's strings.
SAS_STRINGS = (("layout_q", LAYOUT_Q_CODES, LAYOUT_Q_CHOICES), ("layout_kv", LAYOUT_KV_CODES, LAYOUT_KV_CHOICES))


def schedule_out(device: torch.device | None, *tensors: torch.Tensor | None) -> torch.Tensor:
    """1024 new words for a call without out: on `device`, else on the device of the first tensor
    that holds values, else of the first tensor given (the lengths all share out's device), else
    on the CPU."""
    if device is None:
        given = [tensor for tensor in tensors if isinstance(tensor, torch.Tensor)]
        holding = [tensor for tensor in given if tensor.numel()]
        device = (holding or given)[0].device if given else torch.device("cpu")
    return torch.empty(NUM_WORDS, dtype=torch.int32, device=device)


def checked_device(device: object, out: torch.Tensor | None) -> torch.device:
    """`device=` as a torch.device; with out given, out's device (an index-less "npu" names any
    NPU, as torch.device does)."""
    if not isinstance(device, (str, torch.device)):
        raise ValueError(f"device must be a str or torch.device, got {type(device).__name__}")
    try:
        resolved = torch.device(device)
    except RuntimeError as error:
        raise ValueError(f"device must name a device, got {device!r}: {error}") from None
    if isinstance(out, torch.Tensor) and (
            out.device.type != resolved.type or resolved.index is not None and out.device.index != resolved.index):
        raise ValueError(f"device is {device!r} but out is on {out.device}")
    return resolved

