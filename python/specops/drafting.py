"""The drafting layer (docs/drafting.md): every KV-cache group's attention metadata for one draft step.

Only two results depend on the group: its formatted slot mapping and, for DSpark groups, its
DSpark indices. Everything else (decode/prefill split, positions, RoPE cos/sin, CP local
metadata, start_pos, host seq_lens, sas_metadata) is group-invariant: the first group of a step
computes it, a `StepCache` holds it, and the other groups share the same tensors.

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
from typing import NamedTuple

import numpy as np
import torch

from specops._cp import cp_token_split
from specops.ops._checks import check_cp_rank, check_non_negative, check_positive
from specops.ops.cp_local_metadata import CPLocalMetadata, cp_local_metadata
from specops.ops.dspark_swa_indices import _OP as _DSPARK_SWA_INDICES
from specops.ops.dspark_swa_indices import default_width
from specops.ops.format_slot_mapping_blocks import _OP as _FORMAT_SLOT_MAPPING_BLOCKS
from specops.ops.sas_metadata import sas_metadata
from specops.sas_layout import MAX_CUBE_CORES, MAX_VECTOR_CORES, NUM_WORDS

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

DRAFT_NAMESPACE = "draft_for_drafting"
# Distinct (num_reqs, num_actual_tokens, num_input_tokens) shapes whose buffer views a builder
# keeps per draft index; a runner with graph padding sees a handful.
_MAX_CACHED_SHAPES = 256


@dataclasses.dataclass(frozen=True, eq=False)
class ModelConfig:
    """The draft model as the metadata sees it (shared by every group's builder).

    rope_cos_sin_cache: [max_position, rot_dim], cos in the first rot_dim / 2 columns and sin in
    the others. num_cube_cores / num_vector_cores: the sparse-attention kernel's cores
    (sas_metadata).
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
        if not self.num_cube_cores <= self.num_vector_cores <= MAX_VECTOR_CORES:
            raise ValueError(
                f"num_vector_cores must be in [num_cube_cores = {self.num_cube_cores}, {MAX_VECTOR_CORES}], "
                f"got {self.num_vector_cores}"
            )


@dataclasses.dataclass(frozen=True)
class GroupConfig:
    """One KV-cache group: the kernel block size of its block table, the block size its slot
    mapping is formatted with, and its sliding window (None: full attention)."""

    name: str
    block_size: int
    storage_block_size: int
    sliding_window: int | None
    dspark: bool = False

    def __post_init__(self) -> None:
        check_positive(self.block_size, "block_size")
        check_positive(self.storage_block_size, "storage_block_size")
        if self.sliding_window is not None:
            check_positive(self.sliding_window, "sliding_window")
        elif self.dspark:
            raise ValueError(f"sliding_window must be set for the DSpark group {self.name!r}, got None")

    @property
    def window(self) -> tuple[int, int]:
        """(left, right) as sas_metadata reads it: a token sees itself and the sliding_window - 1
        tokens before it; full attention is (-1, 0), causal and unbounded."""
        return (-1, 0) if self.sliding_window is None else (self.sliding_window - 1, 0)


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
    sas_metadata: torch.Tensor  # int32 [1024]
    slot_mapping: torch.Tensor  # [num_input_tokens, 2] int64: (storage block, offset); padding is PAD's pair
    dspark_swa_indices: torch.Tensor | None  # int32 [tokens_per_rank, 1, width] for DSpark groups
    dspark_swa_lens: torch.Tensor | None  # int32 [tokens_per_rank]
    window: tuple[int, int]  # (left, right); (-1, 0) for full attention


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


class _GroupInvariant(NamedTuple):
    """What every group of one (step, draft index) shares: DraftAttnMetadata's first fields, in
    its order, so a build unpacks them straight into the metadata."""

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


class _Views:
    """The views of one draft index's buffers for one (R, T, num_input_tokens), made once."""

    __slots__ = (
        "positions_real", "positions_tail", "positions_padded", "input_positions", "cos_sin_padded", "cos", "sin",
        "local_cos", "local_sin", "local_query_start_loc", "local_seq_lens", "start_pos", "seq_lens_host",
        "slot_mapping", "dspark_indices", "dspark_lens", "split",
    )

    def __init__(self, buffers: _DraftBuffers, num_reqs: int, num_tokens: int, num_input_tokens: int,
                 cp_size: int, cp_rank: int):
        split = cp_token_split(num_input_tokens, cp_size, cp_rank)
        self.split = split
        pad, half = split.num_tokens_pad, buffers.cos_sin.size(1) // 2
        self.positions_real = buffers.positions[:num_tokens]
        self.positions_tail = buffers.positions[num_tokens:pad] if pad > num_tokens else None
        self.positions_padded = buffers.positions[:pad]
        self.input_positions = buffers.positions[:num_input_tokens]
        self.cos_sin_padded = buffers.cos_sin[:pad]
        self.cos = buffers.cos_sin[:num_input_tokens, :half]
        self.sin = buffers.cos_sin[:num_input_tokens, half:]
        self.local_cos = buffers.cos_sin[split.local_start:split.local_end, :half]
        self.local_sin = buffers.cos_sin[split.local_start:split.local_end, half:]
        self.local_query_start_loc = buffers.local_query_start_loc[:num_reqs + 1]
        self.local_seq_lens = buffers.local_seq_lens[:num_reqs]
        self.start_pos = buffers.start_pos[:num_reqs]
        self.seq_lens_host = buffers.seq_lens_host[:num_reqs] if buffers.seq_lens_host is not None else None
        self.slot_mapping = buffers.slot_mapping[:num_input_tokens]
        if buffers.dspark_indices is not None:
            self.dspark_indices = buffers.dspark_indices[:split.tokens_per_rank]
            self.dspark_lens = buffers.dspark_lens[:split.tokens_per_rank]
        else:
            self.dspark_indices = self.dspark_lens = None


class _Generation:
    """Counts the rewrites of some buffers: the `owner` of the StepCache entries they hold."""

    __slots__ = ("generation",)

    def __init__(self) -> None:
        self.generation = 0


class _DraftBuffers:
    """The persistent buffers of one builder for one draft index. The write counters let a
    StepCache drop a value whose buffers were rewritten since it was stored."""

    def __init__(self, model: ModelConfig, max_num_reqs: int, max_num_tokens: int, device: torch.device,
                 dspark_width: int | None, draft_index: int, invariant_name: str, sas_name: str):
        namespace = (DRAFT_NAMESPACE, draft_index)
        self.invariant_key, self.sas_key = (namespace, invariant_name), (namespace, sas_name)
        max_pad = cp_token_split(max_num_tokens, model.cp_size, model.cp_rank)
        int32 = dict(dtype=torch.int32, device=device)
        self.positions = torch.zeros(max_pad.num_tokens_pad, dtype=torch.int64, device=device)
        cache = model.rope_cos_sin_cache
        self.cos_sin = torch.zeros((max_pad.num_tokens_pad, cache.size(1)), dtype=cache.dtype, device=device)
        self.local_query_start_loc = torch.zeros(max_num_reqs + 1, **int32)
        self.local_seq_lens = torch.zeros(max_num_reqs, **int32)
        self.start_pos = torch.zeros(max_num_reqs, **int32)
        self.seq_lens_host = None
        if device.type != "cpu":
            # Device seq_lens without a host copy are read back once per step into this buffer.
            self.seq_lens_host = torch.zeros(max_num_reqs, dtype=torch.int32, pin_memory=device.type in ("cuda", "npu"))
        self.sas = torch.zeros(NUM_WORDS, **int32)
        self.slot_mapping = torch.zeros((max_num_tokens, 2), dtype=torch.int64, device=device)
        self.dspark_indices = self.dspark_lens = None
        if dspark_width is not None:
            self.dspark_indices = torch.zeros((max_pad.tokens_per_rank, 1, dspark_width), **int32)
            self.dspark_lens = torch.zeros(max_pad.tokens_per_rank, **int32)
        self.views: dict[tuple[int, int, int], _Views] = {}
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
        # Wide enough for every request the split counts as a decode (1 + num_speculative_tokens).
        self.dspark_width = (default_width(group.sliding_window, model.num_speculative_tokens + 1)
                             if group.dspark else None)
        # Positional arguments of the DSpark op (window, num_speculative_tokens, block_size) and
        # of the CP split, fixed for the builder's life.
        self._dspark_args = (group.sliding_window, model.num_speculative_tokens, group.block_size)
        self._cp_args = (model.cp_size, model.cp_rank)
        self._buffers: dict[int, _DraftBuffers] = {}
        self._decode_threshold = 1 + model.num_speculative_tokens
        # Builders of models with these values (and the same RoPE cache tensor) share entries.
        # Names are strings: their hash is computed once, and they read well in the debug log.
        model_key = (f"rope={id(model.rope_cos_sin_cache):#x} k={model.num_speculative_tokens} "
                     f"cp={model.cp_rank}/{model.cp_size} device={self.device}")
        self._invariant_name = f"group_invariant[{model_key}]"
        self._sas_name = (f"sas_metadata[{model_key} heads={model.num_heads_q}/{model.num_heads_kv} "
                          f"head_dim={model.head_dim} window={self.window} "
                          f"cores={model.num_cube_cores}/{model.num_vector_cores}]")

    def buffers(self, draft_index: int) -> _DraftBuffers:
        """The persistent buffers of draft_index, allocated on its first use."""
        buffers = self._buffers.get(draft_index)
        if buffers is None:
            buffers = _DraftBuffers(self.model, self.max_num_reqs, self.max_num_tokens, self.device, self.dspark_width,
                                    draft_index, self._invariant_name, self._sas_name)
            self._buffers[draft_index] = buffers
        return buffers

    def _views(self, buffers: _DraftBuffers, common: CommonDraftInputs) -> _Views:
        key = (common.num_reqs, common.num_actual_tokens, common.num_input_tokens)
        views = buffers.views.get(key)
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
            if len(buffers.views) >= _MAX_CACHED_SHAPES:
                buffers.views.clear()
            views = _Views(buffers, num_reqs, num_tokens, num_input_tokens, self.model.cp_size, self.model.cp_rank)
            buffers.views[key] = views
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

    def _compute_invariant(self, common: CommonDraftInputs, buffers: _DraftBuffers, views: _Views) -> _GroupInvariant:
        # Counted before the first write: an entry pointing at these buffers is dead from here
        # on, even if a check below rejects the inputs halfway.
        buffers.invariant_writes.generation += 1
        num_reqs, num_tokens = common.num_reqs, common.num_actual_tokens
        model = self.model
        _check_step_sizes(common)
        query_start_loc, seq_lens = _first(common.query_start_loc, num_reqs + 1), _first(common.seq_lens, num_reqs)
        query_start_loc_cpu = _first(common.query_start_loc_cpu, num_reqs + 1)

        # The split comes from the host copy: no device read.
        if query_start_loc_cpu.device.type != "cpu":
            raise ValueError(f"query_start_loc_cpu must be on the host, got {query_start_loc_cpu.device}")
        starts = query_start_loc_cpu.numpy()
        # A host value, free to read: the token count the step claims must be the batch's.
        if int(starts[-1]) != num_tokens:
            raise ValueError(f"num_actual_tokens must equal query_start_loc_cpu[num_reqs = {num_reqs}] = "
                             f"{int(starts[-1])}, got {num_tokens}")
        query_lens = np.diff(starts)
        is_decode = query_lens <= self._decode_threshold
        num_decodes = int(np.count_nonzero(is_decode))
        total = int(starts[-1] - starts[0]) if num_reqs else 0
        num_decode_tokens = total if num_decodes == num_reqs else int(query_lens[is_decode].sum())

        views.positions_real.copy_(_first(common.positions, num_tokens))
        if views.positions_tail is not None:
            views.positions_tail.zero_()
        try:
            torch.index_select(model.rope_cos_sin_cache, 0, views.positions_padded, out=views.cos_sin_padded)
        except IndexError as error:
            # On the host the gather checks every index (on a device it cannot: see docs/drafting.md).
            raise ValueError(f"positions must be in [0, rope_cos_sin_cache.size(0) = "
                             f"{model.rope_cos_sin_cache.size(0)}): {error}") from None

        seq_lens_cpu = common.seq_lens_cpu
        if seq_lens_cpu is not None:
            seq_lens_cpu = _first(seq_lens_cpu, num_reqs)
        elif seq_lens.device.type == "cpu":
            seq_lens_cpu = seq_lens
        else:
            seq_lens_cpu = views.seq_lens_host
            seq_lens_cpu.copy_(seq_lens)  # the step's one device-to-host sync

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
        return _GroupInvariant(num_decodes, num_reqs - num_decodes, num_decode_tokens, total - num_decode_tokens,
                               views.input_positions, views.cos, views.sin, cp, views.local_cos, views.local_sin,
                               cp.start_pos, seq_lens_cpu)

    def _compute_sas(self, invariant: _GroupInvariant, buffers: _DraftBuffers) -> torch.Tensor:
        model = self.model
        buffers.sas_writes.generation += 1
        sas_metadata(invariant.cp.local_query_start_loc, invariant.cp.local_seq_lens, num_heads_q=model.num_heads_q,
                     num_heads_kv=model.num_heads_kv, head_dim=model.head_dim, window_left=self.window[0],
                     window_right=self.window[1], num_cube_cores=model.num_cube_cores,
                     num_vector_cores=model.num_vector_cores, out=buffers.sas)
        return buffers.sas

    def build_for_drafting(self, common: CommonDraftInputs, draft_index: int,
                           shared: StepCache | None = None) -> DraftAttnMetadata:
        """This group's metadata for draft step draft_index. With `shared`, group-invariant
        results stored there for the same inputs are reused (the same tensors, not copies) and
        the ones computed here are stored; without it everything is computed here."""
        return self._build(common, draft_index, shared, None if shared is None else self._fingerprint(common))

    def _build(self, common: CommonDraftInputs, draft_index: int, shared: StepCache | None,
               fingerprint: tuple | None) -> DraftAttnMetadata:
        """build_for_drafting with the inputs' fingerprint taken by the caller (None without a cache)."""
        buffers = self._buffers.get(draft_index)
        if buffers is None:
            buffers = self.buffers(draft_index)
        views = buffers.views.get((common.num_reqs, common.num_actual_tokens, common.num_input_tokens))
        if views is None:
            views = self._views(buffers, common)
        if shared is None:
            invariant = self._compute_invariant(common, buffers, views)
            sas = self._compute_sas(invariant, buffers)
        else:
            # The hit path of every later group: keep it to two lookups.
            invariant_key, sas_key = buffers.invariant_key, buffers.sas_key
            invariant = shared.get(invariant_key, fingerprint)
            if invariant is None:
                invariant = self._compute_invariant(common, buffers, views)
                shared.put(invariant_key, fingerprint, invariant, keep_alive=_inputs(common),
                           owner=buffers.invariant_writes)
            sas = shared.get(sas_key, fingerprint)
            if sas is None:
                sas = self._compute_sas(invariant, buffers)
                shared.put(sas_key, fingerprint, sas, keep_alive=_inputs(common), owner=buffers.sas_writes)
        return self._finish(common, invariant, sas, views)

    def _finish(self, common: CommonDraftInputs, invariant: _GroupInvariant, sas: torch.Tensor,
                views: _Views) -> DraftAttnMetadata:
        """Adds the two per-group results."""
        group = self.group
        slot_mapping = common.slot_mappings.get(group.name)
        if slot_mapping is None or slot_mapping.size(0) != common.num_actual_tokens:
            slot_mapping = _group_input(common.slot_mappings, group.name, "slot_mappings")
            if slot_mapping.size(0) < common.num_actual_tokens:
                raise ValueError(f"slot_mappings[{group.name!r}] must have at least num_actual_tokens = "
                                 f"{common.num_actual_tokens} entries, got {slot_mapping.size(0)}")
            slot_mapping = slot_mapping[:common.num_actual_tokens]
        # The op itself (its wrapper only adds the allocation of an absent `out`).
        _FORMAT_SLOT_MAPPING_BLOCKS(slot_mapping, group.storage_block_size, views.slot_mapping)
        if group.dspark:
            num_reqs = common.num_reqs
            _DSPARK_SWA_INDICES(
                _group_input(common.block_tables, group.name, "block_tables"),
                _first(common.query_start_loc, num_reqs + 1), _first(common.seq_lens, num_reqs), *self._dspark_args,
                common.num_input_tokens, self.dspark_width, *self._cp_args, views.dspark_indices, views.dspark_lens,
            )
        return DraftAttnMetadata(*invariant, sas, views.slot_mapping, views.dspark_indices, views.dspark_lens,
                                 self.window)


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
    else a new one. dummy_run=True always takes a new cache, so dummy inputs never read or
    leave entries in the runner's; the groups still share within the dummy run, so its
    tensors sit at the addresses a real step's do. `common` as a sequence (one
    CommonDraftInputs per builder) is the path for per-group-updated inputs: every group then
    computes everything itself, exactly as without a cache.
    """
    if isinstance(common, CommonDraftInputs):
        shared = StepCache() if dummy_run or cache is None else cache
        # No runner code runs between the groups of this loop, so the inputs cannot change in
        # it: their fingerprint is taken once (once per RoPE cache tensor, which it includes).
        metas = []
        rope_cache = fingerprint = None
        for builder in builders:
            if builder._rope_cache is not rope_cache:
                rope_cache, fingerprint = builder._rope_cache, builder._fingerprint(common)
            metas.append(builder._build(common, draft_index, shared, fingerprint))
        return metas
    if len(common) != len(builders):
        raise ValueError(
            f"common must be one CommonDraftInputs or one per builder ({len(builders)}), got {len(common)}")
    return [builder.build_for_drafting(inputs, draft_index, None) for builder, inputs in zip(builders, common)]
