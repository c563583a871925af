"""The runner's counts: launches a step with the runner alone and with specops, per runner,
release and configuration, and the host syncs inside specops' adapters. The vLLM proof
(`make test-vllm-integration`, tests/vllm_integration) writes them; `specops-bench` draws them
(the runner figure, _figures.py).

One CSV row per (runner, release, configuration); a run replaces its own rows and keeps the
others, so runs of several releases or runners (vLLM, vllm-ascend) add up in one file.
"""

from __future__ import annotations

import csv
import datetime
import os
from collections.abc import Mapping

RUNNER_COLUMNS = [
    "runner", "release", "configuration", "steps",
    "launches_before",  # kernel launches a step, the runner alone
    "launches_after",  # the same with specops' plugin
    "tensor_ops_before", "tensor_ops_after",  # tensor ops a step beside the kernels (information)
    "host_syncs",  # host syncs inside specops' adapters, all steps together
    "timestamp",
]
KEY = ("runner", "release", "configuration")


def read_runner_counts(path: str) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [column for column in RUNNER_COLUMNS if column not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: not a runner-counts file (no column {', '.join(missing)})")
        return list(reader)


def record_runner_counts(path: str, row: Mapping[str, object]) -> None:
    """Writes `row` (every column but the timestamp, which is now) into the file at `path`,
    replacing the row of the same runner, release and configuration, keeping the others."""
    row = dict(row, timestamp=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    if sorted(row) != sorted(RUNNER_COLUMNS):
        raise ValueError(f"a runner-counts row has the columns {RUNNER_COLUMNS}, got {sorted(row)}")
    rows = read_runner_counts(path) if os.path.exists(path) else []
    key = tuple(str(row[column]) for column in KEY)
    places = [index for index, old in enumerate(rows) if tuple(old[column] for column in KEY) == key]
    if places:
        rows[places[0]] = row
    else:
        rows.append(row)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=RUNNER_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
