"""specops as a vLLM general plugin (entry point group `vllm.general_plugins`; docs/integrations.md).

Installing specops changes nothing: the plugin is off unless SPECOPS_VLLM is set ("1" for every
point the installed release serves, or a comma list of point names; _switch.py has the grammar).
vLLM calls `register()` in every process it starts (front end, engine core, each worker); it
never raises: vLLM does not guard plugin functions, and a raise would kill every worker.

What it patches comes from the release table (_releases.py): the row for exactly the runner
packages installed and their versions. No row: nothing is patched, and one warning names the
version found and the supported ones. Within the row each point switched on stands alone: it is
patched when every one of its targets has the fingerprint the row records (_guard.py) and every
point it needs is patched; otherwise it is skipped with one warning naming the point and its first
differing target, and the other points still patch.

Functions are rebound in the module that defines them and in every loaded module of the runner
packages that imported them by name; methods are patched on the classes that define them, so
subclasses (vllm-ascend's among them) inherit them. `status()` says which points are active in
this process and why the others are not; `python -m specops` prints the same for a process
started with the current environment.
"""

from __future__ import annotations

import dataclasses
import logging

from specops.integrations.vllm import _switch

logger = logging.getLogger(__name__)

# Every point any release row serves, in the order they are listed and installed.
POINT_NAMES = ("request_state", "input_ids", "sampled_counts", "post_update", "dcp_local_seq_lens", "block_tables",
               "draft_steps", "target_step", "update_prefill", "pcp", "v1_eagle", "dsa_cp_draft")


@dataclasses.dataclass
class Status:
    active: bool = False
    points: tuple[str, ...] = ()  # the points patched
    reason: str = "register() has not run in this process"
    release: str = ""  # the row that applied ("" when none did)
    states: tuple = ()  # one _frame.PointState per point name


_STATUS = Status()


def status() -> Status:
    return _STATUS


def _release_table():
    from specops.integrations.vllm._releases import RELEASES

    return RELEASES


def evaluate(environ: dict | None = None, releases=None) -> tuple[Status, list[str]]:
    """What the plugin would do in a process started with `environ`, without patching anything:
    the status it would reach before installing, and the warnings it would log."""
    from specops.integrations.vllm import _frame

    selection = _switch.selected_points(POINT_NAMES, environ)
    if selection.problem is not None:
        return Status(False, (), selection.problem), [selection.problem]
    if not selection.points:
        return Status(False, (), selection.reason, states=tuple(
            _frame.PointState(n, "off", "not switched on") for n in POINT_NAMES)), []
    releases = _release_table() if releases is None else releases
    try:
        release = _frame.release_for(releases)
    except _frame.Unsupported as unsupported:
        reason = f"patched nothing: {unsupported}"
        return Status(False, (), reason), [reason]
    except ImportError as exc:
        reason = f"patched nothing: the runner cannot be imported ({exc})"
        return Status(False, (), reason), [reason]
    states = _frame.plan(release, POINT_NAMES, selection.points, selection.every)
    return _summary(release, states, selection.reason, "to patch"), [s.reason for s in states if s.state == "skipped" and s.warn]


def _summary(release, states, why: str, verb: str) -> Status:
    active = tuple(s.name for s in states if s.state == "active")
    skipped = [s.name for s in states if s.state == "skipped"]
    reason = f"{release}: {len(active)} point{'s' if len(active) != 1 else ''} {verb} ({why})"
    if skipped:
        reason += f"; skipped: {', '.join(skipped)}"
    return Status(bool(active), active, reason, str(release), tuple(states))


def apply(environ: dict | None = None, releases=None) -> Status:
    """Evaluates and installs; logs one warning for each thing it did not do. Raises nothing it
    can catch."""
    try:
        state, warnings = evaluate(environ, releases)
        for warning in warnings:
            logger.warning("specops: %s", warning)
        if not state.active:
            return state
        from specops.integrations.vllm import _frame

        releases = _release_table() if releases is None else releases
        release = next(r for r in releases if str(r) == state.release)
        states, where = _frame.install(release, list(state.states))
        for before, after in zip(state.states, states):
            if before.state == "active" and after.state != "active":
                logger.warning("specops: %s", after.reason)
        selection = _switch.selected_points(POINT_NAMES, environ)
        state = _summary(release, states, f"{selection.reason}; {sum(map(len, where.values()))} targets", "patched")
        if state.active:
            logger.info("specops: active (%s)", ", ".join(state.points))
        return state
    except Exception as exc:  # never into vLLM
        reason = f"patched nothing: {type(exc).__name__}: {exc}"
        logger.warning("specops: %s", reason)
        return Status(False, (), reason)


def activate(environ: dict | None = None) -> Status:
    """Checks and installs once in this process; returns the status."""
    global _STATUS
    if not _STATUS.active:
        try:
            waiting = _ascend_gate(environ)
        except Exception as exc:  # never into vLLM
            waiting = Status(False, (), f"patched nothing: {type(exc).__name__}: {exc}")
        _STATUS = waiting if waiting is not None else apply(environ)
    return _STATUS


def _ascend_gate(environ: dict | None) -> Status | None:
    """Where vllm-ascend is installed, the Ascend row applies only on its platform, and after its
    worker patches: vLLM loads the general plugins in a worker before `NPUWorker.__init__` calls
    `adapt_patch()`, whose patches rebind names the Ascend points target. Before them this hooks
    `adapt_patch` to activate right after it and says so; off vllm-ascend's platform it patches
    nothing. None: go on (no vllm-ascend, the switch off, or the patches applied)."""
    import importlib.util
    import sys

    if importlib.util.find_spec("vllm_ascend") is None or not _switch.selected_points(POINT_NAMES, environ).points:
        return None
    from vllm.platforms import current_platform

    if not type(current_platform).__module__.startswith("vllm_ascend"):
        reason = "patched nothing: vllm-ascend is installed but its platform is not the one in use"
        logger.warning("specops: %s", reason)
        return Status(False, (), reason)
    if "vllm_ascend.patch.worker" in sys.modules:
        return None
    import functools

    import vllm_ascend.utils

    original = vllm_ascend.utils.adapt_patch
    if not getattr(original, "__specops_hook__", False):
        @functools.wraps(original)
        def adapt_patch(is_global_patch: bool = False):
            result = original(is_global_patch)
            if not is_global_patch:
                vllm_ascend.utils.adapt_patch = original
                try:
                    activate(environ)
                except Exception:  # never into vllm-ascend
                    pass
            return result

        adapt_patch.__specops_hook__ = True
        vllm_ascend.utils.adapt_patch = adapt_patch
    return Status(False, (), "waiting for vllm-ascend's worker patches (the plugin patches after them)")


def diagnose(environ: dict | None = None) -> str:
    """Whether the plugin would be active in a vLLM process started with this environment, and
    each point's state with its reason; installs nothing (`python -m specops` prints it)."""
    if _STATUS.active:
        return f"active in this process: {_STATUS.reason}\n" + _point_lines(_STATUS.states)
    try:
        import importlib.util

        if importlib.util.find_spec("vllm") is None:
            return "inactive: vLLM is not installed"
        state, _ = evaluate(environ)
        if not state.active:
            head = f"inactive: {state.reason}"
        else:
            head = f"would be active: {state.reason}"
        return head + ("\n" + _point_lines(state.states) if state.states else "")
    except Exception as exc:
        return f"inactive: {type(exc).__name__}: {exc}"


def _point_lines(states) -> str:
    width = max(len(s.name) for s in states)
    return "\n".join(f"{s.name:<{width}}  {s.state}" + (f": {s.reason}" if s.state == "skipped" else "")
                     for s in states)


def register() -> None:
    """vLLM's entry point (vllm.general_plugins)."""
    try:
        activate()
    except Exception:  # a plugin must never raise into vLLM
        pass
