"""cp_local_metadata: this rank's view of a batch under DSA-CP (docs/context_parallel.md)."""

from __future__ import annotations

import dataclasses

import torch

from specops._backend import current_backend
from specops._cp import cp_token_split
from specops._fastpath import native_entry
from specops.arguments import check_tensor
from specops.ops._op import SpecOp
from specops.reference.cp_local_metadata import cp_local_max_lens as _reference_max_lens
from specops.reference.cp_local_metadata import cp_local_metadata as _reference

__all__ = ["CPLocalMetadata", "cp_local_metadata"]


@dataclasses.dataclass(slots=True)
class CPLocalMetadata:
    """This rank's slice [local_start, local_end) of the token stream padded to num_tokens_pad.

    The tensors are int32 on the device of the inputs. The two maxima are host ints computed
    from host data only; they are None when the inputs live on a device and no host copy was
    given (and under torch.compile, where no host value exists at trace time).
    """

    local_query_start_loc: torch.Tensor  # [R + 1]: cumulative local query lengths
    local_seq_lens: torch.Tensor  # [R]: KV length seen by this rank's tokens of each request
    start_pos: torch.Tensor  # [R]: seq_lens - query_lens, tokens computed before this step
    num_tokens_pad: int
    tokens_per_rank: int
    local_start: int
    local_end: int
    max_local_query_len: int | None
    max_local_seq_len: int | None


_OP = SpecOp("cp_local_metadata", _reference)
# The host-only helper op, entered like every wrapper's op.
_NATIVE_MAX_LENS = native_entry("cp_local_max_lens")


def _check_host_copy(t: torch.Tensor | None, name: str, of: str, entries: int,
                     dtypes: tuple[torch.dtype, ...] = (torch.int32,)) -> None:
    if t is None:
        return
    check_tensor(t, name, dtypes, 1, torch.device("cpu"), f"a host copy of {of}")
    if t.numel() != entries:
        raise ValueError(f"{name} must have {entries} entries like {of}, got {t.numel()}")


def _host_maxima(
    host_query_start_loc: torch.Tensor | None,
    host_seq_lens: torch.Tensor | None,
    num_input_tokens: int,
    cp_size: int,
    cp_rank: int,
    causal: bool,
) -> tuple[int | None, int | None]:
    if host_query_start_loc is None or torch.compiler.is_compiling():
        return None, None
    args = (host_query_start_loc, host_seq_lens, num_input_tokens, cp_size, cp_rank, causal)
    # A host computation whatever the backend: the C++ one allocates nothing; only the
    # reference backend keeps to plain torch.
    if _NATIVE_MAX_LENS is not None and current_backend() != "reference":
        max_query, max_seq = _NATIVE_MAX_LENS(*args)
    else:
        max_query, max_seq = _reference_max_lens(*args)
    return max_query, (max_seq if host_seq_lens is not None else None)


def cp_local_metadata(
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    num_input_tokens: int,
    cp_size: int,
    cp_rank: int,
    *,
    causal: bool = True,
    local_query_start_loc: torch.Tensor | None = None,
    local_seq_lens: torch.Tensor | None = None,
    start_pos: torch.Tensor | None = None,
    query_start_loc_cpu: torch.Tensor | None = None,
    seq_lens_cpu: torch.Tensor | None = None,
) -> CPLocalMetadata:
    """Splits the stream of num_input_tokens tokens evenly over cp_size ranks; returns rank
    cp_rank's local query_start_loc, local seq_lens (causal: minus the request's tokens on later
    ranks; non-causal: the whole seq_len) and start_pos.

    query_start_loc: int32 [R + 1]; seq_lens: int32 [R]. Outputs are int32 buffers of at least
    R + 1, R, R entries (allocated when absent); past R, local_query_start_loc repeats its last
    value and the others are 0. query_start_loc_cpu / seq_lens_cpu: host copies (int32;
    seq_lens_cpu int32 or int64) used for the host maxima when the inputs live on a device; no
    device-to-host copy is ever made.
    """
    # The host copies' lengths and the outputs' follow query_start_loc's (its checks come with the op's).
    num_reqs = max(query_start_loc.numel() - 1, 0) if isinstance(query_start_loc, torch.Tensor) else 0
    if local_query_start_loc is None or local_seq_lens is None or start_pos is None:
        device = query_start_loc.device if isinstance(query_start_loc, torch.Tensor) else None
        if local_query_start_loc is None:
            local_query_start_loc = torch.empty(num_reqs + 1, dtype=torch.int32, device=device)
        if local_seq_lens is None:
            local_seq_lens = torch.empty(num_reqs, dtype=torch.int32, device=device)
        if start_pos is None:
            start_pos = torch.empty(num_reqs, dtype=torch.int32, device=device)
    # Checked even where unused (inputs on the host), and before the op writes anything.
    _check_host_copy(query_start_loc_cpu, "query_start_loc_cpu", "query_start_loc", num_reqs + 1)
    # Runners keep int64 host copies of seq_lens (numpy's default integer): accepted as they are.
    _check_host_copy(seq_lens_cpu, "seq_lens_cpu", "seq_lens", num_reqs, (torch.int32, torch.int64))
    # The maxima first: they read host inputs only, which are then unchanged whatever the
    # outputs alias (a rejected call computes them in vain, and writes nothing). The C++
    # helper checks what it reads; the plain-torch one does not, so the op's checks go first.
    # (A ContextVar cannot be traced; compiled graphs compute no maxima and run the registered op.)
    if not torch.compiler.is_compiling() and current_backend() == "reference":
        checked = _OP.checked(query_start_loc=query_start_loc, seq_lens=seq_lens, num_input_tokens=num_input_tokens,
                              cp_size=cp_size, cp_rank=cp_rank, causal=causal,
                              local_query_start_loc=local_query_start_loc, local_seq_lens=local_seq_lens,
                              start_pos=start_pos)
        num_input_tokens, cp_size, cp_rank, causal = (checked.num_input_tokens, checked.cp_size, checked.cp_rank,
                                                      checked.causal)
    on_host = isinstance(query_start_loc, torch.Tensor) and query_start_loc.device.type == "cpu"
    max_query, max_seq = _host_maxima(
        query_start_loc if on_host else query_start_loc_cpu,
        seq_lens if isinstance(seq_lens, torch.Tensor) and seq_lens.device.type == "cpu" else seq_lens_cpu,
        num_input_tokens, cp_size, cp_rank, causal,
    )
    _OP.select()(query_start_loc, seq_lens, num_input_tokens, cp_size, cp_rank, causal, local_query_start_loc,
        local_seq_lens, start_pos)
    split = cp_token_split(num_input_tokens, cp_size, cp_rank)
    return CPLocalMetadata(
        local_query_start_loc, local_seq_lens, start_pos,
        split.num_tokens_pad, split.tokens_per_rank, split.local_start, split.local_end,
        max_query, max_seq,
    )
