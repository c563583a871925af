"""The DSA-CP split of the flattened token stream across ranks (docs/context_parallel.md)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class CPTokenSplit:
    """This rank's slice [local_start, local_end) of the stream padded to num_tokens_pad tokens."""

    num_tokens_pad: int
    tokens_per_rank: int
    local_start: int
    local_end: int


def cp_token_split(num_input_tokens: int, cp_size: int, cp_rank: int) -> CPTokenSplit:
    tokens_per_rank = -(-num_input_tokens // cp_size)
    local_start = cp_rank * tokens_per_rank
    return CPTokenSplit(tokens_per_rank * cp_size, tokens_per_rank, local_start, local_start + tokens_per_rank)
