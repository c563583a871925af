"""The inputs of the sas family (sas_metadata, kv_quant_sas_metadata, lightning_indexer_metadata):
the checks the three ops' metadata checks share, mirrors of csrc/cpu/sas_inputs.h, and the
wrappers' common front (layout strings to codes, soc_version, where out is allocated)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import torch

from specops.ops._checks import check_outputs_alias_nothing, check_tensor
from specops.sas_layout import (
    ASCEND950,
    CMP_RATIOS,
    CMP_TOPKS,
    INT32_MAX,
    INT32_MIN,
    LAYOUT_KV_BSND,
    LAYOUT_KV_CODES,
    LAYOUT_Q_CODES,
    LAYOUT_Q_TND,
    MASK_BAND,
    MASK_CAUSAL,
    MASK_NONE,
    MAX_WINDOW,
    NUM_WORDS,
    is_given,
    num_batches,
)

# What each layout argument accepts, as the messages name it.
LAYOUT_Q_CHOICES = "TND or BSND"
LAYOUT_KV_CHOICES = "TND, BSND or PA_ND"


def check_schedule_inputs(arguments: Mapping[str, object], length_tensors: Sequence[str],
                          int32_attributes: Sequence[str]) -> None:
    """What every member checks first: out (int32, the 1024 words), its length tensors and the
    attributes the kernel reads as int32."""
    out = arguments["out"]
    check_tensor(out, "out", [torch.int32], 1)
    if out.numel() != NUM_WORDS:
        raise ValueError(f"out must have exactly {NUM_WORDS} int32 words, got {out.numel()}")
    host_lengths = device_lengths = None  # the first of each that holds values
    for name in length_tensors:
        tensor = arguments[name]
        if tensor is None:
            continue
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"{name} must be a tensor or None, got {type(tensor).__name__}")
        # An empty tensor is not provided, whatever its dtype and shape (vllm-ascend passes empty
        # float32 placeholders); its device counts, as it selects the kernel. With out on a
        # device, a length tensor is on out's device or on the host (the host-planned form).
        on_host = tensor.device.type == "cpu"
        if tensor.device != out.device and not on_host:
            also = "" if out.device.type == "cpu" else ", or on the host"
            raise ValueError(f"{name} must be on {out.device} like out{also}, got {tensor.device}")
        if tensor.numel():
            check_tensor(tensor, name, [torch.int32, torch.int64], 1)
            if on_host:
                host_lengths = host_lengths or name
            else:
                device_lengths = device_lengths or name
    if device_lengths is not None:
        check_device_lengths(device_lengths, host_lengths, out.device)
    for name in int32_attributes:
        if not INT32_MIN <= arguments[name] <= INT32_MAX:
            raise ValueError(f"{name} must fit int32 (the kernel's attribute type), got {arguments[name]}")


def check_device_lengths(name: str, host_name: str | None, device: torch.device) -> None:
    """A length tensor that holds values on out's device. The host-routed devices (the NPU) plan
    the schedule on the host, and reading a device tensor there would drain the stream on every
    call: refused, naming the host copy to pass instead (docs/sas_metadata.md says why this is an
    error, not a silent copy). Elsewhere the kernel reads the lengths on the device, all of them:
    it cannot read a host tensor beside them."""
    if host_name is not None:
        raise ValueError(f"{name} is on {device} but {host_name} is on the host: pass every length tensor on the "
                         "host (the host-planned form) or every one on out's device")
    if plans_on_host(device):
        raise ValueError(f"{name} is on {device}: on this device the schedule is planned on the host, which would "
                         f"read {name} back with a blocking copy that drains the stream; pass its host copy instead "
                         f"(the runner's query_start_loc_cpu / seq_lens_cpu, or {name}.cpu() where a sync is wanted)")


def plans_on_host(device: torch.device) -> bool:
    """Whether the family plans every schedule for `device` on the host (the NPU, where the
    kernel does not compile; `specops.triton_kernels._launch.assumed_npu` makes any device one)."""
    from specops.triton_kernels._launch import on_npu  # Triton-free; imported on device calls only

    return on_npu(device)


def check_lengths_alias_nothing(arguments: Mapping[str, object], length_tensors: Sequence[str]) -> None:
    """The kernel reads its length tensors while it writes the schedule: out shares memory with none."""
    check_outputs_alias_nothing([(arguments["out"], "out")],
                                [(arguments[name], name) for name in length_tensors if is_given(arguments[name])])


def check_cube_cores_given(num_cube_cores: int) -> None:
    """kv_quant_sas_metadata's and lightning_indexer_metadata's kernels: their first own check."""
    if num_cube_cores == 0:
        raise ValueError("num_cube_cores (AIC num) should not be 0")


def check_nonnegative(arguments: Mapping[str, object], names: Sequence[str]) -> None:
    for name in names:
        if arguments[name] < 0:
            raise ValueError(f"{name} should not be negative, but got {arguments[name]}")


def check_layout_code(code: int, codes: Mapping[str, int], name: str, choices: str) -> None:
    if code not in codes.values():
        raise ValueError(f"{name} must be {choices}, got code {code}")


def check_kv_heads_and_mask(arguments: Mapping[str, object]) -> None:
    """sas_metadata's and kv_quant_sas_metadata's kernels: one KV head, a mask mode they know."""
    if arguments["num_heads_kv"] != 1:
        raise ValueError(f"num_heads_kv should only be 1, but got {arguments['num_heads_kv']}")
    if arguments["ori_mask_mode"] not in (MASK_NONE, MASK_CAUSAL, MASK_BAND):
        raise ValueError(f"ori_mask_mode should be 0, 3 or 4, but got {arguments['ori_mask_mode']}")


def check_window_sign(name: str, window: int) -> None:
    if window < 0:
        raise ValueError(f"{name} should be non-negative, but got {window}")


def check_window_bound(name: str, window: int) -> None:
    if window > MAX_WINDOW:
        raise ValueError(f"{name} must be at most 2^62 (a wider window sees every KV token; near 2^63 the kernel's "
                         f"int64 window sums overflow), got {window}")


def check_sas_layouts(arguments: Mapping[str, object]) -> None:
    """The layout codes sas_metadata's and kv_quant_sas_metadata's kernels accept, and no BSND KV
    under a TND query."""
    layout_q, layout_kv = arguments["layout_q"], arguments["layout_kv"]
    check_layout_code(layout_q, LAYOUT_Q_CODES, "layout_q", LAYOUT_Q_CHOICES)
    check_layout_code(layout_kv, LAYOUT_KV_CODES, "layout_kv", LAYOUT_KV_CHOICES)
    if layout_q == LAYOUT_Q_TND and layout_kv == LAYOUT_KV_BSND:
        raise ValueError("layout_kv must be PA_ND or TND when layout_q is TND, got BSND")


def check_cu_seqlens_q(arguments: Mapping[str, object]) -> None:
    if arguments["layout_q"] == LAYOUT_Q_TND and not is_given(arguments["cu_seqlens_q"]):
        raise ValueError("cu_seqlens_q must be provided for layout_q TND")


def check_cmp_ratio(cmp_ratio: int) -> None:
    if cmp_ratio not in CMP_RATIOS:
        raise ValueError(f"cmp_ratio should only be 4 or 128 when has_cmp_kv, but got {cmp_ratio}")


def check_cmp_topk(cmp_topk: int) -> None:
    if cmp_topk not in CMP_TOPKS:
        raise ValueError(f"cmp_topk should be 0, 512 or 1024 when has_cmp_kv, but got {cmp_topk}")


def batch_source(arguments: Mapping[str, object]) -> str:
    """Where the kernel takes B from: seqused_q, else a TND query's cu_seqlens_q, else batch_size."""
    if is_given(arguments["seqused_q"]):
        return "seqused_q"
    return "cu_seqlens_q" if arguments["layout_q"] == LAYOUT_Q_TND and is_given(arguments["cu_seqlens_q"]) \
        else "batch_size"


def checked_batches(arguments: Mapping[str, object]) -> int:
    """B as the kernel counts it, which its int32 loop counters bound."""
    batches = num_batches(arguments["layout_q"], arguments["cu_seqlens_q"], arguments["seqused_q"],
                          arguments["batch_size"])
    if batches > INT32_MAX:
        raise ValueError(f"{batch_source(arguments)} describes {batches} batches, more than 2^31 - 1")
    return batches


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

