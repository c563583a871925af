"""Timing and reporting shared by every benchmark entry.

Implementations of one case are timed in interleaved samples (a sample of each, then the next
round), so machine noise hits them alike and their ratios stay meaningful on a busy host.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable

import torch

from specops.launch_count import count_launches

@dataclasses.dataclass
class Case:
    """One benchmark point: an op at one shape, run by several implementations."""

    op: str
    label: str  # the shape, e.g. "R=256 q=4 W=4"
    batch_size: int  # requests, for plots
    num_tokens: int
    impls: dict[str, Callable[[], object]]
    subject: str = "specops"  # the implementation whose speedups are reported
    baselines: tuple[str, ...] = ("numpy", "torch-eager")  # speedup = baseline / subject
    floors: tuple[str, ...] = ()  # cost floors, reported as subject / floor
    extras: dict[str, float] = dataclasses.field(default_factory=dict)  # e.g. a balance figure
    family: str = ""  # cases of one family form one line of the plot (e.g. "W=4", "prefill")
    # Implementations measured for reference but not specops' code: reported, never judged by --compare.
    references: tuple[str, ...] = ()
    # Figures computed from this run's medians (impl -> µs), added to extras after timing.
    derive: Callable[[dict[str, float]], dict[str, float]] | None = None
    # (a, b) pairs whose difference a - b derive needs, passed to it under "a - b": on the host
    # the median over adjacent single calls of the two (time_paired), on a device the
    # difference of their medians.
    paired: tuple[tuple[str, str], ...] = ()
    plotted: tuple[str, ...] | None = None  # implementations drawn in the plot (default: all)
    # The host clock: wall time, or a thread's CPU time (time.thread_time) for host-only cases whose
    # figures are small differences that other processes' preemption on a shared host would swamp.
    clock: Callable[[], float] = time.perf_counter

    def role(self, impl: str) -> str:
        """"baseline" (what specops is compared with), "floor" (a cost floor or other reference
        point) or "specops" (specops' own code: the rows --compare judges)."""
        if impl in self.baselines:
            return "baseline"
        if impl in self.floors or impl in self.references:
            return "floor"
        return "specops"


def goal_figure(name: str, value: float, goal: float, *, at_least: bool = False) -> tuple[str, float]:
    """A figure of a performance contract as an extras entry: its name with the goal and whether
    this run met it ("met" / "NOT MET"), and its value. at_least: the goal is a lower bound (a
    speedup), else an upper bound (a cost ratio)."""
    met = value >= goal if at_least else value <= goal
    return f"{name} [goal {'>=' if at_least else '<='} {goal}: {'met' if met else 'NOT MET'}]", value


def empty_op_call(device: torch.device):
    """The cost floor of one dispatcher call: an aten op on an empty tensor."""
    empty = torch.empty(0, dtype=torch.int64, device=device)
    return lambda: torch.ops.aten.fill_.Scalar(empty, 0)


@dataclasses.dataclass
class Measurement:
    op: str
    label: str
    family: str
    impl: str
    batch_size: int
    num_tokens: int
    median_us: float
    p20_us: float
    p80_us: float
    plotted: bool = True
    role: str = "specops"  # Case.role(impl)
    subject: str = "specops"  # the case's subject: the implementation its speedups are of
    # Ops one call launches (specops.launch_count): specops ops, and aten ops that are not views.
    specops_launches: int = 0
    aten_launches: int = 0


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def _calls_per_sample(fn: Callable[[], object], sample_seconds: float, clock: Callable[[], float]) -> int:
    calls = 1
    while True:
        start = clock()
        for _ in range(calls):
            fn()
        elapsed = clock() - start
        if elapsed >= sample_seconds / 4 or calls >= 1 << 20:
            return max(1, int(calls * sample_seconds / max(elapsed, 1e-9)))
        calls *= 4


def time_host(impls: dict[str, Callable[[], object]], samples: int, sample_seconds: float,
              clock: Callable[[], float] = time.perf_counter) -> dict[str, list[float]]:
    """Per-call microseconds of each implementation, one value per sample."""
    for fn in impls.values():
        fn()  # warm up: first-call compilation and caches
    calls = {name: _calls_per_sample(fn, sample_seconds, clock) for name, fn in impls.items()}
    times: dict[str, list[float]] = {name: [] for name in impls}
    for _ in range(samples):
        for name, fn in impls.items():
            start = clock()
            for _ in range(calls[name]):
                fn()
            times[name].append((clock() - start) / calls[name] * 1e6)
    return times


def time_paired(minuend: Callable[[], object], subtrahend: Callable[[], object], rounds: int,
                clock: Callable[[], float] = time.perf_counter) -> float:
    """The median over `rounds` rounds of one minuend call's microseconds minus one subtrahend
    call's, the two timed one after the other, in the order a b, b a, a b, ...: a difference of a
    few µs between steps whose samples spread by tens resolves, since a load that changes slower
    than two calls hits both alike (and the order alternates, so a drift within a round cancels).
    The clock read around each call (under a µs) is on both sides."""
    minuend()
    subtrahend()
    differences = []
    for index in range(rounds):
        if index % 2:
            start = clock()
            subtrahend()
            middle = clock()
            minuend()
            differences.append((clock() - middle) - (middle - start))
        else:
            start = clock()
            minuend()
            middle = clock()
            subtrahend()
            differences.append((middle - start) - (clock() - middle))
    return statistics.median(differences) * 1e6


def time_device(impls: dict[str, Callable[[], object]], samples: int) -> dict[str, list[float]]:
    """Device implementations through triton.testing.do_bench (kernel time, synchronized)."""
    import triton.testing

    times = {}
    for name, fn in impls.items():
        median, p20, p80 = triton.testing.do_bench(fn, quantiles=[0.5, 0.2, 0.8], warmup=5, rep=max(10, samples * 2))
        times[name] = [p20 * 1e3, median * 1e3, p80 * 1e3]
    return times


def run_case(case: Case, *, samples: int, sample_seconds: float, device: torch.device) -> list[Measurement]:
    if device.type == "cpu":
        times = time_host(case.impls, samples, sample_seconds, case.clock)
    else:
        times = time_device(case.impls, samples)
    if case.derive is not None:
        medians = {name: statistics.median(values) for name, values in times.items()}
        for minuend, subtrahend in case.paired:
            if device.type == "cpu":
                # As many call pairs as half the case's samples of the two take (at least 100).
                budget = samples * sample_seconds * 1e6 / 2 / (medians[minuend] + medians[subtrahend])
                difference = time_paired(case.impls[minuend], case.impls[subtrahend], max(100, int(budget)),
                                         case.clock)
            else:
                difference = medians[minuend] - medians[subtrahend]
            medians[f"{minuend} - {subtrahend}"] = difference
        case.extras.update(case.derive(medians))
    # Counted after timing, on one more call: the counter's Python hook never runs inside a timed loop.
    # On a device, ops on host tensors only (the runner's *_cpu copies) are host work, not launches.
    counts = {name: count_launches(fn, None if device.type == "cpu" else device.type)
              for name, fn in case.impls.items()}
    return [
        Measurement(case.op, case.label, case.family, name, case.batch_size, case.num_tokens,
                    statistics.median(values), _percentile(values, 0.2), _percentile(values, 0.8),
                    plotted=case.plotted is None or name in case.plotted, role=case.role(name), subject=case.subject,
                    specops_launches=counts[name].specops, aten_launches=counts[name].aten)
        for name, values in times.items()
    ]
