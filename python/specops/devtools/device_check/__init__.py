"""The device check (`make device-check`, tools/device_check.py; docs/device_readiness.md, "The
first minutes on a device"): on a machine with a CUDA GPU or an Ascend NPU, in one command and a
few minutes, every op's device path against the native CPU op (`device_path`), the kernels under
compute-sanitizer (`sanitizer`), a whole runner step captured in a device graph (`graphs`,
`runner_step`), timings against torch eager and vLLM's own kernels (`timing`, `vllm_peers`) and
the host-planned schedule hook (`schedules`); without a device, every step that can run on the
CPU (the Triton interpreter) and the others marked skipped with their reason (`run`)."""

from specops.devtools.device_check.report import CSV_NAME, REPORT_NAME, STEPS
from specops.devtools.device_check.run import run_in_process

__all__ = ["CSV_NAME", "REPORT_NAME", "STEPS", "run_in_process"]
