"""Launch counts (specops.launch_count): the counter itself, a decode step fused and
unfused, and a draft step whose groups share their arguments.

On a GPU or NPU each op that reaches the dispatcher is at least one kernel launch, so these
counts are a device cost this CPU-only machine can check. The draft step runs with a device
stand-in: every tensor on `meta` except the runner's host copies, so ops on host data only are
told apart from launches.
"""

from __future__ import annotations

import pytest
import torch
from docs_figures import assert_docs_say, docs_table_rows
from op_table import FUSED, SLOT_MAPPING

import specops
from specops.bench import drafting as drafting_bench
from specops.launch_count import LaunchCounter, count_launches
from specops.drafting import StepCache, build_draft_attn_metadata

META = torch.device("meta")


def test_the_counter_tells_specops_aten_views_and_host_apart():
    call = SLOT_MAPPING.valid_call()

    def block():
        specops.compute_slot_mapping(**call)
        specops.compute_slot_mapping(**call)
        torch.add(call["positions"], 1)
        call["positions"][:2].view(2, 1)  # two views, no launch

    counts = count_launches(block)
    assert (counts.specops, counts.aten, counts.views, counts.host) == (2, 1, 2, 0)
    assert counts.by_op["specops.compute_slot_mapping.default"] == 2 and counts.launches == 3
    # The same block where the device is meta: every one of these ops is on host tensors.
    host = count_launches(block, device_type="meta")
    assert (host.specops, host.aten, host.host) == (0, 0, 5)
    with LaunchCounter("meta") as counter:
        torch.zeros(4, device=META).add_(1)  # a factory on the device has no tensor argument
        torch.zeros(4).add_(1)
    assert (counter.counts.aten, counter.counts.host) == (2, 2)


def _decode_step_call():
    call = FUSED.valid_call()
    call["block_tables"].append(torch.tensor([[2, 3], [4, 5]], dtype=torch.int32))
    call["block_sizes"].append(32)
    call["slot_mappings"].append(torch.empty(4, dtype=torch.int64))
    call["blocks_per_kv_block"].append(1)
    call["cp_sharded"].append(True)
    call["num_blocks"].append(torch.tensor([2, 2], dtype=torch.int32))
    return call


def test_decode_step_is_one_launch_fused_and_two_plus_one_per_group_unfused():
    call = _decode_step_call()
    groups = len(call["block_tables"])
    assert groups == 3
    fused = count_launches(lambda: specops.prepare_spec_decode_inputs(**call))
    assert (fused.specops, fused.aten) == (1, 0), fused.by_op
    counts = count_launches(lambda: _run_unfused(call))
    assert (counts.specops, counts.aten) == (2 + groups, 0), counts.by_op


def _run_unfused(call):
    """The decode step as separate ops: the correction, positions, a slot mapping per group."""
    real_positions = call["positions"][:3]  # query_start_loc[R] = 3 tokens, one of padding
    specops.correct_num_computed_tokens(call["num_computed_tokens"], call["num_accepted_tokens"],
                                        call["prev_positions"], call["valid_sampled_token_count"],
                                        call["prev_num_draft_tokens"], call["cpu_num_computed_tokens"])
    specops.prepare_positions_and_seq_lens(call["num_computed_tokens"], call["query_start_loc"],
                                           positions=call["positions"], seq_lens=call["seq_lens"],
                                           num_tokens_padded=4, num_reqs_padded=3)
    for table, block_size, out in zip(call["block_tables"], call["block_sizes"], call["slot_mappings"]):
        specops.compute_slot_mapping(call["query_start_loc"], real_positions, table, block_size, out=out,
                                     idx_mapping=call["idx_mapping"], num_tokens_padded=4)


def _draft_setup(groups, causal: bool = True):
    model = drafting_bench.make_model(num_speculative_tokens=3, cp_size=1, device=META)
    common = drafting_bench.make_decode_inputs(groups, num_reqs=16, query_len=4, device=META, causal=causal)
    builders = drafting_bench._builders(model, groups, META)
    return builders, common


def _step_counts(builders, common):
    step = lambda: build_draft_attn_metadata(builders, common, 1, cache=StepCache())  # noqa: E731
    step()  # the first call sizes the builders' buffers
    return count_launches(step, device_type="meta")


def _own_ops(builders, index: int, causal: bool) -> int:
    """What group `index` launches that no earlier group does: its sas_metadata when it has a
    sliding window and no earlier windowed group has its window this step (same heads and
    head_dim here; full attention has no sas_metadata), and the DSpark indices when it is the
    first DSpark group of a non-causal step. Its format is part of the one format launch."""
    window = builders[index].step_windows[causal]
    own_sas = builders[index].group.sliding_window is not None and all(
        earlier.step_windows[causal] != window for earlier in builders[:index] if earlier.group.sliding_window is not None)
    first_dspark = not causal and builders[index].group.dspark and not any(
        earlier.group.dspark for earlier in builders[:index])
    return int(own_sas) + int(first_dspark)


GROUPS_4 = drafting_bench.GROUPS[:4]


@pytest.mark.parametrize("causal", [True, False])
def test_a_later_group_that_shares_arguments_launches_only_its_own_ops(causal):
    builders, common = _draft_setup(GROUPS_4, causal)
    previous = None
    for count in range(1, len(GROUPS_4) + 1):
        counts = _step_counts(builders[:count], common)
        if previous is not None:
            added_specops = counts.specops - previous.specops
            assert counts.aten == previous.aten, (count, counts.by_op, previous.by_op)
            assert added_specops == _own_ops(builders, count - 1, causal), (count, counts.by_op, previous.by_op)
        previous = counts
    assert counts.by_op["specops.format_slot_mapping_blocks_multi.default"] == 1
    assert counts.by_op["specops.dspark_swa_indices_multi.default"] == (0 if causal else 1)


def test_a_draft_step_of_four_groups_launches_less_than_the_groups_alone():
    builders, common = _draft_setup(GROUPS_4)
    shared = _step_counts(builders, common)
    alone_builders, _ = _draft_setup(GROUPS_4)

    def alone():
        for builder in alone_builders:
            builder.build_for_drafting(common, 1)

    alone()
    separate = count_launches(alone, device_type="meta")
    first = _step_counts(builders[:1], common)
    assert shared.launches < separate.launches
    # Everything but the groups' own ops is launched once, as for one group.
    assert shared.launches == first.launches + sum(_own_ops(builders, i, True) for i in range(1, len(GROUPS_4)))
    assert shared.aten == first.aten


@pytest.mark.parametrize("draft_index", [1, 2])
@pytest.mark.parametrize("causal", [True, False])
def test_repeating_a_step_launches_the_same(draft_index, causal):
    builders, common = _draft_setup(GROUPS_4, causal)
    cache = StepCache()
    build_draft_attn_metadata(builders, common, draft_index, cache=cache)
    again = count_launches(lambda: build_draft_attn_metadata(builders, common, draft_index, cache=cache),
                           device_type="meta")
    # A runner's repeated build with unchanged inputs hits the cache: only the groups' own ops
    # launch, one format for all and on a non-causal step one DSpark launch.
    assert again.aten == 0 and again.specops == (1 if causal else 2), again.by_op


# ------------------------------------------------------------------ the launch counts the docs state


def _counts_on(device: torch.device, groups, causal: bool, alone: bool = False):
    """A step's counts on the CPU (every op counts, as in the benchmark run) or on the meta
    device stand-in (host work apart): the shared step, or every group building alone."""
    model = drafting_bench.make_model(num_speculative_tokens=3, cp_size=1, device=device)
    common = drafting_bench.make_decode_inputs(groups, num_reqs=16, query_len=4, device=device, causal=causal)
    builders = drafting_bench._builders(model, groups, device)
    if alone:
        step = lambda: [builder.build_for_drafting(common, 1) for builder in builders]  # noqa: E731
    else:
        step = lambda: build_draft_attn_metadata(builders, common, 1)  # noqa: E731
    step()  # the first call sizes the builders' buffers
    return count_launches(step, device_type="meta" if device == META else None)


def _both(groups, causal: bool, alone: bool = False):
    return _counts_on(torch.device("cpu"), groups, causal, alone), _counts_on(META, groups, causal, alone)


def test_the_docs_state_the_counted_launches():
    call = _decode_step_call()
    fused = count_launches(lambda: specops.prepare_spec_decode_inputs(**call))
    one, causal, non_causal = _both(GROUPS_4[:1], True), _both(GROUPS_4, True), _both(GROUPS_4, False)
    alone_causal, alone_non_causal = _both(GROUPS_4, True, alone=True), _both(GROUPS_4, False, alone=True)
    eight = _both(drafting_bench.GROUPS[:8], True)
    assert (eight[0].specops, eight[0].aten) == (causal[0].specops, causal[0].aten)

    def cell(pair) -> str:
        cpu, meta = pair
        return f"{cpu.specops} ({meta.specops})" if meta.specops != cpu.specops else str(cpu.specops)

    rows = docs_table_rows("device_readiness.md", "d")
    assert rows["decode step, 3 groups, fused (`prepare_spec_decode_inputs`)"] == [str(fused.specops), str(fused.aten)]
    unfused = count_launches(lambda: _run_unfused(call))
    assert rows["decode step, 3 groups, unfused (correct, positions, a slot mapping per group)"] == [
        str(unfused.specops), str(unfused.aten)]
    assert rows["draft step, first group alone (R=64, k=7)"] == [cell(one), str(one[0].aten)]
    assert rows["draft step, 4 groups (swa, DSpark, c4, full), causal"] == [cell(causal), str(causal[0].aten)]
    assert rows["draft step, the same 4 groups, non-causal (DSpark indices)"] == [cell(non_causal),
                                                                                  str(non_causal[0].aten)]
    assert rows["draft step, 4 groups each building alone, causal / non-causal"] == [
        f"{cell(alone_causal)} / {cell(alone_non_causal)}", str(alone_causal[0].aten)]

    def plus(pair) -> str:
        return f"{pair[0].specops} + {pair[0].aten}"

    assert_docs_say("drafting.md", f"{plus(one)} (specops + aten) for one group, {plus(causal)} for 4 or 8 groups on "
                                   f"causal steps")
    assert_docs_say("drafting.md", f"{plus(non_causal)} on non-causal ones")
    assert_docs_say("drafting.md", f"{plus(alone_causal)} / {plus(alone_non_causal)} at 4 groups")

    assert_docs_say("benchmarks.md", f"shared: {plus(non_causal)} ({non_causal[0].specops - non_causal[1].specops} on "
                                     f"the host) | every group alone: {plus(alone_non_causal)} "
                                     f"({alone_non_causal[0].specops - alone_non_causal[1].specops} on the host)")
