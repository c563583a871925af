"""The argument lists of the ops a draft step launches, every argument written by name.

The layer calls each op's dispatch object, which takes the schema's arguments by position only
(the wrappers would only convert lists and strings and allocate absent outputs). So a step plan
builds each call's list once, with keywords, through a namedtuple of the op's schema arguments
in the schema's order (read from the op's check, which takes them so); a new batch size copies
it and sets its outputs by name, and each step sets its inputs by name, in place
(`SAS.cu_seqlens_q` is that argument's position). Building the whole list with keywords at
every launch would cost microseconds per launch.
"""

from __future__ import annotations

import collections
import inspect
from typing import TYPE_CHECKING

import torch

from specops.ops._op import SpecOp
from specops.ops.dspark_swa_indices_multi import _OP as DSPARK_SWA_INDICES_MULTI
from specops.ops.format_slot_mapping_blocks_multi import _OP as FORMAT_SLOT_MAPPING_BLOCKS_MULTI
from specops.ops.sas_metadata import _OP as SAS_METADATA
from specops.sas_layout import LAYOUT_KV_CODES, LAYOUT_Q_CODES

if TYPE_CHECKING:
    from specops.drafting.builder import SasArguments
    from specops.drafting.plan import DSparkCall


def _schema_arguments(op: SpecOp) -> type:
    return collections.namedtuple(f"{op.name}_arguments", inspect.signature(op.check).parameters)


FormatArguments = _schema_arguments(FORMAT_SLOT_MAPPING_BLOCKS_MULTI)
SasMetadataArguments = _schema_arguments(SAS_METADATA)
DSparkArguments = _schema_arguments(DSPARK_SWA_INDICES_MULTI)
# Positions of each argument, by name.
FORMAT = FormatArguments(*range(len(FormatArguments._fields)))
SAS = SasMetadataArguments(*range(len(SasMetadataArguments._fields)))
DSPARK = DSparkArguments(*range(len(DSparkArguments._fields)))

# sas_metadata's KV layout for a step's batch: without requests seqused_kv is empty, which the
# kernel reads as not provided and PA_ND refuses; under the TND KV layout the same empty batch
# gets its schedule (core 0 over none).
LAYOUT_KV_PAGED = LAYOUT_KV_CODES["PA_ND"]
LAYOUT_KV_EMPTY_BATCH = LAYOUT_KV_CODES["TND"]


def format_arguments(block_sizes: list[int]) -> list:
    """format_slot_mapping_blocks_multi for every group of a plan; each size sets out, each step
    slot_mappings and num_slots."""
    return list(FormatArguments(slot_mappings=None, block_sizes=block_sizes, num_slots=None, out=None))


def sas_arguments(fixed: SasArguments, out: torch.Tensor) -> list:
    """sas_metadata as vllm-ascend's DSA draft builders call it: the CP-local query starts and KV
    lengths (TND queries, paged KV), one KV head, no compressed KV, the band mask of the step's
    window. The step sets the batch: cu_seqlens_q, seqused_kv, batch_size, max_seqlen_q,
    max_seqlen_kv and layout_kv."""
    return list(SasMetadataArguments(
        num_heads_q=fixed.num_heads_q, num_heads_kv=1, head_dim=fixed.head_dim, cu_seqlens_q=None,
        cu_seqlens_ori_kv=None, cu_seqlens_cmp_kv=None, seqused_q=None, seqused_kv=None, batch_size=None,
        max_seqlen_q=None, max_seqlen_kv=None, ori_topk=0, cmp_topk=0, cmp_ratio=1, ori_mask_mode=4, cmp_mask_mode=3,
        ori_win_left=fixed.ori_win_left, ori_win_right=fixed.ori_win_right, layout_q=LAYOUT_Q_CODES["TND"],
        layout_kv=None, has_ori_kv=True, has_cmp_kv=False, num_cube_cores=fixed.num_cube_cores,
        num_vector_cores=fixed.num_vector_cores, ascend950=fixed.ascend950, out=out))


def dspark_arguments(call: DSparkCall) -> list:
    """dspark_swa_indices_multi for the call's groups; each size sets num_tokens, out and
    out_lens, each step block_tables, query_start_loc and seq_lens."""
    return list(DSparkArguments(
        block_tables=None, query_start_loc=None, seq_lens=None, windows=call.windows,
        num_speculative_tokens=call.num_speculative_tokens, block_sizes=call.block_sizes, num_tokens=None,
        widths=call.widths, cp_size=call.cp_size, cp_rank=call.cp_rank, out=None, out_lens=None))
