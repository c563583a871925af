"""What a run says in short: every speedup of specops over a baseline (from the CSV's rows, or a
run's rows before they are written), the two cases of each op the summary figure shows, and the
lines printed after the table.

A speedup is the baseline's median over the subject's, both from the same case of the same run
(the subject: the case's implementation whose ratios are reported, "specops" unless the case
names another, e.g. the drafting layer's "step shared"). Floors and references are not
baselines and give none.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

# The ops by the docs' area pages, in the order the summary figure shows them. An op not named
# here (a new benchmark) is shown under OTHER.
FAMILIES: dict[str, tuple[str, ...]] = {
    "slot mapping and step accounting": (
        "compute_slot_mapping", "correct_num_computed_tokens", "correct_optimistic_seq_lens",
        "prepare_positions_and_seq_lens", "prepare_spec_decode_inputs"),
    "step bookkeeping": (
        "prepare_input_ids", "count_sampled_and_rejected", "post_update_after_sampling", "prepare_next_token_ids",
        "prepare_draft_prefill_inputs", "expand_parallel_draft_inputs", "advance_draft_step"),
    "persistent buffers": ("gather_block_tables", "gather_block_tables_multi", "apply_staged_writes",
                           "persistent_mappings"),
    "context parallelism": (
        "cp_local_metadata", "dcp_local_seq_lens", "format_slot_mapping_blocks", "format_slot_mapping_blocks_multi",
        "dspark_swa_indices", "dspark_swa_indices_multi", "pcp_partition", "pcp_gathered_slot_mappings"),
    "Ascend attention metadata": ("sas_metadata", "kv_quant_sas_metadata", "lightning_indexer_metadata",
                                  "store_kv_block_metadata", "compressor_metadata_multi"),
    "drafting layer": ("drafting", "draft_loop"),
    "tree speculation": ("build_tree_kernel_efficient", "verify_tree_greedy"),
}
OTHER = "other ops"

# The decode-sized case of an op: the largest batch of at most DECODE_MAX_REQUESTS requests with
# at most DECODE_MAX_TOKENS tokens a request (a decode with its drafts). The prefill-sized case:
# the case with the most tokens (requests, for an op without a per-token input), when it is larger
# than the decode-sized one. Ties go to the first case the bench lists, and for the prefill-sized
# case to one of the decode-sized case's family.
DECODE_MAX_REQUESTS = 256
DECODE_MAX_TOKENS = 8
SIZES = ("decode", "prefill")


def family_of(op: str) -> str:
    return next((family for family, ops in FAMILIES.items() if op in ops), OTHER)


@dataclasses.dataclass(frozen=True)
class Speedup:
    op: str
    case: str
    subject: str
    baseline: str
    batch_size: int
    num_tokens: int
    subject_us: float
    baseline_us: float
    family: str = ""  # the case's family (e.g. "W=4"), not the op's

    @property
    def ratio(self) -> float:
        """How many times faster the subject is: above 1 faster, below 1 slower."""
        return self.baseline_us / self.subject_us

    @property
    def size(self) -> int:
        return self.num_tokens if self.num_tokens > 0 else self.batch_size

    def says(self) -> str:
        """The ratio in words, as the table says it: a baseline not beaten is a time ratio."""
        if self.ratio >= 1:
            return f"{self.ratio:.1f}x faster than {self.baseline}"
        return f"{1 / self.ratio:.2f}x the time of {self.baseline}"


def speedups(rows: Iterable[Mapping[str, object]]) -> list[Speedup]:
    """Every (case, baseline) speedup in CSV rows (dicts of the CSV's columns, values as text or
    as numbers), in the rows' order. A CSV written before the subject column existed names no
    subject; its subject is "specops"."""
    cases: dict[tuple[str, str, str], list[Mapping[str, object]]] = {}
    for row in rows:
        cases.setdefault((str(row["op"]), str(row["case"]), str(row.get("family", ""))), []).append(row)
    found = []
    for (op, case, family), members in cases.items():
        by_impl = {str(row["impl"]): row for row in members}
        subject = by_impl.get(str(members[0].get("subject") or "specops"))
        if subject is None or float(subject["median_us"]) <= 0:
            continue
        for row in members:
            if row.get("role") == "baseline":
                found.append(Speedup(op, case, str(subject["impl"]), str(row["impl"]), int(row["batch_size"]),
                                     int(row["num_tokens"]), float(subject["median_us"]), float(row["median_us"]),
                                     family))
    return found


def _is_decode(point: Speedup) -> bool:
    tokens_per_request = point.num_tokens / point.batch_size if point.batch_size else 0
    return point.batch_size <= DECODE_MAX_REQUESTS and tokens_per_request <= DECODE_MAX_TOKENS


def summary_cases(points: Iterable[Speedup]) -> dict[str, dict[str, str]]:
    """Per op, the case shown at each size of SIZES ("decode", "prefill"), where it has one."""
    by_op: dict[str, dict[str, Speedup]] = {}
    for point in points:
        by_op.setdefault(point.op, {}).setdefault(point.case, point)
    chosen = {}
    for op, cases in by_op.items():
        ordered = list(cases.values())
        picks = {}
        decodes = [point for point in ordered if _is_decode(point)]
        if decodes:
            # The largest decode batch; among equal batches the first listed (the bench's order).
            picks["decode"] = max(decodes, key=lambda point: (point.batch_size, point.size)).case
        # Among cases of the same size, one of the decode-sized case's family (the same baselines).
        family = cases[picks["decode"]].family if "decode" in picks else None
        largest = max(ordered, key=lambda point: (point.size, point.family == family))
        if "decode" not in picks or largest.size > cases[picks["decode"]].size:
            picks["prefill"] = largest.case
        chosen[op] = picks
    return chosen


def summary_lines(points: list[Speedup], count: int = 5) -> list[str]:
    """The terminal's summary: the `count` largest and smallest speedups, and every case where a
    subject is slower than a baseline."""
    if not points:
        return ["summary: no speedups (no case ran a baseline)"]
    ordered = sorted(points, key=lambda point: point.ratio, reverse=True)
    width = max(len(f"{point.op} [{point.case}]") for point in ordered)

    def line(point: Speedup) -> str:
        subject = "" if point.subject == "specops" else f"{point.subject}: "
        return f"    {point.ratio:9.2f}x  {f'{point.op} [{point.case}]':<{width}}  {subject}{point.says()}"

    slower = [point for point in ordered if point.ratio < 1]
    ops = len({point.op for point in points})
    lines = [f"summary: {len(points)} speedups of specops over a baseline, {ops} ops, each a ratio of "
             f"medians from this run",
             f"  the {min(count, len(ordered))} largest:", *map(line, ordered[:count]),
             f"  the {min(count, len(ordered))} smallest:", *map(line, reversed(ordered[-count:]))]
    if slower:
        lines += [f"  slower than a baseline ({len(slower)}):", *map(line, reversed(slower))]
    else:
        lines.append("  slower than a baseline: none")
    return lines
