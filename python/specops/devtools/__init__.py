"""Developer tools that are not benchmarks: they measure what no timing on a CPU-only machine shows.

- `targets`, `kernel_capture`, `kernel_compile`, `kernel_report`: every Triton kernel compiled
  ahead of time for real GPU targets with no GPU present, and the resources their compilers
  report (`specops-kernels`; tests/tooling/test_kernel_compile.py runs the same machinery on the
  op table's calls). `kernel_capture.capture_launches` patches Triton's launch entry points
  process-wide for the duration of its block; it binds launches as upstream Triton 3.9 does for
  the CUDA and AMD targets and as triton-ascend 3.2 does for the NPU target (tests/ascend).

Counting launches (the fixed cost of a step on a device) is `specops.launch_count`, a module of its
own: the benchmarks count with it too, and the benchmarks import nothing of these tools.
"""
