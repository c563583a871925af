"""The drafting layer (docs/drafting.md): every KV-cache group's attention metadata for one draft step.

Only two results depend on the group: its formatted slot mapping and, for DSpark groups on
non-causal steps, its DSpark indices. Everything else (decode/prefill split, positions, RoPE
cos/sin, CP local metadata, start_pos, host seq_lens, sas_metadata) is group-invariant: the first
group of a step computes it and the other groups share the same tensors (through a runner's
`StepCache` when it passes one). The groups' own results come from two multi-group ops, one
launch each per step however many groups there are.

    model = ModelConfig(num_heads_q=64, num_heads_kv=1, head_dim=512, rope_cos_sin_cache=cache,
                        num_speculative_tokens=7)
    builders = [DraftMetadataBuilder(model, group, max_num_reqs=256, max_num_tokens=4096) for group in groups]
    metas = build_draft_attn_metadata(builders, common, draft_index=1)

Every result lives in persistent buffers owned by one builder and one draft index (allocated at
that pair's first build), so a captured graph replays against fixed addresses. See
docs/drafting.md for the addresses a cache hit hands out and for the fresh-cache paths.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Hashable, Mapping, Sequence

import numpy as np
import torch

from specops._cp import cp_token_split
from specops._extension import EXTENSION
from specops.ops._checks import check_cp_rank, check_int32_range, check_non_negative, check_positive
from specops.ops.cp_local_metadata import CPLocalMetadata, cp_local_metadata
from specops.ops.dspark_swa_indices import WIDTH_ALIGNMENT, default_width
from specops.ops.dspark_swa_indices_multi import _OP as _DSPARK_SWA_INDICES_MULTI_OP
from specops.ops.format_slot_mapping_blocks_multi import _OP as _FORMAT_SLOT_MAPPING_BLOCKS_MULTI_OP
from specops.ops.sas_metadata import _OP as _SAS_METADATA_OP
from specops.sas_layout import ASCEND950, LAYOUT_KV_CODES, LAYOUT_Q_CODES, MAX_CUBE_CORES, MAX_VECTOR_CORES, NUM_WORDS

__all__ = [
    "DRAFT_NAMESPACE",
    "CommonDraftInputs",
    "DraftAttnMetadata",
    "DraftMetadataBuilder",
    "GroupConfig",
    "ModelConfig",
    "StepCache",
    "build_draft_attn_metadata",
]

logger = logging.getLogger(__name__)

if EXTENSION.loaded:
    from specops import _C

    _NATIVE_ROW_VIEWS = _C.row_views
else:
    _NATIVE_ROW_VIEWS = None

DRAFT_NAMESPACE = "draft_for_drafting"
# Distinct (num_reqs, num_actual_tokens, num_input_tokens) shapes whose buffer views a builder
# keeps per draft index; a runner with graph padding sees a handful.
_MAX_CACHED_SHAPES = 256
# sas_metadata's layout codes for the draft builders' call (_call_sas).
_LAYOUT_Q_TND = LAYOUT_Q_CODES["TND"]
_LAYOUT_KV_PAGED = LAYOUT_KV_CODES["PA_ND"]
_LAYOUT_KV_TND = LAYOUT_KV_CODES["TND"]


@dataclasses.dataclass(frozen=True, eq=False)
class ModelConfig:
    """The draft model as the metadata sees it (shared by every group's builder).

    rope_cos_sin_cache: [max_position, rot_dim], cos in the first rot_dim / 2 columns and sin in
    the others. num_cube_cores / num_vector_cores / soc_version: the device the sparse-attention
    kernel runs on (sas_metadata).
    """

    num_heads_q: int
    num_heads_kv: int
    head_dim: int
    rope_cos_sin_cache: torch.Tensor
    num_speculative_tokens: int
    cp_size: int = 1
    cp_rank: int = 0
    num_cube_cores: int = 24
    num_vector_cores: int = 48
    soc_version: str = "Ascend910B1"

    def __post_init__(self) -> None:
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
        if not 1 <= self.num_cube_cores <= MAX_CUBE_CORES:
            raise ValueError(f"num_cube_cores must be in [1, {MAX_CUBE_CORES}], got {self.num_cube_cores}")
        if not 1 <= self.num_vector_cores <= MAX_VECTOR_CORES:
            raise ValueError(f"num_vector_cores must be in [1, {MAX_VECTOR_CORES}], got {self.num_vector_cores}")
        if not isinstance(self.soc_version, str):
            raise ValueError(f"soc_version must be a str, got {type(self.soc_version).__name__}")


@dataclasses.dataclass(frozen=True)
class GroupConfig:
    """One KV-cache group: the kernel block size of its block table, the block size its slot
    mapping is formatted with, and its sliding window (None: full attention).

    dspark: the group's draft tokens attend, on non-causal steps, to the sliding window before
    their draft block plus the whole block (dspark_swa_indices). dspark_index_width: the row
    width of its indices (default: sliding_window + num_speculative_tokens rounded up to a
    multiple of 128); a draft pass whose requests see more (a long prefill chunk) needs more.
    """

    name: str
    block_size: int
    storage_block_size: int
    sliding_window: int | None
    dspark: bool = False
    dspark_index_width: int | None = None

    def __post_init__(self) -> None:
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


@dataclasses.dataclass
class CommonDraftInputs:
    """What the runner hands every group of one draft step.

    query_start_loc int32 [>= R + 1] and seq_lens int32 [>= R] on the device;
    query_start_loc_cpu int32 [>= R + 1] and seq_lens_cpu (or None; int32 or int64) their host copies;
    positions int64/int32 [>= T]; block_tables[name] int32 [>= R, cols] and
    slot_mappings[name] int64/int32 [>= T] of each group. Longer tensors (persistent buffers)
    are read up to R / T. T = num_actual_tokens real tokens, num_input_tokens the padded count.
    """

    query_start_loc: torch.Tensor
    query_start_loc_cpu: torch.Tensor
    seq_lens: torch.Tensor
    seq_lens_cpu: torch.Tensor | None
    positions: torch.Tensor
    num_reqs: int
    num_actual_tokens: int
    num_input_tokens: int
    causal: bool = True
    block_tables: Mapping[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    slot_mappings: Mapping[str, torch.Tensor] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(slots=True, eq=False)
class DraftAttnMetadata:
    """One group's metadata for one draft step. Tensors are views of persistent buffers."""

    num_decodes: int  # requests with query length <= 1 + num_speculative_tokens
    num_prefills: int
    num_decode_tokens: int
    num_prefill_tokens: int
    input_positions: torch.Tensor  # int64 [num_input_tokens]; padding tokens have position 0
    cos: torch.Tensor  # [num_input_tokens, rot_dim / 2]: rope_cos_sin_cache[positions, :rot_dim / 2]
    sin: torch.Tensor  # [num_input_tokens, rot_dim / 2]: the other half
    cp: CPLocalMetadata  # tensors [R + 1], [R], [R]
    local_cos: torch.Tensor  # [tokens_per_rank, rot_dim / 2]: cos rows [local_start, local_end) of the padded stream
    local_sin: torch.Tensor
    start_pos: torch.Tensor  # int32 [R]: seq_lens - query_lens (cp.start_pos)
    seq_lens_cpu: torch.Tensor  # [R] on the host: the runner's copy (int32 or int64), else int32
    sas_metadata: torch.Tensor | None  # int32 [1024]; None for a group without a sliding window
    slot_mapping: torch.Tensor  # [num_input_tokens, 2] int64: (storage block, offset); padding is PAD's pair
    dspark_swa_indices: torch.Tensor | None  # int32 [tokens_per_rank, 1, width]: DSpark groups, non-causal steps
    dspark_swa_lens: torch.Tensor | None  # int32 [tokens_per_rank]
    window: tuple[int, int]  # (left, right) of this step; (-1, 0) for full attention


class StepCache:
    """The cross-group cache of one step.

    Keys are (namespace, name); drafting entries sit under namespace
    (DRAFT_NAMESPACE, draft_index). An entry is served only while the fingerprint of its inputs
    (identity, shape and _version of each input tensor, plus the sizes) is unchanged, and while
    the buffers holding its value were not rewritten since (by a build with another cache).
    It keeps its input tensors alive, so a tensor id in a fingerprint cannot be reused.

    The fingerprint sees every write that goes through torch: in-place torch ops and every
    specops op bump the version of what they write. It cannot see writes that bypass torch's
    version counter (through a NumPy view of a tensor, `.data`, DLPack, or a kernel of another
    library writing raw memory): after such a write to an input, call `invalidate()` (or start
    a new StepCache). Not thread-safe: one cache per step, used by one thread.
    """

    __slots__ = ("_entries", "hits", "misses")

    def __init__(self) -> None:
        self._entries: dict[tuple[Hashable, Hashable], tuple] = {}
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple[Hashable, Hashable], fingerprint: tuple) -> object | None:
        """The value stored under key = (namespace, name) for this fingerprint, or None (a miss)."""
        entry = self._entries.get(key)
        if entry is not None and entry[0] == fingerprint and (entry[3] is None or entry[3].generation == entry[4]):
            self.hits += 1
            logger.debug("StepCache hit: %s", key)
            return entry[1]
        self.misses += 1
        return None

    def put(self, key: tuple[Hashable, Hashable], fingerprint: tuple, value: object, *, keep_alive: tuple = (),
            owner: object = None) -> None:
        """Stores value under key = (namespace, name). keep_alive: the input tensors named in the
        fingerprint; owner: an object whose `generation` attribute changes whenever the buffers
        behind value are rewritten (None: the value owns no buffer)."""
        generation = None if owner is None else owner.generation
        self._entries[key] = (fingerprint, value, keep_alive, owner, generation)

    def keys(self) -> list[tuple[Hashable, Hashable]]:
        return list(self._entries)

    def invalidate(self) -> None:
        """Forgets every entry: the next build of each group recomputes. For inputs changed in a
        way no fingerprint sees (a NumPy view, `.data`, DLPack: see the class docstring)."""
        self._entries.clear()

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


class _Invariant:
    """What every group of one (step, draft index) shares: `fields` are DraftAttnMetadata's first
    fields, in its order, so a build unpacks them straight into the metadata; the rest is what
    the groups' own ops and checks read."""

    __slots__ = ("fields", "query_lens", "all_decodes", "_max_query_len", "seq_lens_cpu", "query_start_loc",
                 "seq_lens")

    def __init__(self, query_lens: np.ndarray, all_decodes: bool, seq_lens_cpu: torch.Tensor,
                 query_start_loc: torch.Tensor, seq_lens: torch.Tensor):
        self.fields: tuple = ()
        self.query_lens = query_lens  # host, per request
        self.all_decodes = all_decodes  # every query length is at most 1 + num_speculative_tokens
        self._max_query_len: int | None = None
        self.seq_lens_cpu = seq_lens_cpu
        self.query_start_loc = query_start_loc  # [R + 1] and [R] views of the runner's tensors
        self.seq_lens = seq_lens

    @property
    def max_query_len(self) -> int:
        """Only DSpark steps read it: computed on first use."""
        if self._max_query_len is None:
            self._max_query_len = int(self.query_lens.max()) if self.query_lens.size else 0
        return self._max_query_len


class _InvariantViews:
    """The views of one draft index's group-invariant buffers for one (R, T, num_input_tokens)."""

    __slots__ = (
        "split", "positions_real", "positions_tail", "positions_padded", "input_positions", "cos_sin_padded", "cos",
        "sin", "local_cos", "local_sin", "local_query_start_loc", "local_seq_lens", "start_pos", "seq_lens_host",
    )

    def __init__(self, buffers: _DraftBuffers, num_reqs: int, num_tokens: int, num_input_tokens: int,
                 cp_size: int, cp_rank: int):
        split = cp_token_split(num_input_tokens, cp_size, cp_rank)
        self.split = split
        pad = split.num_tokens_pad
        positions, cos, sin = buffers.positions, buffers.cos_columns, buffers.sin_columns
        # Every view in one call; the optional ones (padding rows, a wider padded stream, CP
        # slices, the host seq_lens) last.
        tensors = [positions, positions, buffers.cos_sin, cos, sin, buffers.local_query_start_loc,
                   buffers.local_seq_lens, buffers.start_pos]
        bounds = [0, num_tokens, 0, num_input_tokens, 0, pad, 0, num_input_tokens, 0, num_input_tokens,
                  0, num_reqs + 1, 0, num_reqs, 0, num_reqs]
        if pad > num_tokens:
            tensors.append(positions)
            bounds += [num_tokens, pad]
        if pad != num_input_tokens:
            tensors.append(positions)
            bounds += [0, pad]
        if cp_size > 1:
            tensors += [cos, sin]
            bounds += [split.local_start, split.local_end, split.local_start, split.local_end]
        if buffers.seq_lens_host is not None:
            tensors.append(buffers.seq_lens_host)
            bounds += [0, num_reqs]
        views = _row_views(tensors, bounds)
        (self.positions_real, self.input_positions, self.cos_sin_padded, self.cos, self.sin,
         self.local_query_start_loc, self.local_seq_lens, self.start_pos) = views[:8]
        optional = iter(views[8:])
        self.positions_tail = next(optional) if pad > num_tokens else None
        self.positions_padded = next(optional) if pad != num_input_tokens else self.input_positions
        if cp_size > 1:
            self.local_cos, self.local_sin = next(optional), next(optional)
        else:  # the one rank's slice is the whole stream
            self.local_cos, self.local_sin = self.cos, self.sin
        self.seq_lens_host = next(optional) if buffers.seq_lens_host is not None else None


class _Generation:
    """Counts the rewrites of some buffers: the `owner` of the StepCache entries they hold."""

    __slots__ = ("generation",)

    def __init__(self) -> None:
        self.generation = 0


class _DraftBuffers:
    """The persistent buffers of one builder for one draft index, allocated at the builder's
    maximum sizes; every step hands out views of them. The write counters let a StepCache drop
    a value whose buffers were rewritten since it was stored."""

    def __init__(self, model: ModelConfig, max_num_reqs: int, max_num_tokens: int, device: torch.device,
                 dspark_width: int | None, draft_index: int, invariant_name: str, sas_names: dict[bool, str] | None):
        namespace = (DRAFT_NAMESPACE, draft_index)
        self.invariant_key = (namespace, invariant_name)
        # Per step kind (causal or not): the key of this group's sas_metadata, None without one.
        self.sas_keys = {causal: (namespace, name) for causal, name in sas_names.items()} if sas_names else None
        max_pad = cp_token_split(max_num_tokens, model.cp_size, model.cp_rank)
        int32 = dict(dtype=torch.int32, device=device)
        self.positions = torch.zeros(max_pad.num_tokens_pad, dtype=torch.int64, device=device)
        cache = model.rope_cos_sin_cache
        self.cos_sin = torch.zeros((max_pad.num_tokens_pad, cache.size(1)), dtype=cache.dtype, device=device)
        half = cache.size(1) // 2
        # Column views made once: a step's cos / sin are then one row slice each.
        self.cos_columns = self.cos_sin[:, :half]
        self.sin_columns = self.cos_sin[:, half:]
        self.local_query_start_loc = torch.zeros(max_num_reqs + 1, **int32)
        self.local_seq_lens = torch.zeros(max_num_reqs, **int32)
        self.start_pos = torch.zeros(max_num_reqs, **int32)
        self.seq_lens_host = None
        if device.type != "cpu":
            # Device seq_lens without a host copy are read back once per step into this buffer.
            self.seq_lens_host = torch.zeros(max_num_reqs, dtype=torch.int32, pin_memory=device.type in ("cuda", "npu"))
        self.sas = torch.zeros(NUM_WORDS, **int32) if sas_names else None
        self.slot_mapping = torch.zeros((max_num_tokens, 2), dtype=torch.int64, device=device)
        self.dspark_indices = self.dspark_lens = None
        if dspark_width is not None:
            self.dspark_indices = torch.zeros((max_pad.tokens_per_rank, 1, dspark_width), **int32)
            self.dspark_lens = torch.zeros(max_pad.tokens_per_rank, **int32)
        self.invariant_views: dict[tuple[int, int, int], _InvariantViews] = {}
        self.invariant_writes = _Generation()
        self.sas_writes = _Generation()


class DraftMetadataBuilder:
    """Builds one KV-cache group's DraftAttnMetadata for each draft step.

    max_num_reqs / max_num_tokens bound num_reqs and num_input_tokens of every step. device:
    where the buffers live (default torch.get_default_device()); the inputs and the RoPE cache
    must be there too (the host copies on the CPU).

    Not thread-safe: a builder owns persistent buffers that every build rewrites, so two threads
    building with one builder (or sharing one StepCache) corrupt each other's results. A runner
    has one set of builders per thread that drafts.
    """

    def __init__(self, model: ModelConfig, group: GroupConfig, max_num_reqs: int, max_num_tokens: int,
                 device: torch.device | str | None = None):
        if not isinstance(model, ModelConfig):
            raise ValueError(f"model must be a ModelConfig, got {type(model).__name__}")
        if not isinstance(group, GroupConfig):
            raise ValueError(f"group must be a GroupConfig, got {type(group).__name__}")
        check_positive(max_num_reqs, "max_num_reqs")
        check_positive(max_num_tokens, "max_num_tokens")
        self.model = model
        self.group = group
        self.max_num_reqs = max_num_reqs
        self.max_num_tokens = max_num_tokens
        self.device = torch.device(device) if device is not None else torch.get_default_device()
        if model.rope_cos_sin_cache.device != self.device:
            raise ValueError(f"rope_cos_sin_cache must be on the builder's device {self.device}, "
                             f"got {model.rope_cos_sin_cache.device}")
        self.window = group.window
        self._rope_cache = model.rope_cos_sin_cache
        num_speculative_tokens = model.num_speculative_tokens
        # The window of each kind of step (GroupConfig.step_window): a DSpark group's non-causal
        # step sees its whole draft block past the sliding window.
        self._windows = {causal: group.step_window(causal, num_speculative_tokens) for causal in (True, False)}
        self.dspark_width = None
        if group.dspark:
            least = group.sliding_window + num_speculative_tokens
            if group.dspark_index_width is None:
                self.dspark_width = default_width(group.sliding_window, num_speculative_tokens)
            elif group.dspark_index_width < least:
                raise ValueError(
                    f"dspark_index_width of group {group.name!r} must be >= sliding_window + num_speculative_tokens "
                    f"= {least}, got {group.dspark_index_width}")
            else:
                self.dspark_width = group.dspark_index_width
        self._buffers: dict[int, _DraftBuffers] = {}
        self._plans: dict[tuple, _StepPlan] = {}  # the steps this builder is the first group of
        self._decode_threshold = 1 + num_speculative_tokens
        # Builders of models with these values (and the same RoPE cache tensor) share entries.
        # Names are strings: their hash is computed once, and they read well in the debug log.
        model_key = (f"rope={id(model.rope_cos_sin_cache):#x} k={num_speculative_tokens} "
                     f"cp={model.cp_rank}/{model.cp_size} device={self.device}")
        self._invariant_name = f"group_invariant[{model_key}]"
        # A group with a sliding window gets the sas_metadata vllm-ascend's draft builders pass to
        # the sparse attention kernel, per kind of step (causal or not); full attention gets None.
        # Groups with the same arguments share one result: the name holds every argument that is
        # not a group-invariant input.
        self._sas_args = self._sas_names = None
        if group.sliding_window is not None:
            self._sas_args = {
                causal: (model.num_heads_q, model.head_dim, *window, model.num_cube_cores, model.num_vector_cores,
                         ASCEND950 in model.soc_version)
                for causal, window in self._windows.items()
            }
            self._sas_names = {
                causal: (f"sas_metadata[{model_key} heads={model.num_heads_q} head_dim={model.head_dim} "
                         f"window={window} cores={model.num_cube_cores}/{model.num_vector_cores} "
                         f"soc={model.soc_version}]")
                for causal, window in self._windows.items()
            }

    def buffers(self, draft_index: int) -> _DraftBuffers:
        """The persistent buffers of draft_index, allocated on its first use."""
        buffers = self._buffers.get(draft_index)
        if buffers is None:
            num_speculative_tokens = self.model.num_speculative_tokens
            if not (isinstance(draft_index, int) and 1 <= draft_index <= num_speculative_tokens):
                raise ValueError(
                    f"draft_index must be in [1, num_speculative_tokens = {num_speculative_tokens}], got {draft_index}")
            buffers = _DraftBuffers(self.model, self.max_num_reqs, self.max_num_tokens, self.device, self.dspark_width,
                                    draft_index, self._invariant_name, self._sas_names)
            self._buffers[draft_index] = buffers
        return buffers

    def _forget_shapes(self) -> None:
        """Drops every view made for a batch shape by the steps this builder is the first group
        of (which hold all of a step's per-shape state), as if no shape had been seen: the next
        such step at any shape makes them again. The benchmark's first builds use it."""
        for plan in self._plans.values():
            plan.forget_shapes()
        for buffers in self._buffers.values():
            buffers.invariant_views.clear()

    def _invariant_views(self, buffers: _DraftBuffers, common: CommonDraftInputs) -> _InvariantViews:
        key = (common.num_reqs, common.num_actual_tokens, common.num_input_tokens)
        views = buffers.invariant_views.get(key)
        if views is None:
            num_reqs, num_tokens, num_input_tokens = key
            if not 0 <= num_reqs <= self.max_num_reqs:
                raise ValueError(f"num_reqs must be in [0, max_num_reqs = {self.max_num_reqs}], got {num_reqs}")
            if not 0 <= num_input_tokens <= self.max_num_tokens:
                raise ValueError(f"num_input_tokens must be in [0, max_num_tokens = {self.max_num_tokens}], "
                                 f"got {num_input_tokens}")
            if not 0 <= num_tokens <= num_input_tokens:
                raise ValueError(
                    f"num_actual_tokens must be in [0, num_input_tokens = {num_input_tokens}], got {num_tokens}")
            if len(buffers.invariant_views) >= _MAX_CACHED_SHAPES:
                buffers.invariant_views.clear()
            views = _InvariantViews(buffers, num_reqs, num_tokens, num_input_tokens, self.model.cp_size,
                                    self.model.cp_rank)
            buffers.invariant_views[key] = views
        return views

    def _fingerprint(self, common: CommonDraftInputs) -> tuple:
        """Identity, _version and shape of every input tensor of the group-invariant results,
        and the sizes. The RoPE cache's identity is part of the entry names."""
        q, qc, s, sc, p = (common.query_start_loc, common.query_start_loc_cpu, common.seq_lens,
                           common.seq_lens_cpu, common.positions)
        fingerprint = (
            id(q), q._version, q.shape, id(qc), qc._version, qc.shape, id(s), s._version, s.shape,
            id(p), p._version, p.shape, self._rope_cache._version,
            common.num_reqs, common.num_actual_tokens, common.num_input_tokens, common.causal,
        )
        if sc is not None:
            fingerprint += (id(sc), sc._version, sc.shape)
        return fingerprint

    def _invariant(self, common: CommonDraftInputs, buffers: _DraftBuffers, shared: StepCache | None,
                   fingerprint: tuple | None, dspark_widths: _DSparkWidths | None) -> _Invariant:
        """The group-invariant results: from `shared` when it holds them for these inputs, else
        computed into this builder's buffers (and stored there). The row widths of the step's
        DSpark groups are checked against the batch before anything is written."""
        if shared is not None:
            invariant = shared.get(buffers.invariant_key, fingerprint)
            if invariant is not None:
                if dspark_widths is not None:
                    dspark_widths.check(invariant)
                return invariant
        views = self._invariant_views(buffers, common)
        invariant = self._compute_invariant(common, buffers, views, dspark_widths)
        if shared is not None:
            shared.put(buffers.invariant_key, fingerprint, invariant, keep_alive=_inputs(common),
                       owner=buffers.invariant_writes)
        return invariant

    def _compute_invariant(self, common: CommonDraftInputs, buffers: _DraftBuffers, views: _InvariantViews,
                           dspark_widths: _DSparkWidths | None) -> _Invariant:
        num_reqs, num_tokens = common.num_reqs, common.num_actual_tokens
        model = self.model
        _check_step_sizes(common)
        query_start_loc_cpu = _first(common.query_start_loc_cpu, num_reqs + 1)

        # The split comes from the host copy: no device read.
        if query_start_loc_cpu.device.type != "cpu":
            raise ValueError(f"query_start_loc_cpu must be on the host, got {query_start_loc_cpu.device}")
        starts = query_start_loc_cpu.numpy()
        # A host value, free to read: the token count the step claims must be the batch's.
        if int(starts[-1]) != num_tokens:
            raise ValueError(f"num_actual_tokens must equal query_start_loc_cpu[num_reqs = {num_reqs}] = "
                             f"{int(starts[-1])}, got {num_tokens}")
        query_lens = starts[1:] - starts[:-1]
        is_decode = query_lens <= self._decode_threshold
        num_decodes = int(np.count_nonzero(is_decode))
        total = int(starts[-1] - starts[0]) if num_reqs else 0
        num_decode_tokens = total if num_decodes == num_reqs else int(query_lens[is_decode].sum())

        # Counted before the first write: an entry pointing at these buffers is dead from here
        # on, even if a check below rejects the inputs halfway.
        buffers.invariant_writes.generation += 1
        query_start_loc, seq_lens = _first(common.query_start_loc, num_reqs + 1), _first(common.seq_lens, num_reqs)
        seq_lens_cpu = common.seq_lens_cpu
        if seq_lens_cpu is not None:
            seq_lens_cpu = _first(seq_lens_cpu, num_reqs)
        elif seq_lens.device.type == "cpu":
            seq_lens_cpu = seq_lens
        else:
            seq_lens_cpu = views.seq_lens_host
            seq_lens_cpu.copy_(seq_lens)  # the step's one device-to-host sync
        invariant = _Invariant(query_lens, num_decodes == num_reqs, seq_lens_cpu, query_start_loc, seq_lens)
        # Before the first write. When every request is a decode, one comparison says every row fits.
        if dspark_widths is not None and (num_decodes < num_reqs or self._decode_threshold > dspark_widths.room):
            dspark_widths.check(invariant)

        views.positions_real.copy_(_first(common.positions, num_tokens))
        if views.positions_tail is not None:
            views.positions_tail.zero_()
        try:
            torch.index_select(model.rope_cos_sin_cache, 0, views.positions_padded, out=views.cos_sin_padded)
        except IndexError as error:
            # On the host the gather checks every index (on a device it cannot: see docs/drafting.md).
            raise ValueError(f"positions must be in [0, rope_cos_sin_cache.size(0) = "
                             f"{model.rope_cos_sin_cache.size(0)}): {error}") from None

        # Whole buffers, so the padded requests past R are rewritten too; the metadata gets views.
        full = cp_local_metadata(
            query_start_loc, seq_lens, common.num_input_tokens, model.cp_size, model.cp_rank, causal=common.causal,
            local_query_start_loc=buffers.local_query_start_loc, local_seq_lens=buffers.local_seq_lens,
            start_pos=buffers.start_pos, query_start_loc_cpu=query_start_loc_cpu, seq_lens_cpu=seq_lens_cpu,
        )
        split = views.split
        cp = CPLocalMetadata(views.local_query_start_loc, views.local_seq_lens, views.start_pos, split.num_tokens_pad,
                             split.tokens_per_rank, split.local_start, split.local_end, full.max_local_query_len,
                             full.max_local_seq_len)
        invariant.fields = (num_decodes, num_reqs - num_decodes, num_decode_tokens, total - num_decode_tokens,
                            views.input_positions, views.cos, views.sin, cp, views.local_cos, views.local_sin,
                            cp.start_pos, seq_lens_cpu)
        return invariant

    def _check_dspark_width(self, invariant: _Invariant) -> None:
        """A request whose DSpark row would not fit: a ValueError naming the request, its query
        length, the window and the width to set."""
        group, width = self.group, self.dspark_width
        window = group.sliding_window
        query_lens = invariant.query_lens.astype(np.int64)
        seq_lens = invariant.seq_lens_cpu.numpy().astype(np.int64)
        visible = np.where(query_lens > 0, np.minimum(seq_lens, query_lens + window), 0)
        too_wide = np.flatnonzero(visible > width)
        if too_wide.size:
            request = int(too_wide[0])
            needed = int(visible.max())
            raise ValueError(
                f"request {request} of DSpark group {group.name!r} (query length {int(query_lens[request])}, "
                f"sliding window {window}) sees {int(visible[request])} tokens, more than its index width {width}; "
                f"set GroupConfig.dspark_index_width >= {needed} (rounded up to a multiple of {WIDTH_ALIGNMENT}: "
                f"{default_width(needed, 0)})")

    def _sas(self, common: CommonDraftInputs, invariant: _Invariant, buffers: _DraftBuffers,
             shared: StepCache | None, fingerprint: tuple | None) -> torch.Tensor:
        """This group's sas_metadata for the step's kind: from `shared` when a group with the same
        arguments stored it, else computed into this builder's buffer."""
        causal = common.causal
        if shared is not None:
            key = buffers.sas_keys[causal]
            sas = shared.get(key, fingerprint)
            if sas is not None:
                return sas
        buffers.sas_writes.generation += 1
        _call_sas(_SAS_METADATA_OP.select(), invariant.fields[_CP_FIELD], self._sas_args[causal], buffers.sas)
        if shared is not None:
            shared.put(key, fingerprint, buffers.sas, keep_alive=_inputs(common), owner=buffers.sas_writes)
        return buffers.sas

    def build_for_drafting(self, common: CommonDraftInputs, draft_index: int,
                           shared: StepCache | None = None) -> DraftAttnMetadata:
        """This group's metadata for draft step draft_index (in [1, num_speculative_tokens]).
        With `shared`, group-invariant results stored there for the same inputs are reused (the
        same tensors, not copies) and the ones computed here are stored; without it everything
        is computed here."""
        fingerprints = {} if shared is None else {id(self._rope_cache): self._fingerprint(common)}
        return _build_step((self,), common, draft_index, shared, fingerprints)[0]


# Where CPLocalMetadata sits among DraftAttnMetadata's fields (and _Invariant.fields).
_CP_FIELD = 7


class _DSparkCall:
    """One dspark_swa_indices_multi call of a step: the DSpark groups that share a CP split and
    a draft length (all of them when the builders share one model)."""

    __slots__ = ("members", "names", "windows", "num_speculative_tokens", "block_sizes", "widths", "cp_size",
                 "cp_rank", "invariant_slot")

    def __init__(self, builders: Sequence[DraftMetadataBuilder], members: list[int], invariant_slot: int):
        self.members = members
        self.invariant_slot = invariant_slot  # the group-invariant entry whose batch views it reads
        groups = [builders[i].group for i in members]
        model = builders[members[0]].model
        self.names = [g.name for g in groups]
        self.windows = [g.sliding_window for g in groups]
        self.block_sizes = [g.block_size for g in groups]
        self.widths = [builders[i].dspark_width for i in members]
        self.num_speculative_tokens = model.num_speculative_tokens
        self.cp_size, self.cp_rank = model.cp_size, model.cp_rank


class _DSparkWidths:
    """The DSpark groups of a step that share one group-invariant entry, for the check that each
    request's row fits: one comparison when no request can see more than the narrowest room."""

    __slots__ = ("builders", "room", "decode_threshold")

    def __init__(self, builders: list[DraftMetadataBuilder]):
        self.builders = builders
        # The longest query every group's row holds: width - window.
        self.room = min(b.dspark_width - b.group.sliding_window for b in builders)
        self.decode_threshold = builders[0]._decode_threshold  # one model: one num_speculative_tokens

    def check(self, invariant: _Invariant) -> None:
        if (self.decode_threshold if invariant.all_decodes else invariant.max_query_len) > self.room:
            # Some request may see more than a width: look at each.
            for builder in self.builders:
                builder._check_dspark_width(invariant)


class _StepPlan:
    """What a step over a given list of builders, draft index and kind of step (causal or not)
    does, worked out once: which builder resolves each distinct group-invariant entry and each
    distinct sas_metadata entry (the others share it), the groups' static op arguments, and,
    per num_input_tokens, the output views. Only views are made per shape; a repeat finds them."""

    __slots__ = ("builders", "buffers", "names", "storage_block_sizes", "invariant_firsts", "invariant_later",
                 "invariant_of", "sas_firsts", "sas_later", "sas_of", "sas_calls", "sas_outputs", "windows", "dspark_calls",
                 "dspark_checks", "causal", "slot_buffers", "max_num_tokens", "row_slots", "by_tokens")

    def __init__(self, builders: Sequence[DraftMetadataBuilder], draft_index: int, causal: bool):
        self.builders = tuple(builders)
        self.causal = causal
        self.buffers = [builder.buffers(draft_index) for builder in builders]
        self.names = [builder.group.name for builder in builders]
        self.storage_block_sizes = [builder.group.storage_block_size for builder in builders]
        self.windows = [builder._windows[causal] for builder in builders]
        self.invariant_firsts, self.invariant_later, self.invariant_of = self._first_of_each(
            [buffers.invariant_key for buffers in self.buffers])
        # Groups without a sliding window have no sas_metadata (slot None).
        with_sas = [index for index, buffers in enumerate(self.buffers) if buffers.sas_keys]
        firsts, self.sas_later, slots = self._first_of_each([self.buffers[index].sas_keys[causal] for index in with_sas])
        self.sas_firsts = [with_sas[first] for first in firsts]
        self.sas_of = [None] * len(builders)
        for index, slot in zip(with_sas, slots):
            self.sas_of[index] = slot
        # Per distinct sas_metadata: its invariant slot, the write counter, the op's arguments that
        # stay fixed (_call_sas) and the output buffer.
        self.sas_calls = [(self.invariant_of[index], self.buffers[index].sas_writes, builders[index]._sas_args[causal],
                           self.buffers[index].sas)
                          for index in self.sas_firsts]
        self.sas_outputs = [self.buffers[index].sas for index in self.sas_firsts]
        dspark = [] if causal else [i for i, b in enumerate(builders) if b.dspark_width is not None]
        calls: dict[tuple[int, int, int], list[int]] = {}
        for i in dspark:
            model = builders[i].model
            calls.setdefault((model.cp_size, model.cp_rank, model.num_speculative_tokens), []).append(i)
        self.dspark_calls = [_DSparkCall(builders, members, self.invariant_of[members[0]]) for members in calls.values()]
        # The DSpark groups whose widths each invariant entry's batch is checked against.
        self.dspark_checks = []
        for slot in range(len(self.invariant_firsts)):
            members = [builders[i] for i in dspark if self.invariant_of[i] == slot]
            self.dspark_checks.append(_DSparkWidths(members) if members else None)
        self.slot_buffers = [buffers.slot_mapping for buffers in self.buffers]
        self.max_num_tokens = min(builder.max_num_tokens for builder in builders)
        # What a metadata row takes from the plan: window, invariant slot, sas slot.
        self.row_slots = list(zip(self.windows, self.invariant_of, self.sas_of))
        self.by_tokens: dict[int, tuple] = {}

    @staticmethod
    def _first_of_each(keys: list) -> tuple[list[int], list[int], list[int]]:
        """For keys of the builders in order: the first builder of each distinct key, how many
        later builders share it, and each builder's slot among the distinct keys."""
        slots: dict = {}
        firsts, later, slot_of = [], [], []
        for index, key in enumerate(keys):
            slot = slots.get(key)
            if slot is None:
                slot = slots[key] = len(firsts)
                firsts.append(index)
                later.append(0)
            else:
                later[slot] += 1
            slot_of.append(slot)
        return firsts, later, slot_of

    def outputs(self, num_input_tokens: int) -> tuple:
        """For num_input_tokens: the slot mapping views (the format's outputs), each DSpark call's
        arguments (its outputs included; the step's tensors left None), and per builder the rest of
        its metadata row (slot mapping, DSpark indices and lens or None, window, its invariant and
        sas slots). Made in one row_views call on the first step at that size, checked against
        the builders' maximum then."""
        outputs = self.by_tokens.get(num_input_tokens)
        if outputs is None:
            outputs = self._make_outputs(num_input_tokens)
            if len(self.by_tokens) >= _MAX_CACHED_SHAPES:
                self.by_tokens.clear()
            self.by_tokens[num_input_tokens] = outputs
        return outputs

    def _make_outputs(self, num_input_tokens: int) -> tuple:
        if not 0 <= num_input_tokens <= self.max_num_tokens:
            raise ValueError(f"num_input_tokens must be in [0, max_num_tokens = {self.max_num_tokens}], "
                             f"got {num_input_tokens}")
        num_groups = len(self.builders)
        # The slot mappings of every group, then the indices and lens of each DSpark call's groups
        # (its rows are this rank's slice of the padded stream).
        tensors, bounds = list(self.slot_buffers), [0, num_input_tokens] * num_groups
        for call in self.dspark_calls:
            rows = -(-num_input_tokens // call.cp_size)
            for index in call.members:
                tensors += (self.buffers[index].dspark_indices, self.buffers[index].dspark_lens)
                bounds += (0, rows, 0, rows)
        views = _row_views(tensors, bounds)
        slot_views = views[:num_groups]
        dspark: list[tuple] = [(None, None)] * num_groups
        per_call = []
        position = num_groups
        for call in self.dspark_calls:
            indices, lens = [], []
            for index in call.members:
                dspark[index] = (views[position], views[position + 1])
                indices.append(views[position])
                lens.append(views[position + 1])
                position += 2
            # The call's arguments but the step's tensors (block tables, query_start_loc, seq_lens).
            per_call.append([None, None, None, call.windows, call.num_speculative_tokens, call.block_sizes,
                             num_input_tokens, call.widths, call.cp_size, call.cp_rank, indices, lens])
        rows = [(slot, *dspark[index], *self.row_slots[index]) for index, slot in enumerate(slot_views)]
        return slot_views, per_call, rows

    def forget_shapes(self) -> None:
        """Drops what was made per batch shape: the output views and the group-invariant views."""
        self.by_tokens.clear()
        for index in self.invariant_firsts:
            self.buffers[index].invariant_views.clear()


def _row_views(tensors: list[torch.Tensor], bounds: list[int]) -> list[torch.Tensor]:
    """tensors[i][bounds[2i]:bounds[2i + 1]] for every i: one native call (views that cost a
    fraction of Python's slicing, csrc/row_views.h) when the extension is loaded."""
    if _NATIVE_ROW_VIEWS is not None:
        return _NATIVE_ROW_VIEWS(tensors, bounds)
    return [t[bounds[2 * i]:bounds[2 * i + 1]] for i, t in enumerate(tensors)]


def _plan(builders: Sequence[DraftMetadataBuilder], draft_index: int, causal: bool) -> _StepPlan:
    """The plan of a step over these builders, kept by the first builder (a runner calls the
    same list of builders every step)."""
    first = builders[0]
    key = (tuple(builders), draft_index, causal)
    plan = first._plans.get(key)
    if plan is None:
        plan = _StepPlan(builders, draft_index, causal)
        if len(first._plans) >= _MAX_CACHED_SHAPES:
            first._plans.clear()
        first._plans[key] = plan
    return plan


def _served(shared: StepCache | None, key: tuple[Hashable, Hashable], times: int) -> None:
    """Counts `times` hits of key in `shared`: the later groups of a step that share the value
    the step just looked up or computed (nothing runs between the groups of a step, so a lookup
    would find that same entry). None: the step's own cache, which nobody reads after the step,
    so it keeps no entries and no counts; the debug lines are written all the same."""
    if shared is not None:
        shared.hits += times
    if logger.isEnabledFor(logging.DEBUG):
        for _ in range(times):
            logger.debug("StepCache hit: %s", key)


def _build_step(builders: Sequence[DraftMetadataBuilder], common: CommonDraftInputs, draft_index: int,
                shared: StepCache | None, fingerprints: dict[int, tuple | None]) -> list[DraftAttnMetadata]:
    """The metadata of every builder for one step sharing `common`: each distinct group-invariant
    entry and sas_metadata looked up in `shared` or computed by the first builder that needs it
    (the others share it; shared None: a cache that only lives for this step, so nothing to look
    up or store), then one format_slot_mapping_blocks_multi call for every group's slot mapping
    and, on a non-causal step, one dspark_swa_indices_multi call for every DSpark group.
    fingerprints: the inputs' fingerprint per RoPE cache tensor id (unused without `shared`)."""
    if not builders:
        return []
    plan = _plan(builders, draft_index, common.causal)
    slot_outputs, dspark_call_args, rows = plan.outputs(common.num_input_tokens)
    # The groups' own inputs before anything is written: a missing one is a clear error.
    try:
        slot_mappings = [common.slot_mappings[name] for name in plan.names]
        dspark_tables = [[common.block_tables[name] for name in call.names] for call in plan.dspark_calls]
    except KeyError as missing:
        field = "slot_mappings" if missing.args[0] not in common.slot_mappings else "block_tables"
        _group_input(getattr(common, field), missing.args[0], field)
        raise
    for name, slot_mapping in zip(plan.names, slot_mappings):
        if isinstance(slot_mapping, torch.Tensor) and slot_mapping.size(0) < common.num_actual_tokens:
            raise ValueError(f"slot_mappings[{name!r}] must have at least num_actual_tokens = "
                             f"{common.num_actual_tokens} entries, got {slot_mapping.size(0)}")

    # Hits are counted in a runner's cache and written to the debug log, if anyone looks.
    counted = shared is not None or logger.isEnabledFor(logging.DEBUG)
    invariants = []
    for slot, index in enumerate(plan.invariant_firsts):
        builder = builders[index]
        invariant = builder._invariant(common, plan.buffers[index], shared, fingerprints.get(id(builder._rope_cache)),
                                       plan.dspark_checks[slot])
        if counted and plan.invariant_later[slot]:
            _served(shared, plan.buffers[index].invariant_key, plan.invariant_later[slot])
        invariants.append(invariant)
    if shared is None:  # each computed here, as _sas does without a cache
        _run_sas(plan.sas_calls, invariants)
        sas = plan.sas_outputs
    else:
        sas = []
        for index in plan.sas_firsts:
            builder = builders[index]
            sas.append(builder._sas(common, invariants[plan.invariant_of[index]], plan.buffers[index], shared,
                                    fingerprints.get(id(builder._rope_cache))))
    if counted:
        for slot, later in enumerate(plan.sas_later):
            if later:
                _served(shared, plan.buffers[plan.sas_firsts[slot]].sas_keys[plan.causal], later)

    _run_format(slot_mappings, plan.storage_block_sizes, common.num_actual_tokens, slot_outputs)
    if dspark_tables:
        _run_dspark(plan.dspark_calls, dspark_call_args, dspark_tables, invariants)

    return [DraftAttnMetadata(*invariants[invariant_slot].fields, None if sas_slot is None else sas[sas_slot],
                              slot_mapping, indices, lens, window)
            for slot_mapping, indices, lens, window, invariant_slot, sas_slot in rows]


# The groups' own launches, each with the assembly of its arguments from the step's data. The ops
# are called through their dispatch objects: their wrappers only convert lists and allocate
# absent outputs.

def _run_format(slot_mappings: list[torch.Tensor], block_sizes: list[int], num_slots: int,
                outputs: list[torch.Tensor]) -> None:
    """Every group's slot mapping, formatted in one launch."""
    _FORMAT_SLOT_MAPPING_BLOCKS_MULTI_OP.select()(slot_mappings, block_sizes, num_slots, outputs)


def _run_sas(sas_calls: list[tuple], invariants: list[_Invariant]) -> None:
    """Each distinct sas_metadata of the step (_StepPlan.sas_calls), into its buffer."""
    sas_op = _SAS_METADATA_OP.select()
    for invariant_slot, writes, arguments, out in sas_calls:
        writes.generation += 1  # before the write: an entry holding this buffer is dead from here on
        _call_sas(sas_op, invariants[invariant_slot].fields[_CP_FIELD], arguments, out)


def _call_sas(sas_op, cp: CPLocalMetadata, arguments: tuple, out: torch.Tensor) -> None:
    """sas_metadata with the arguments vllm-ascend's DSA draft builders pass: the CP-local query
    starts and KV lengths (TND queries, paged KV), one KV head, no compressed KV, the band mask
    of the step's window. arguments: the fixed part of _StepPlan.sas_calls."""
    num_heads_q, head_dim, left, right, num_cube_cores, num_vector_cores, ascend950 = arguments
    num_reqs = cp.local_seq_lens.numel()
    # Without requests seqused_kv is empty, which the kernel reads as not provided and PA_ND
    # refuses; under the TND KV layout the same empty batch gets its schedule (core 0 over none).
    layout_kv = _LAYOUT_KV_PAGED if num_reqs else _LAYOUT_KV_TND
    # The op itself, as for the format and DSpark ops: the wrapper only maps the strings and
    # allocates an absent out.
    sas_op(num_heads_q, 1, head_dim, cp.local_query_start_loc, None, None, None, cp.local_seq_lens, num_reqs,
           cp.max_local_query_len, cp.max_local_seq_len, 0, 0, 1, 4, 3, left, right, _LAYOUT_Q_TND, layout_kv, True,
           False, num_cube_cores, num_vector_cores, ascend950, out)


def _run_dspark(calls: list[_DSparkCall], templates: list[list], tables: list[list[torch.Tensor]],
                invariants: list[_Invariant]) -> None:
    """Every DSpark group's indices: one launch per call (one per CP split and draft length),
    its arguments the plan's template with the step's block tables and batch filled in."""
    dspark_op = _DSPARK_SWA_INDICES_MULTI_OP.select()
    for call, template, call_tables in zip(calls, templates, tables):
        invariant = invariants[call.invariant_slot]
        arguments = template.copy()
        arguments[0], arguments[1], arguments[2] = call_tables, invariant.query_start_loc, invariant.seq_lens
        dspark_op(*arguments)


def _inputs(common: CommonDraftInputs) -> tuple:
    """The tensors a fingerprint names, kept alive with the entry so that their ids stay unique."""
    return (common.query_start_loc, common.query_start_loc_cpu, common.seq_lens, common.seq_lens_cpu,
            common.positions)


def _check_step_sizes(common: CommonDraftInputs) -> None:
    """The sizes a step claims against its tensors (shorter tensors once gave a phantom request,
    or zeroed the position of a real token)."""
    num_reqs, num_tokens = common.num_reqs, common.num_actual_tokens
    for name, tensor, count, what in (
            ("query_start_loc", common.query_start_loc, num_reqs + 1, "num_reqs + 1"),
            ("query_start_loc_cpu", common.query_start_loc_cpu, num_reqs + 1, "num_reqs + 1"),
            ("seq_lens", common.seq_lens, num_reqs, "num_reqs"),
            ("seq_lens_cpu", common.seq_lens_cpu, num_reqs, "num_reqs"),
            ("positions", common.positions, num_tokens, "num_actual_tokens")):
        if tensor is None and name == "seq_lens_cpu":
            continue
        if not isinstance(tensor, torch.Tensor) or tensor.dim() != 1:
            described = list(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise ValueError(f"{name} must be a 1-D tensor, got {described}")
        if tensor.size(0) < count:
            raise ValueError(f"{name} must have at least {what} = {count} entries, got {tensor.size(0)}")


def _first(t: torch.Tensor, count: int) -> torch.Tensor:
    """t[:count], without a new view when t already has exactly count entries."""
    return t if t.size(0) == count else t[:count]


def _group_input(tensors: Mapping[str, torch.Tensor], name: str, field: str) -> torch.Tensor:
    tensor = tensors.get(name)
    if tensor is None:
        raise ValueError(f"{field} must hold an entry for group {name!r}, got keys {sorted(tensors)}")
    return tensor


def build_draft_attn_metadata(
    builders: Sequence[DraftMetadataBuilder],
    common: CommonDraftInputs | Sequence[CommonDraftInputs],
    draft_index: int,
    *,
    cache: StepCache | None = None,
    dummy_run: bool = False,
) -> list[DraftAttnMetadata]:
    """Every builder's metadata for draft step draft_index, one per builder, in order.

    One StepCache serves the whole group loop: `cache` when the runner keeps one for the step,
    else a new one. The groups' own ops run once for all of them: one call formats every
    group's slot mapping, one builds every DSpark group's indices. dummy_run=True always takes a
    new cache, so dummy inputs never read or leave entries in the runner's; the groups still
    share within the dummy run, so its tensors sit at the addresses a real step's do. `common`
    as a sequence (one CommonDraftInputs per builder) is the path for per-group-updated inputs:
    every group then computes everything itself, exactly as without a cache.
    """
    if isinstance(common, CommonDraftInputs):
        if dummy_run or cache is None:
            # A cache of this step alone: it starts empty and nobody reads it afterwards, so the
            # groups share through the step itself, with no lookup, entry or fingerprint.
            return _build_step(builders, common, draft_index, None, {})
        # No runner code runs between the groups of this step, so the inputs cannot change in
        # it: their fingerprint is taken once (once per RoPE cache tensor, which it includes).
        fingerprints: dict[int, tuple | None] = {}
        for builder in builders:
            rope = id(builder._rope_cache)
            if rope not in fingerprints:
                fingerprints[rope] = builder._fingerprint(common)
        return _build_step(builders, common, draft_index, cache, fingerprints)
    if len(common) != len(builders):
        raise ValueError(
            f"common must be one CommonDraftInputs or one per builder ({len(builders)}), got {len(common)}")
    return [builder.build_for_drafting(inputs, draft_index, None) for builder, inputs in zip(builders, common)]
