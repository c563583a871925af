"""The drafting layer's configuration and its step's inputs and results: the model and each
KV-cache group as the metadata sees them, what the runner hands every group, and what each group
gets back."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import NamedTuple

import torch

from specops.arguments import (
    INT32_MAX,
    check_cp_rank,
    check_int32_range,
    check_non_negative,
    check_positive,
    checked_int,
    normalize_config_fields,
)
from specops.ops.cp_local_metadata import CPLocalMetadata
from specops.sas_layout import ASCEND950, MAX_CUBE_CORES, MAX_VECTOR_CORES
from specops.step_inputs import CommonDraftInputs  # noqa: F401  (re-exported: the layer's input type)

# The StepCache namespace of the drafting entries: (DRAFT_NAMESPACE, draft_index).
DRAFT_NAMESPACE = "draft_for_drafting"

# GroupConfig.slot_mapping_format: int64 [num_input_tokens, 2] with PAD rows (specops' default),
# or int32 [num_actual_tokens, 2] as vllm-ascend's DSA draft builders hand it to the kernels.
SLOT_MAPPING_FORMATS = {"int64_padded": torch.int64, "int32_actual": torch.int32}

# GroupConfig.compress_ratio: 1 (a sliding-window or full group), 4 (C4: compressed KV read
# through the indexer's top-k, SCFA) or 128 (C128: every compressed token, CFA).
COMPRESS_RATIOS = (1, 4, 128)
# ModelConfig.sas_variant: the schedule op vllm-ascend's DeviceOperator picks for the device,
# sas_metadata on A2/A3 and kv_quant_sas_metadata (kv_quant_mode=1) on A5 (Ascend950).
SAS_VARIANTS = ("a2a3", "a5")


def sas_variant_of(soc_version: str) -> str:
    """The schedule op vllm-ascend's DeviceOperator picks for a SoC: "a5" on Ascend950, else "a2a3"."""
    return "a5" if ASCEND950 in soc_version else "a2a3"


def check_variant_heads(sas_variant: str, num_heads_q: int, reason: str = "") -> None:
    """kv_quant_sas_metadata schedules 64 or 128 query heads only."""
    if sas_variant == "a5" and num_heads_q not in (64, 128):
        raise ValueError(f"num_heads_q must be 64 or 128 with sas_variant 'a5'{reason}, got {num_heads_q}")


def check_core_counts(num_cube_cores: int | None, num_vector_cores: int | None, source: str = "") -> None:
    """The counts a schedule is planned for, each given one within what its words hold."""
    if num_cube_cores is not None and not 1 <= num_cube_cores <= MAX_CUBE_CORES:
        raise ValueError(f"num_cube_cores must be in [1, {MAX_CUBE_CORES}]{source}, got {num_cube_cores}")
    if num_vector_cores is not None and not 1 <= num_vector_cores <= MAX_VECTOR_CORES:
        raise ValueError(f"num_vector_cores must be in [1, {MAX_VECTOR_CORES}]{source}, got {num_vector_cores}")


@dataclasses.dataclass(frozen=True, eq=False)
class ModelConfig:
    """The draft model as the metadata sees it (shared by every group's builder).

    rope_cos_sin_cache: [max_position, rot_dim], cos in the first rot_dim / 2 columns and sin in
    the others. num_cube_cores / num_vector_cores / soc_version: the device the sparse-attention
    kernel runs on (sas_metadata). Each one left None is read by every builder from its NPU
    (torch_npu's device properties, else the SoC name's table; cached per device) into the
    builder's `platform`, never written here: a config may serve builders on several devices. A
    builder off the NPU needs all three (a ValueError names the first missing one), as the
    schedule ops do (docs/sas_metadata.md, "Core counts and SoC").

    Compressed groups (GroupConfig.compress_ratio 4 / 128) read the indexer settings, as the
    model's hf_config holds them: index_topk (the C4 sas schedule's cmp_topk and the lightning
    indexer's sparse_count: 0, 512 or 1024 with a C4 group, 0 meaning no top-k), index_n_heads / index_head_dim (the indexer's heads and head size).
    compress_rope_cos_sin_caches: per ratio, the compressed layers' [max_position, rot_dim] RoPE
    table (vllm-ascend's get_full_cos_and_sin_dsa("c4") / ("c128")), the compressor metadata's
    rows; a ratio without one uses rope_cos_sin_cache. sas_variant: "a2a3" (sas_metadata) or "a5"
    (kv_quant_sas_metadata with kv_quant_mode=1, and the flat compressor slot format), default
    "a5" when "Ascend950" is in soc_version, as vllm-ascend's DeviceOperator picks the op for
    the device: set here when soc_version is given, else left None and picked by each builder
    from its device's SoC (DraftMetadataBuilder.platform.sas_variant). A given one is kept
    whatever the SoC.
    """

    num_heads_q: int
    num_heads_kv: int
    head_dim: int
    rope_cos_sin_cache: torch.Tensor
    num_speculative_tokens: int
    cp_size: int = 1
    cp_rank: int = 0
    num_cube_cores: int | None = None
    num_vector_cores: int | None = None
    soc_version: str | None = None
    index_topk: int = 512
    index_n_heads: int = 64
    index_head_dim: int = 128
    sas_variant: str | None = None
    compress_rope_cos_sin_caches: Mapping[int, torch.Tensor] | None = None

    def __post_init__(self) -> None:
        # Numbers as the ops take ints (docs/hardening.md, "Bool arguments"): 16.0 is rejected.
        normalize_config_fields(self, ints=("num_heads_q", "num_heads_kv", "head_dim", "num_speculative_tokens",
                                            "cp_size", "cp_rank", "index_topk", "index_n_heads", "index_head_dim"),
                                optional_ints=("num_cube_cores", "num_vector_cores"))
        check_positive(self.num_heads_q, "num_heads_q")
        check_positive(self.num_heads_kv, "num_heads_kv")
        if self.num_heads_q % self.num_heads_kv:
            raise ValueError(
                f"num_heads_q must be a multiple of num_heads_kv = {self.num_heads_kv}, got {self.num_heads_q}")
        check_positive(self.head_dim, "head_dim")
        cache = self.rope_cos_sin_cache
        if not isinstance(cache, torch.Tensor) or cache.dim() != 2 or cache.size(1) < 2 or cache.size(1) % 2:
            shape = list(cache.shape) if isinstance(cache, torch.Tensor) else type(cache).__name__
            raise ValueError(
                f"rope_cos_sin_cache must be a [max_position, rot_dim] tensor with an even rot_dim >= 2, got {shape}")
        check_non_negative(self.num_speculative_tokens, "num_speculative_tokens")
        check_cp_rank(self.cp_size, self.cp_rank, "cp_size")
        # The platform: each one given is checked here, each None is read by the builder.
        check_core_counts(self.num_cube_cores, self.num_vector_cores)
        if self.soc_version is not None and not isinstance(self.soc_version, str):
            raise ValueError(f"soc_version must be a str or None, got {type(self.soc_version).__name__}")
        # 0 is the kernels' "no top-k"; which other values a C4 group's schedule takes is checked
        # where the model meets its groups (DraftMetadataBuilder), before any build.
        if not 0 <= self.index_topk <= INT32_MAX:
            raise ValueError(f"index_topk must be in [0, 2^31 - 1] (0: no top-k), got {self.index_topk}")
        check_positive(self.index_n_heads, "index_n_heads")
        check_positive(self.index_head_dim, "index_head_dim")
        if self.sas_variant is None and self.soc_version is not None:
            object.__setattr__(self, "sas_variant", sas_variant_of(self.soc_version))
        if self.sas_variant is not None:
            if not isinstance(self.sas_variant, str) or self.sas_variant not in SAS_VARIANTS:
                raise ValueError(f"sas_variant must be one of {list(SAS_VARIANTS)} or None, got {self.sas_variant!r}")
            check_variant_heads(self.sas_variant, self.num_heads_q)
        tables = self.compress_rope_cos_sin_caches
        if tables is not None:
            if not isinstance(tables, Mapping):
                raise ValueError(f"compress_rope_cos_sin_caches must map a compress ratio to a tensor, got "
                                 f"{type(tables).__name__}")
            for ratio, table in tables.items():
                if ratio not in COMPRESS_RATIOS[1:]:
                    raise ValueError(f"compress_rope_cos_sin_caches keys must be 4 or 128, got {ratio!r}")
                if not isinstance(table, torch.Tensor) or table.dim() != 2 or table.size(1) != cache.size(1) \
                        or table.dtype != cache.dtype or table.device != cache.device:
                    described = list(table.shape) if isinstance(table, torch.Tensor) else type(table).__name__
                    raise ValueError(f"compress_rope_cos_sin_caches[{ratio}] must be a [max_position, "
                                     f"{cache.size(1)}] tensor of rope_cos_sin_cache's dtype and device, got "
                                     f"{described}")

    def compress_rope_cache(self, ratio: int) -> torch.Tensor:
        """The RoPE table of a ratio's compressed layers: compress_rope_cos_sin_caches[ratio], else
        rope_cos_sin_cache."""
        tables = self.compress_rope_cos_sin_caches
        return tables[ratio] if tables is not None and ratio in tables else self.rope_cos_sin_cache


@dataclasses.dataclass(frozen=True)
class GroupConfig:
    """One KV-cache group: the kernel block size of its block table, the block size its slot
    mapping is formatted with, and its sliding window (None: full attention).

    dspark: the group's draft tokens attend, on non-causal steps, to the sliding window before
    their draft block plus the whole block (dspark_swa_indices). dspark_index_width: the row
    width of its indices (default: sliding_window + num_speculative_tokens rounded up to a
    multiple of 128); a draft pass whose requests see more (a long prefill chunk) needs more.
    slot_mapping_format: "int64_padded" (DraftAttnMetadata.slot_mapping int64 [num_input_tokens,
    2], padding rows PAD's pair) or "int32_actual" (int32 [num_actual_tokens, 2], vllm-ascend's).
    compress_ratio: 1, or 4 / 128 for a compressed group (DeepSeek-V4's C4 / C128 layers, and the
    C4 indexer's k-cache), which keeps its sliding window and is never a DSpark group; it gets the
    sas schedule of its ratio, the lightning-indexer schedule (C4) and its compressor metadata.
    compressor_metadata: False leaves a compressed group's compressor metadata out (its
    compress_* fields None, no launch for it), for a runner that computes it elsewhere (vllm-ascend's
    DSA-CP builders launch it in the forward, at the compressor).
    """

    name: str
    block_size: int
    storage_block_size: int
    sliding_window: int | None
    dspark: bool = False
    dspark_index_width: int | None = None
    slot_mapping_format: str = "int64_padded"
    compress_ratio: int = 1
    compressor_metadata: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.slot_mapping_format, str) or self.slot_mapping_format not in SLOT_MAPPING_FORMATS:
            raise ValueError(f"slot_mapping_format must be one of {sorted(SLOT_MAPPING_FORMATS)}, "
                             f"got {self.slot_mapping_format!r}")
        if not isinstance(self.name, str):
            raise ValueError(f"name must be a str, got {type(self.name).__name__}")
        normalize_config_fields(self, ints=("block_size", "storage_block_size", "compress_ratio"),
                                optional_ints=("sliding_window", "dspark_index_width"),
                                bools=("dspark", "compressor_metadata"))
        check_positive(self.block_size, "block_size")
        check_positive(self.storage_block_size, "storage_block_size")
        if self.sliding_window is not None:
            check_positive(self.sliding_window, "sliding_window")
        elif self.dspark:
            raise ValueError(f"sliding_window must be set for the DSpark group {self.name!r}, got None")
        if self.dspark_index_width is not None:
            if not self.dspark:
                raise ValueError(f"dspark_index_width is only for DSpark groups (dspark=True), got "
                                 f"{self.dspark_index_width} for group {self.name!r}")
            check_int32_range(self.dspark_index_width, "dspark_index_width", 1)
        if self.compress_ratio not in COMPRESS_RATIOS:
            raise ValueError(f"compress_ratio must be one of {list(COMPRESS_RATIOS)}, got {self.compress_ratio}")
        if self.compress_ratio > 1 and self.sliding_window is None:
            raise ValueError(f"sliding_window must be set for the compressed group {self.name!r} (compress_ratio "
                             f"{self.compress_ratio}: its sas schedule keeps the window), got None")
        if self.compress_ratio > 1 and self.dspark:
            raise ValueError(f"dspark must be False for the compressed group {self.name!r} (compress_ratio "
                             f"{self.compress_ratio}), got True")

    @property
    def window(self) -> tuple[int, int]:
        """(left, right) as sas_metadata reads it on a causal step: a token sees itself and the
        sliding_window - 1 tokens before it; full attention is (-1, 0), causal and unbounded."""
        return (-1, 0) if self.sliding_window is None else (self.sliding_window - 1, 0)

    def step_window(self, causal: bool, num_speculative_tokens: int) -> tuple[int, int]:
        """The window of a draft step: on a non-causal (DSpark parallel drafting) step a DSpark
        group's queries see the trailing window and the whole draft block, (sliding_window +
        num_speculative_tokens - 1, 0), as vllm-ascend's DSpark builders pass it."""
        if self.dspark and not causal:
            return (self.sliding_window + num_speculative_tokens - 1, 0)
        return self.window


@dataclasses.dataclass(slots=True, eq=False)
class DraftAttnMetadata:
    """One group's metadata for one draft step. Tensors are views of persistent buffers."""

    num_decodes: int  # requests with query length <= 1 + num_speculative_tokens, not is_prefilling
    num_prefills: int
    num_decode_tokens: int
    num_prefill_tokens: int
    input_positions: torch.Tensor  # int64 [num_input_tokens]; padding tokens have position 0
    cos: torch.Tensor  # [num_input_tokens, rot_dim / 2]: rope_cos_sin_cache[positions, :rot_dim / 2]
    sin: torch.Tensor  # [num_input_tokens, rot_dim / 2]: the other half
    cp: CPLocalMetadata  # tensors [R + 1], [R], [R]
    local_cos: torch.Tensor  # [tokens_per_rank, rot_dim / 2]: cos rows [local_start, local_end) of the padded
    local_sin: torch.Tensor  # stream; rows of padding tokens (stream index >= num_actual_tokens) are zero
    start_pos: torch.Tensor  # int32 [R]: seq_lens - query_lens (cp.start_pos)
    seq_lens_cpu: torch.Tensor  # [R] on the host: the runner's copy (int32 or int64), else int32
    sas_metadata: torch.Tensor | None  # int32 [1024]; None for a group without a sliding window
    slot_mapping: torch.Tensor  # (storage block, offset) per token: GroupConfig.slot_mapping_format
    dspark_swa_indices: torch.Tensor | None  # int32 [tokens_per_rank, 1, width]: DSpark groups, non-causal steps
    dspark_swa_lens: torch.Tensor | None  # int32 [tokens_per_rank]
    window: tuple[int, int]  # (left, right) of this step; (-1, 0) for full attention
    # Compressed groups only (GroupConfig.compress_ratio 4 / 128), else None:
    qli_metadata: torch.Tensor | None = None  # int32 [1024]: the lightning-indexer schedule, C4 groups
    compress_cos: torch.Tensor | None = None  # [N, 1, 1, rot_dim / 2]: compressor_metadata's rows,
    compress_sin: torch.Tensor | None = None  # N = min(T, T // ratio + R)
    compress_slot_mapping: torch.Tensor | None = None  # int32 [N, 2] (A2/A3) or [N] (A5)


class SharedFields(NamedTuple):
    """DraftAttnMetadata's group-invariant fields, named and ordered as its leading fields (a
    step builds each group's metadata with group_metadata)."""

    num_decodes: int
    num_prefills: int
    num_decode_tokens: int
    num_prefill_tokens: int
    input_positions: torch.Tensor
    cos: torch.Tensor
    sin: torch.Tensor
    cp: CPLocalMetadata
    local_cos: torch.Tensor
    local_sin: torch.Tensor
    start_pos: torch.Tensor
    seq_lens_cpu: torch.Tensor


def group_metadata(shared: SharedFields, *, sas_metadata: torch.Tensor | None, slot_mapping: torch.Tensor,
                   dspark_swa_indices: torch.Tensor | None, dspark_swa_lens: torch.Tensor | None,
                   window: tuple[int, int]) -> DraftAttnMetadata:
    """One group's DraftAttnMetadata: the group-invariant fields, then the group's own by name.
    SharedFields is DraftAttnMetadata's leading fields in order (tests/layers/test_drafting.py
    checks it), so they pass as one star-argument: a step builds this for every group, and
    naming them again there made a dict and bound a dozen keywords per group."""
    return DraftAttnMetadata(*shared, sas_metadata, slot_mapping, dspark_swa_indices, dspark_swa_lens, window)


def checked_draft_index(draft_index: object, num_speculative_tokens: int) -> int:
    """draft_index as the ops take an int (a NumPy int too, never a float), in [1, k]: checked
    on every build, not only when its buffers are first made (a 1.0 equals 1 as a key)."""
    if type(draft_index) is not int:
        draft_index = checked_int(draft_index, "draft_index")
    if not 1 <= draft_index <= num_speculative_tokens:
        raise ValueError(f"draft_index must be in [1, num_speculative_tokens = {num_speculative_tokens}], got "
                         f"{draft_index}")
    return draft_index
