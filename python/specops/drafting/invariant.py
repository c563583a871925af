"""The group-invariant results of one (step, draft index): what the first group of a step that
needs them computes into its builder's buffers (or finds in the runner's StepCache), and what
every other group of the step shares."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from specops._fastpath import version_counter as version
from specops.drafting.buffers import MAX_CACHED_SHAPES, DraftBuffers, InvariantViews
from specops.drafting.cache import StepCache
from specops.drafting.configs import CommonDraftInputs, SharedFields
from specops.drafting.loop_schedules import check_query_starts, local_lengths
from specops.arguments import checked_int
from specops.ops.cp_local_metadata import CPLocalMetadata, cp_local_metadata
from specops.ops.dspark_swa_indices import WIDTH_ALIGNMENT, default_width

if TYPE_CHECKING:
    from specops.drafting.setup import GroupSetup


class GroupInvariant:
    """What every group of one (step, draft index) shares: `shared`, DraftAttnMetadata's
    group-invariant fields (each group's metadata is built from them by name), and what the
    groups' own ops and checks read."""

    __slots__ = ("shared", "query_lens", "all_decodes", "_max_query_len", "seq_lens_cpu",
                 "query_start_loc", "seq_lens", "host_split", "_local_cpu")

    def __init__(self, query_lens: np.ndarray, all_decodes: bool, seq_lens_cpu: torch.Tensor,
                 query_start_loc: torch.Tensor, seq_lens: torch.Tensor):
        self.shared: SharedFields | None = None  # set once the results are written
        self.query_lens = query_lens  # host, per request
        self.all_decodes = all_decodes  # every query length is at most 1 + num_speculative_tokens
        self._max_query_len: int | None = None
        self.seq_lens_cpu = seq_lens_cpu
        self.query_start_loc = query_start_loc  # [R + 1] and [R] views of the runner's tensors
        self.seq_lens = seq_lens
        # (query starts [R + 1] as numpy, local_start, local_end, causal): what the host copies of
        # the CP-local lengths are computed from.
        self.host_split: tuple = ()
        self._local_cpu: tuple[torch.Tensor, torch.Tensor] | None = None

    def local_lengths_cpu(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The CP-local query starts [R + 1] and seq_lens [R], int32 on the host, from the host
        copies: what the host-planned schedule ops (sas, lightning indexer) take on every device,
        so that they read no device value (docs/sas_metadata.md). Computed on first use."""
        if self._local_cpu is None:
            starts, local_start, local_end, causal = self.host_split
            local_starts, local_seq = local_lengths(starts.astype(np.int64), self.seq_lens_cpu.numpy().astype(np.int64),
                                                    local_start, local_end, causal)
            self._local_cpu = (torch.from_numpy(local_starts.astype(np.int32)),
                               torch.from_numpy(local_seq.astype(np.int32)))
        return self._local_cpu

    @property
    def max_query_len(self) -> int:
        """Only DSpark steps read it: computed on first use."""
        if self._max_query_len is None:
            self._max_query_len = int(self.query_lens.max()) if self.query_lens.size else 0
        return self._max_query_len


class DSparkWidths:
    """The DSpark groups of a step that share one group-invariant entry, for the check that each
    request's row fits: one comparison when no request can see more than the narrowest room."""

    __slots__ = ("setups", "room", "decode_threshold")

    def __init__(self, setups: list[GroupSetup]):
        self.setups = setups
        # The longest query every group's row holds: width - window.
        self.room = min(setup.dspark_width - setup.group.sliding_window for setup in setups)
        # One model: one num_speculative_tokens.
        self.decode_threshold = 1 + setups[0].model.num_speculative_tokens

    def check(self, invariant: GroupInvariant) -> None:
        if (self.decode_threshold if invariant.all_decodes else invariant.max_query_len) > self.room:
            # Some request may see more than a width: look at each.
            for setup in self.setups:
                check_dspark_width(setup, invariant)


def check_dspark_width(setup: GroupSetup, invariant: GroupInvariant) -> None:
    """A request whose DSpark row would not fit: a ValueError naming the request, its query
    length, the window and the width to set."""
    group, width = setup.group, setup.dspark_width
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


def fingerprint(common: CommonDraftInputs, rope_cache: torch.Tensor) -> tuple | None:
    """Identity, version counter, data pointer and shape of every input tensor of the group-invariant
    results, and the sizes, for inputs already checked (check_step_inputs). The RoPE cache's
    identity is part of the entry names; its version and data pointer are here. None when an
    input is an inference tensor: it has no version counter, so no fingerprint could see a
    write to it (the step is then built without the cache)."""
    q, qc, s, sc, p = (common.query_start_loc, common.query_start_loc_cpu, common.seq_lens,
                       common.seq_lens_cpu, common.positions)
    if (q.is_inference() or qc.is_inference() or s.is_inference() or p.is_inference() or rope_cache.is_inference()
            or sc is not None and sc.is_inference()):
        return None
    fingerprint = (
        id(q), version(q), q.data_ptr(), q.shape, id(qc), version(qc), qc.data_ptr(), qc.shape,
        id(s), version(s), s.data_ptr(), s.shape, id(p), version(p), p.data_ptr(), p.shape,
        version(rope_cache), rope_cache.data_ptr(),
        common.num_reqs, common.num_actual_tokens, common.num_input_tokens, common.causal,
    )
    if sc is not None:
        fingerprint += (id(sc), version(sc), sc.data_ptr(), sc.shape)
    flags = common.is_prefilling
    if flags is not None:
        fingerprint += (id(flags), version(flags), flags.data_ptr(), flags.shape)
    return fingerprint


def check_step_inputs(common: object) -> None:
    """What a fingerprint reads, checked first: a CommonDraftInputs whose tensors are tensors of
    the sizes it claims (a NumPy array is the ValueError naming it that the uncached layer
    raises, not an AttributeError)."""
    if not isinstance(common, CommonDraftInputs):
        raise ValueError(f"common must be a CommonDraftInputs, got {type(common).__name__}")
    for name in ("num_reqs", "num_actual_tokens", "num_input_tokens"):
        if type(getattr(common, name)) is not int:
            checked_int(getattr(common, name), name)
    _check_step_sizes(common)


def step_inputs(common: CommonDraftInputs) -> tuple:
    """The tensors a fingerprint names, kept alive with the entry so that their ids stay unique."""
    return (common.query_start_loc, common.query_start_loc_cpu, common.seq_lens, common.seq_lens_cpu,
            common.positions, common.is_prefilling)


def resolve_invariant(setup: GroupSetup, common: CommonDraftInputs, buffers: DraftBuffers,
                      shared: StepCache | None, fingerprint: tuple | None,
                      dspark_widths: DSparkWidths | None) -> GroupInvariant:
    """The group-invariant results: from `shared` when it holds them for these inputs, else
    computed into the group's buffers (and stored there). The row widths of the step's
    DSpark groups are checked against the batch before anything is written."""
    if shared is not None:
        invariant = shared.get(buffers.invariant_key, fingerprint)
        if invariant is not None:
            if dspark_widths is not None:
                dspark_widths.check(invariant)
            return invariant
    invariant = _compute(setup, common, buffers, _views(setup, buffers, common), dspark_widths)
    if shared is not None:
        shared.put(buffers.invariant_key, fingerprint, invariant, keep_alive=step_inputs(common),
                   owner=buffers.invariant_writes)
    return invariant


def _views(setup: GroupSetup, buffers: DraftBuffers, common: CommonDraftInputs) -> InvariantViews:
    """The views of the buffers for the step's shape, made on its first step (sizes checked then)."""
    key = (common.num_reqs, common.num_actual_tokens, common.num_input_tokens)
    views = buffers.invariant_views.get(key)
    if views is None:
        num_reqs, num_tokens, num_input_tokens = key
        if not 0 <= num_reqs <= setup.max_num_reqs:
            raise ValueError(f"num_reqs must be in [0, max_num_reqs = {setup.max_num_reqs}], got {num_reqs}")
        if not 0 <= num_input_tokens <= setup.max_num_tokens:
            raise ValueError(f"num_input_tokens must be in [0, max_num_tokens = {setup.max_num_tokens}], "
                             f"got {num_input_tokens}")
        if not 0 <= num_tokens <= num_input_tokens:
            raise ValueError(
                f"num_actual_tokens must be in [0, num_input_tokens = {num_input_tokens}], got {num_tokens}")
        if len(buffers.invariant_views) >= MAX_CACHED_SHAPES:
            buffers.invariant_views.clear()
        views = InvariantViews(buffers, num_reqs, num_tokens, num_input_tokens, setup.model.cp_size,
                                setup.model.cp_rank)
        buffers.invariant_views[key] = views
    return views


def _compute(setup: GroupSetup, common: CommonDraftInputs, buffers: DraftBuffers,
             views: InvariantViews, dspark_widths: DSparkWidths | None) -> GroupInvariant:
    num_reqs, num_tokens = common.num_reqs, common.num_actual_tokens
    model = setup.model
    decode_threshold = 1 + model.num_speculative_tokens
    _check_step_sizes(common)
    query_start_loc_cpu = _first(common.query_start_loc_cpu, num_reqs + 1)

    # The split comes from the host copy: no device read.
    if query_start_loc_cpu.device.type != "cpu":
        raise ValueError(f"query_start_loc_cpu must be on the host, got {query_start_loc_cpu.device}")
    starts = query_start_loc_cpu.numpy()
    check_query_starts(starts)
    # A host value, free to read: the token count the step claims must be the batch's.
    if int(starts[-1]) != num_tokens:
        raise ValueError(f"num_actual_tokens must equal query_start_loc_cpu[num_reqs = {num_reqs}] = "
                         f"{int(starts[-1])}, got {num_tokens}")
    query_lens = starts[1:] - starts[:-1]
    is_short = query_lens <= decode_threshold
    is_decode = is_short
    if common.is_prefilling is not None:
        # vllm_ascend.attention.utils.split_decodes_and_prefills: a short prefill chunk is a prefill.
        is_decode = is_short & ~_first(common.is_prefilling, num_reqs).numpy()
    num_decodes = int(np.count_nonzero(is_decode))
    total = int(starts[-1] - starts[0]) if num_reqs else 0
    num_decode_tokens = total if num_decodes == num_reqs else int(query_lens[is_decode].sum())

    # Counted before the first write: an entry pointing at these buffers is dead from here on,
    # even if a check below rejects the inputs halfway.
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
    all_short = num_decodes == num_reqs or bool(is_short.all())
    invariant = GroupInvariant(query_lens, all_short, seq_lens_cpu, query_start_loc, seq_lens)
    # Before the first write. When every request is short, one comparison says every row fits.
    if dspark_widths is not None and (not all_short or decode_threshold > dspark_widths.room):
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
    # The padding tokens' local cos / sin rows are zero, as vllm-ascend pads them.
    views.local_cos_sin.copy_(views.local_source)
    if views.local_padding is not None:
        views.local_padding.zero_()

    # Whole buffers, so the padded requests past R are rewritten too; the metadata gets views.
    full = cp_local_metadata(
        query_start_loc=query_start_loc, seq_lens=seq_lens, num_input_tokens=common.num_input_tokens,
        cp_size=model.cp_size, cp_rank=model.cp_rank, causal=common.causal,
        local_query_start_loc=buffers.local_query_start_loc, local_seq_lens=buffers.local_seq_lens,
        start_pos=buffers.start_pos, query_start_loc_cpu=query_start_loc_cpu, seq_lens_cpu=seq_lens_cpu,
    )
    # Both built positionally, in their fields' order: keyword arguments cost this step over a
    # microsecond more (tests/layers/test_drafting.py checks every field against the naive form).
    cp = CPLocalMetadata(views.local_query_start_loc, views.local_seq_lens, views.start_pos, *views.split,
                         full.max_local_query_len, full.max_local_seq_len)
    head = (num_decodes, num_reqs - num_decodes, num_decode_tokens, total - num_decode_tokens, views.input_positions,
            views.cos, views.sin, cp, views.local_cos, views.local_sin, cp.start_pos, seq_lens_cpu)
    invariant.host_split = (starts, views.split[2], views.split[3], common.causal)
    invariant.shared = SharedFields._make(head)
    return invariant


def _check_step_sizes(common: CommonDraftInputs) -> None:
    """The sizes a step claims against its tensors (shorter tensors once gave a phantom request,
    or zeroed the position of a real token)."""
    num_reqs, num_tokens = common.num_reqs, common.num_actual_tokens
    for name, tensor, count, what in (
            ("query_start_loc", common.query_start_loc, num_reqs + 1, "num_reqs + 1"),
            ("query_start_loc_cpu", common.query_start_loc_cpu, num_reqs + 1, "num_reqs + 1"),
            ("seq_lens", common.seq_lens, num_reqs, "num_reqs"),
            ("seq_lens_cpu", common.seq_lens_cpu, num_reqs, "num_reqs"),
            ("positions", common.positions, num_tokens, "num_actual_tokens"),
            ("is_prefilling", common.is_prefilling, num_reqs, "num_reqs")):
        if tensor is None and name in ("seq_lens_cpu", "is_prefilling"):
            continue
        if not isinstance(tensor, torch.Tensor) or tensor.dim() != 1:
            described = list(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise ValueError(f"{name} must be a 1-D tensor, got {described}")
        if tensor.size(0) < count:
            raise ValueError(f"{name} must have at least {what} = {count} entries, got {tensor.size(0)}")
        if name == "is_prefilling" and (tensor.dtype != torch.bool or tensor.device.type != "cpu"):
            raise ValueError(f"is_prefilling must be a bool tensor on the host, got {tensor.dtype} on {tensor.device}")


def _first(t: torch.Tensor, count: int) -> torch.Tensor:
    """t[:count], without a new view when t already has exactly count entries."""
    return t if t.size(0) == count else t[:count]
