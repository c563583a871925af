"""pad_to_end's bookkeeping for `PersistentMappings`: how far a step must write so that, after it,
every captured slot mapping is PAD and every captured table row NULL from the batch's end to the
buffer's end, without a step's cost growing with the buffer.

After a step, entries past the batch hold PAD / NULL up to the extent the step wrote; past that
extent they hold what earlier steps left there, which is PAD / NULL beyond the largest extent
written since the last full clear. So the marks are the last step's real extents (its rows R
and its padded token count, which bounds T on the host), and the next step writes up to the
larger of its own padded extents and the marks: at most the last two steps' sizes. A write the
mappings did not make (the caller filling a captured buffer, as a test of the peer's does)
changes the buffers' version counter, and the next step then writes the full extents.
"""

from __future__ import annotations

import torch

from specops._fastpath import version_counter


class EndPadding:
    """The high-water marks of the captured buffers (see the module docstring)."""

    def __init__(self, slots: torch.Tensor, tables: torch.Tensor, *, max_num_reqs: int, max_num_tokens: int,
                 enabled: bool):
        self.enabled = enabled
        self._slots, self._tables = slots, tables
        self._max_num_reqs, self._max_num_tokens = max_num_reqs, max_num_tokens
        self._rows = self._tokens = 0  # the buffers start as PAD / NULL everywhere
        self._versions = self._current_versions()

    def _current_versions(self) -> tuple[int, int] | None:
        try:
            return version_counter(self._slots), version_counter(self._tables)
        except RuntimeError:  # inference tensors keep no version counter: always the full extents
            return None

    def extents(self, num_reqs_padded: int, num_tokens_padded: int) -> tuple[int, int]:
        """The (rows, tokens) this step writes: the caller's padded extents, or more with pad_to_end."""
        if not self.enabled:
            return num_reqs_padded, num_tokens_padded
        versions = self._current_versions()
        if versions is None or versions != self._versions:
            return self._max_num_reqs, self._max_num_tokens
        return max(num_reqs_padded, self._rows), max(num_tokens_padded, self._tokens)

    def written(self, num_reqs: int, num_tokens_padded: int) -> None:
        """After a step's last write: rows past num_reqs are NULL, slots past num_tokens_padded PAD."""
        if self.enabled:
            self._rows, self._tokens = num_reqs, num_tokens_padded
            self._versions = self._current_versions()


def peer_batch(num_reqs: int, query_start_loc: object, positions: object,
               ) -> tuple[object, object, int | None]:
    """refresh's batch in the peer's call shape (vllm-ascend #16300): query_start_loc of more than
    R + 1 entries (num_reqs_padded + 1, padded with T) and positions in a persistent buffer
    longer than T. Returns query_start_loc[:R + 1], positions[:T] and T on the host, where T is
    a free read; on a device (T would be a sync) positions as given and None: the kernels give
    PAD to every token past query_start_loc[R]. Views only, no copy; anything malformed goes
    to the ops unchanged, and they reject it."""
    if not (isinstance(query_start_loc, torch.Tensor) and isinstance(positions, torch.Tensor)):
        return query_start_loc, positions, 0
    if query_start_loc.dim() == 1 and query_start_loc.numel() > num_reqs + 1:
        query_start_loc = query_start_loc[: num_reqs + 1]
    if query_start_loc.device.type != "cpu" or positions.device.type != "cpu" or torch.compiler.is_compiling():
        return query_start_loc, positions, None
    if (query_start_loc.dtype != torch.int32 or query_start_loc.dim() != 1 or query_start_loc.numel() != num_reqs + 1
            or positions.dim() != 1):
        return query_start_loc, positions, positions.numel()
    # Through NumPy: a host tensor's entry, read without an aten op (no dispatch, nothing that
    # would be a device-to-host copy anywhere else).
    num_tokens = int(query_start_loc.numpy()[num_reqs])
    if num_tokens > positions.numel():
        raise ValueError(f"positions must have at least T = query_start_loc[R] = {num_tokens} entries, "
                         f"got {positions.numel()}")
    if 0 <= num_tokens < positions.numel():
        positions = positions[:num_tokens]
    return query_start_loc, positions, positions.numel()

