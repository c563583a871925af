"""One KV-cache group's builder: its static arguments, its buffers per draft index, and the
group-invariant results it computes when it is the first group of a step to need them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from specops.drafting.buffers import _MAX_CACHED_SHAPES, _DraftBuffers, _InvariantViews
from specops.drafting.cache import StepCache
from specops.drafting.configs import _CP_FIELD, CommonDraftInputs, DraftAttnMetadata, GroupConfig, ModelConfig
from specops.drafting.step import _build_step, _call_sas
from specops.ops._checks import check_positive
from specops.ops.cp_local_metadata import CPLocalMetadata, cp_local_metadata
from specops.ops.dspark_swa_indices import WIDTH_ALIGNMENT, default_width
from specops.ops.sas_metadata import _OP as _SAS_METADATA_OP
from specops.sas_layout import ASCEND950

if TYPE_CHECKING:
    from specops.drafting.plan import _DSparkWidths, _StepPlan


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
