"""lightning_indexer_metadata: the golden vectors of the AI-CPU kernel on every backend, schedules
worked by hand (the A2/A3 cost, the key range before the first key, the leading 0 of the query
prefix sums), invalid values, the decoder, opcheck and compile; the golden vectors come
from golden_cases.py."""

from __future__ import annotations

import re

import pytest
import torch
from golden_cases import check_golden_schedule, check_schedule_compiles, golden_cases, tensor_call, with_words
from strategies import assert_same

import specops
from specops.bench.lightning_indexer_metadata import python_lightning_indexer_metadata

TENSORS = ("actual_seq_lengths_query", "actual_seq_lengths_key")
GOLDEN = golden_cases("lightning_indexer_metadata.jsonl")

_KERNEL_MESSAGE_ARGUMENT = [
    (r"^num_heads_q should", "num_heads_q"),
    (r"^num_heads_k should", "num_heads_k"),
    (r"^sparse_mode should", "sparse_mode"),
    (r"^pre_tokens should", "pre_tokens"),
    (r"^next_tokens should", "next_tokens"),
    (r"^For layout_query, layout must", "layout_query"),
    (r"^For layout_key, layout must", "layout_key"),
    (r"^For layout_query (TND|BSND), layout_key should", "layout_key"),
    (r"cmp_ratio should", "cmp_ratio"),
    (r"^batch_size should", "batch_size"),
    (r"^max_seqlen_k should", "max_seqlen_k"),
    (r"^max_seqlen_q should", "max_seqlen_q"),
    (r"actual_seq_lengths_query must be provided", "actual_seq_lengths_query"),
    (r"actual_seq_lengths_key must be provided", "actual_seq_lengths_key"),
    (r"dim of actual_seq_lengths_query", "actual_seq_lengths_query"),
    (r"^Core num invalid: aic:0,", "num_cube_cores"),
    (r"^Core num invalid: aic:\d+, aiv:", "num_vector_cores"),
    (r"^harness: aic > 36", "num_cube_cores"),
    (r"^harness: batch \d+ has query length", "actual_seq_lengths_query"),
]
# Undefined because of the values a tensor holds: the host op refuses them; a device cannot
# without a sync, and writes 1024 zeros instead (as sas_metadata).
_VALUE_ERRORS = (r"^harness: batch \d+ has query length",)


@pytest.mark.parametrize("case,source", GOLDEN)
def test_golden(backend, case, source):
    """Each accepted call gives the kernel's words exactly; each rejected or undefined call a
    ValueError naming the argument, with out untouched (undefined values: zeros on a device)."""
    values = case is not None and "error" in case and any(re.search(p, case["error"]) for p in _VALUE_ERRORS)
    check_golden_schedule(specops.lightning_indexer_metadata, case, source, TENSORS, _KERNEL_MESSAGE_ARGUMENT,
                          zeros_instead=values and backend != "native")


@pytest.mark.parametrize("case,source", with_words(GOLDEN))
def test_golden_python_restatement(case, source):
    """The bench's plain-Python restatement, an implementation apart from the three."""
    assert case is not None, source
    assert python_lightning_indexer_metadata(**tensor_call(case["args"], TENSORS)) == case["words"]


def _call(query, key, **change):
    call = dict(actual_seq_lengths_query=torch.tensor(query, dtype=torch.int32),
                actual_seq_lengths_key=torch.tensor(key, dtype=torch.int32), layout_query="TND",
                layout_key="PA_BSND", cmp_ratio=4, num_cube_cores=2, num_vector_cores=4, soc_version="Ascend910B1")
    call.update(change)
    return call


def test_a2_costs_worked_by_hand(backend):
    # Two requests (prefix sums [5, 6]: 5 and 1 tokens) with 9000 and 100 keys, cmp_ratio 4.
    # Request 0: tiles of 4 tokens (256 rows) and 1 token (64 rows). Tile 0 (tokens 0..3) sees up
    # to position 8998: 8999 // 4 = 2249 keys, one block of 2048 and a tail of 201: 4 * 2304 +
    # 4 * ((1536 + 201) // 2) = 9216 + 3472 = 12688; tile 1 (token 4) sees 9000 // 4 = 2250 keys:
    # 2304 + (1536 + 202) // 2 = 2304 + 869 = 3173. Request 1: 25 keys, 1 * 780 = 780. Total 16641.
    # Core 0: limit max(16641 // 2, 12688) = 12688; request 0 (15861) > 12688 + 434; tile 0:
    # 12688 <= 12688 + 1736 taken; tile 1: 15861 > 14424: ends at (0, 1). Core 1: the rest.
    out = specops.lightning_indexer_metadata(64, 1, 128, 0, 0, **_call([5, 6], [9000, 100]))
    assert out[:16].tolist() == [1, 0, 0, 0, 0, 1, 0, 0, 1, 0, 1, 0, 2, 0, 0, 0]
    assert out[16:].tolist() == [0] * 1008


def test_a_tile_before_the_first_key_still_sees_key_0(backend):
    # 8 query tokens over 2 keys, cmp_ratio 1, causal: token t sees up to position t - 6,
    # clipped into [0, 1]: tile 0 (tokens 0..3) sees key 0, tile 1 both. Each tile is one block:
    # 4 * ((1536 + 1) // 2) = 3072 and 4 * ((1536 + 2) // 2) = 3076. Two cores, limit 3076:
    # the batch (6148) > 3076 + 1538; tile 0 taken (3072 <= 4612), tile 1 not (6148).
    out = specops.lightning_indexer_metadata(64, 1, 128, 0, 0, **_call([8], [2], cmp_ratio=1))
    assert out[:16].tolist() == [1, 0, 0, 0, 0, 1, 0, 0, 1, 0, 1, 0, 1, 0, 0, 0]


def test_query_prefix_sums_with_a_leading_zero(backend):
    # A query tensor one longer than the key tensor is read with its leading 0.
    with_zero = specops.lightning_indexer_metadata(64, 1, 128, 0, 0, **_call([0, 5, 6], [9000, 100]))
    without = specops.lightning_indexer_metadata(64, 1, 128, 0, 0, **_call([5, 6], [9000, 100]))
    assert_same(with_zero, without)


def test_zero_requests_give_the_empty_schedule(backend):
    # METADATA_FAMILY section 6: BSND/BSND without tensors and batch_size 0.
    out = specops.lightning_indexer_metadata(64, 1, 128, 0, 0, layout_query="BSND", layout_key="BSND", batch_size=0,
                                             cmp_ratio=4, num_cube_cores=24, num_vector_cores=48,
                                             soc_version="Ascend910B1")
    assert out.tolist() == [1] + [0] * 1023


def test_sparse_count_and_quant_modes_do_not_change_the_schedule(backend):
    expected = specops.lightning_indexer_metadata(64, 1, 128, 0, 0, **_call([3, 9], [5000, 70000]))
    assert_same(specops.lightning_indexer_metadata(64, 1, 64, 1, 2, **_call([3, 9], [5000, 70000]),
                                                   sparse_count=512), expected)


def _schema_args(out: torch.Tensor) -> tuple:
    query, key = torch.tensor([1, 3, 10], dtype=torch.int32), torch.tensor([500, 20, 2000], dtype=torch.int32)
    # heads, head_dim, quant modes, the two tensors, batch_size, maxima, layout codes (TND,
    # PA_BSND), sparse_count, sparse_mode, pre/next tokens, cmp_ratio, cores, ascend950, out
    return (64, 1, 128, 0, 0, query, key, 3, 7, 2000, 1, 0, 512, 3, 2**63 - 1, 2**63 - 1, 4, 6, 12, False, out)


def test_opcheck():
    torch.library.opcheck(torch.ops.specops.lightning_indexer_metadata.default,
                          _schema_args(torch.zeros(1024, dtype=torch.int32)))


def test_compiles_without_graph_break():
    query, key = torch.tensor([1, 3, 10], dtype=torch.int32), torch.tensor([500, 20, 2000], dtype=torch.int32)

    def step(query, key, out):
        specops.lightning_indexer_metadata(64, 1, 128, 0, 0, actual_seq_lengths_query=query,
                                           actual_seq_lengths_key=key + 0, layout_query="TND", layout_key="PA_BSND",
                                           cmp_ratio=4, soc_version="Ascend950PR", num_cube_cores=24,
                                           num_vector_cores=48, out=out)
        return out + 1

    check_schedule_compiles(step, query, key)


def test_decoder_names_the_layout_fields():
    words = torch.zeros(1024, dtype=torch.int32)
    words[8:16] = torch.tensor([1, 2, 3, 0, 5, 0, 0, 0])
    schedule = specops.decode_lightning_indexer_metadata(words, num_cube_cores=2, num_vector_cores=2)
    assert schedule.li[1] == specops.LIEntry(core=1, core_enable=1, bn2_start=2, m_start=3, s2_start=0, bn2_end=5,
                                             m_end=0, s2_end=0, first_ld_data_workspace_idx=0)
    assert not schedule.ld[0].core_enable and len(schedule.ld) == 2
    with pytest.raises(ValueError, match="num_vector_cores"):
        specops.decode_lightning_indexer_metadata(words, num_vector_cores=73)
