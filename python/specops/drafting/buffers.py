"""The persistent buffers of one builder for one draft index, and the views a batch shape gets."""

from __future__ import annotations

import torch

from specops._cp import cp_token_split
from specops._fastpath import row_views
from specops.drafting.configs import DRAFT_NAMESPACE, ModelConfig
from specops.sas_layout import NUM_WORDS


# Distinct (num_reqs, num_actual_tokens, num_input_tokens) shapes whose buffer views a builder
# keeps per draft index; a runner with graph padding sees a handful.
MAX_CACHED_SHAPES = 256


class InvariantViews:
    """The views of one draft index's group-invariant buffers for one (R, T, num_input_tokens).

    Every view comes from one row_views call over bases DraftBuffers made once (column views
    included), so a shape not seen before costs that call and no Python slicing; views whose
    rows coincide are one object (the real positions when no token is padding, the rank's
    slice of the padded stream without CP)."""

    __slots__ = (
        "split", "positions_real", "positions_tail", "positions_padded", "input_positions", "cos_sin_padded", "cos",
        "sin", "local_cos", "local_sin", "local_query_start_loc", "local_seq_lens", "start_pos", "seq_lens_host",
        "local_cos_sin", "local_source", "local_padding",
    )

    def __init__(self, buffers: DraftBuffers, num_reqs: int, num_tokens: int, num_input_tokens: int,
                 cp_size: int, cp_rank: int):
        # cp_token_split's fields, in CPLocalMetadata's order, from its arithmetic written out: its
        # frozen dataclass would cost a new shape a microsecond (tests/tooling/test_drafting_bench.py holds
        # the two equal).
        per_rank = -(-num_input_tokens // cp_size)
        pad, local_start = per_rank * cp_size, cp_rank * per_rank
        self.split = (pad, per_rank, local_start, local_start + per_rank)
        # The local rows of real tokens; the rows past them are padding, zeroed.
        real = num_tokens - local_start
        real = 0 if real < 0 else per_rank if real > per_rank else real
        # The fixed views first (in InvariantViews' order of DraftBuffers.view_bases), then the
        # optional ones, in the order they are read back below.
        bounds = [0, num_input_tokens, 0, pad, 0, num_input_tokens, 0, num_input_tokens, 0, num_reqs + 1,
                  0, num_reqs, 0, num_reqs, 0, per_rank, 0, per_rank, 0, per_rank]
        tensors = buffers.view_bases
        padded, tail, unpadded = num_tokens != num_input_tokens, pad > num_tokens, pad != num_input_tokens
        local_padding, host = real < per_rank, buffers.seq_lens_host is not None
        optional = padded or tail or unpadded or cp_size > 1 or local_padding or host
        if optional:
            tensors = list(tensors)
            if padded:
                tensors.append(buffers.positions)
                bounds += (0, num_tokens)
            if tail:
                tensors.append(buffers.positions)
                bounds += (num_tokens, pad)
            if unpadded:
                tensors.append(buffers.positions)
                bounds += (0, pad)
            if cp_size > 1:
                tensors.append(buffers.cos_sin)
                bounds += (local_start, local_start + per_rank)
            if local_padding:
                tensors.append(buffers.local_cos_sin)
                bounds += (real, per_rank)
            if host:
                tensors.append(buffers.seq_lens_host)
                bounds += (0, num_reqs)
        views = row_views(tensors, bounds)
        (self.input_positions, self.cos_sin_padded, self.cos, self.sin, self.local_query_start_loc,
         self.local_seq_lens, self.start_pos, self.local_cos_sin, self.local_cos, self.local_sin, *rest) = views
        if not optional:
            # No padding, no CP, host tensors: every optional view is one of the fixed ones or absent.
            self.positions_real = self.positions_padded = self.input_positions
            self.local_source = self.cos_sin_padded
            self.positions_tail = self.local_padding = self.seq_lens_host = None
            return
        rest = iter(rest)
        self.positions_real = next(rest) if padded else self.input_positions
        self.positions_tail = next(rest) if tail else None
        self.positions_padded = next(rest) if unpadded else self.input_positions
        # This rank's rows of the padded stream, copied into a buffer of their own (one address
        # whatever the step); without CP they are the whole stream.
        self.local_source = next(rest) if cp_size > 1 else self.cos_sin_padded
        self.local_padding = next(rest) if local_padding else None
        self.seq_lens_host = next(rest) if host else None


class Generation:
    """Counts the rewrites of some buffers: the `owner` of the StepCache entries they hold."""

    __slots__ = ("generation",)

    def __init__(self) -> None:
        self.generation = 0


class DraftBuffers:
    """The persistent buffers of one builder for one draft index, allocated at the builder's
    maximum sizes; every step hands out views of them. The write counters let a StepCache drop
    a value whose buffers were rewritten since it was stored."""

    def __init__(self, model: ModelConfig, max_num_reqs: int, max_num_tokens: int, device: torch.device,
                 dspark_width: int | None, draft_index: int, invariant_name: str, sas_names: dict[bool, str] | None,
                 slot_dtype: torch.dtype = torch.int64, qli_name: str | None = None):
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
        self.local_cos_sin = torch.zeros((max_pad.tokens_per_rank, cache.size(1)), dtype=cache.dtype, device=device)
        local_cos_columns, local_sin_columns = self.local_cos_sin[:, :half], self.local_cos_sin[:, half:]
        self.local_query_start_loc = torch.zeros(max_num_reqs + 1, **int32)
        self.local_seq_lens = torch.zeros(max_num_reqs, **int32)
        self.start_pos = torch.zeros(max_num_reqs, **int32)
        self.seq_lens_host = None
        if device.type != "cpu":
            # Device seq_lens without a host copy are read back once per step into this buffer.
            self.seq_lens_host = torch.zeros(max_num_reqs, dtype=torch.int32, pin_memory=device.type in ("cuda", "npu"))
        self.sas = torch.zeros(NUM_WORDS, **int32) if sas_names else None
        # A C4 group's lightning-indexer schedule: its StepCache key and buffer (None otherwise).
        self.qli_key = (namespace, qli_name) if qli_name else None
        self.qli = torch.zeros(NUM_WORDS, **int32) if qli_name else None
        self.qli_writes = Generation()
        self.slot_mapping = torch.zeros((max_num_tokens, 2), dtype=slot_dtype, device=device)
        self.dspark_indices = self.dspark_lens = None
        if dspark_width is not None:
            self.dspark_indices = torch.zeros((max_pad.tokens_per_rank, 1, dspark_width), **int32)
            self.dspark_lens = torch.zeros(max_pad.tokens_per_rank, **int32)
        # The bases of the views every shape gets, in InvariantViews' order.
        self.view_bases = [self.positions, self.cos_sin, self.cos_columns, self.sin_columns,
                           self.local_query_start_loc, self.local_seq_lens, self.start_pos, self.local_cos_sin,
                           local_cos_columns, local_sin_columns]
        self.invariant_views: dict[tuple[int, int, int], InvariantViews] = {}
        self.invariant_writes = Generation()
        self.sas_writes = Generation()

    def forget_shapes(self) -> None:
        """Drops the group-invariant views made per batch shape (the next step at a shape makes
        them again)."""
        self.invariant_views.clear()
