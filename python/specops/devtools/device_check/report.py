"""The device check's report and its step table, in the standard library alone: the driver
(tools/device_check.py) loads this file by its path before anything is built or imported, so
it can write the report even when torch or the extension cannot be imported."""

from __future__ import annotations

import csv
import json
import os
import re
import time
from pathlib import Path
from typing import Any

# Every step after the build, in order, with its cap in seconds and whether it needs a device. The
# driver gives each step its cap's share of what is left of the whole budget (at most the cap),
# so a slow build squeezes every later step alike; a step's child process counts its imports.
STEPS: dict[str, dict[str, Any]] = {
    "device_path": {"cap": 130, "device_only": False,
                    "what": "every op's device path on the op specs' inputs vs the native CPU op (step 2)"},
    "sanitizer_memcheck": {"cap": 70, "device_only": True,
                           "what": "compute-sanitizer memcheck over multi-program launches (step 3)"},
    "sanitizer_racecheck": {"cap": 50, "device_only": True,
                            "what": "compute-sanitizer racecheck over multi-program launches (step 3)"},
    "graph_capture": {"cap": 60, "device_only": True,
                      "what": "a whole runner step captured in a device graph, 50 replays vs eager (step 4)"},
    "timing": {"cap": 110, "device_only": True,
               "what": "each op timed on the device vs torch eager and vLLM's kernels (step 5)"},
    "host_planned_schedules": {"cap": 40, "device_only": True,
                               "what": "sas_metadata: CPU lengths, device out, pinned non-blocking copy (hook)"},
}
SANITIZER_TOOLS = {"sanitizer_memcheck": "memcheck", "sanitizer_racecheck": "racecheck"}
REPORT_NAME = "device-check.json"
CSV_NAME = "device-check.csv"
CSV_FIELDS = ("source", "op", "label", "impl", "role", "median_us", "p20_us", "p80_us", "speedup", "device")
SUMMARY = re.compile(r"(ERROR SUMMARY|RACECHECK SUMMARY): (\d+) (errors|hazards?)")
KERNEL = re.compile(r"(?:at|in) (?:0x[0-9a-f]+ in )?([A-Za-z_][A-Za-z0-9_]*)")


def write_json(path: Path, value: Any) -> None:
    """Written whole or not at all (a step killed at its limit leaves its last complete write)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(path.suffix + ".partial")
    partial.write_text(json.dumps(value, indent=1, default=str))
    os.replace(partial, path)


def parse_log(text: str, tool: str) -> dict[str, Any]:
    """The sanitizer's count of errors (memcheck) or hazards (racecheck), the kernels named in
    its reports and the first report lines."""
    counts = [int(match.group(2)) for match in SUMMARY.finditer(text)]
    reports = [line.strip() for line in text.splitlines() if line.startswith("=========") and
               ("Invalid" in line or "Race" in line or "Hazard" in line or "Error" in line and "SUMMARY" not in line)]
    kernels = sorted({match.group(1) for line in text.splitlines() if line.startswith("=========")
                      for match in KERNEL.finditer(line) if match.group(1).endswith("_kernel")})
    return {"tool": tool, "summary_found": bool(counts), "count": sum(counts), "kernels": kernels,
            "first_reports": reports[:8]}


def assemble(out_dir: Path, env: dict[str, Any], steps: dict[str, dict[str, Any]], op_names: list[str],
             started: float, budget_s: float) -> dict[str, Any]:
    """The report: environment, each step's result, every op, and a summary; written with the
    CSV (every step's `csv_rows`) into out_dir."""
    rows = []
    for result in steps.values():
        rows += result.pop("csv_rows", None) or []
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = out_dir / CSV_NAME
    with open(csv_path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    summary = {
        "failed": sorted(name for name, result in steps.items() if result.get("status") == "failed"),
        "partial": sorted(name for name, result in steps.items() if result.get("status") == "partial"),
        "unsupported": sorted(name for name, result in steps.items() if result.get("status") == "unsupported"),
        "skipped": {name: result.get("reason", "") for name, result in steps.items()
                    if result.get("status") == "skipped"},
        "ok": sorted(name for name, result in steps.items() if result.get("status") == "ok"),
    }
    report = {
        "tool": "specops device check (make device-check; docs/device_readiness.md)",
        "wall_s": round(time.monotonic() - started, 1),
        "budget_s": budget_s,
        "environment": env,
        "ops": op_names,
        "steps": steps,
        "csv": str(csv_path),
        "csv_rows": len(rows),
        "summary": summary,
    }
    write_json(out_dir / REPORT_NAME, report)
    return report
