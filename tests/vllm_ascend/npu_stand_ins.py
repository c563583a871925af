"""Stand-ins that let vllm-ascend's Python modules import and run on a CPU-only host.

vllm-ascend's own CPU unit tests do the same (its repository's tests/ut/conftest.py, when
`npu-smi` finds no NPU): a `torch_npu` module with `npu`, `profiler` and `_C` standing in,
`torch.npu`, and triton's device properties (`num_aicore`, `num_vectorcore`). Here the
stand-ins behave instead of recording calls (a MagicMock would silently turn a stream
context or an event into nothing that can be checked):

- `torch_npu` / `torch.npu`: one device, streams and events that complete at once (every
  tensor is already where the host reads it), `torch.npu.stream(s)` a context that does
  nothing. `torch_npu`'s dtypes hold the values vllm-ascend's tests give them.
- triton-ascend's device properties: vllm-ascend sizes grids by `num_aicore` /
  `num_vectorcore` (8 each, as its tests set them); its language extensions
  (`triton.language.extra.cann.extension`, `...cann.libdevice`) resolve to upstream Triton's
  names where one exists (upstream's interpreter runs the kernels, TRITON_INTERPRET=1).
- The CANN custom ops vllm-ascend calls through `torch.ops._C_ascend` (the DSA metadata ops)
  are specops' drop-ins for them (ascend_ops.py), registered under vllm-ascend's names.
- `acl`, `mooncake.engine`: empty modules with the names vllm-ascend imports; `torchvision`
  (stand_ins/, put on the path by the drivers): its wheels need CUDA torch, and vllm-ascend's
  worker patches import vision models that only name it at import.

None of them computes anything a kernel under test computes: the kernels are vllm-ascend's and
vLLM's own, run by Triton's interpreter, and the metadata ops are specops' ops, whose
conformance to the CANN kernels is tested on their own (tests/ops, the golden data).
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import types

_INSTALLED = False
NUM_AICORE = 8
NUM_VECTORCORE = 8


def _module(name: str, **attrs) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__spec__ = importlib.util.spec_from_loader(name, loader=None)
    module.__dict__.update(attrs)
    sys.modules[name] = module
    return module


class _Event:
    """An NPU event on a host where every launch has completed when it returns."""

    def __init__(self, *args, **kwargs):
        pass

    def record(self, stream=None):
        pass

    def synchronize(self):
        pass

    def wait(self, stream=None):
        pass

    def query(self) -> bool:
        return True


class _Stream:
    def __init__(self, *args, **kwargs):
        pass

    def wait_stream(self, other):
        pass

    def wait_event(self, event):
        pass

    def synchronize(self):
        pass


_DEFAULT_STREAM = _Stream()


class _Graph:
    """torch_npu's NPUGraph, as a type: the drivers never capture one."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError("no NPU graph capture on this host (the drivers run eagerly)")


class _Anything:
    """A namespace whose unknown attributes are inert callables (the profiler, the graph
    tooling, `_C`'s handles): vllm-ascend touches them at import, the drivers never call into
    them for results."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attribute):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        value = _Anything(f"{self._name}.{attribute}")
        setattr(self, attribute, value)
        return value

    def __call__(self, *args, **kwargs):
        return _Anything(f"{self._name}()")

    def __mro_entries__(self, bases):
        return (object,)


def _anything_but_dunders(prefix: str):
    def getattr_(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything(f"{prefix}.{name}")
    return getattr_


class _Namespace(types.SimpleNamespace):
    def __getattr__(self, attribute):  # only for names not set: NPU tooling touched at import
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return _Anything(f"torch.npu.{attribute}")


def _npu_namespace() -> _Namespace:
    @contextlib.contextmanager
    def stream(s=None):
        yield

    def graph(*args, **kwargs):
        raise RuntimeError("no NPU graph capture on this host (the drivers run eagerly)")

    return _Namespace(
        Event=_Event, Stream=_Stream, stream=stream, current_stream=lambda device=None: _DEFAULT_STREAM,
        default_stream=lambda device=None: _DEFAULT_STREAM, set_stream=lambda s: None, synchronize=lambda *a: None,
        current_device=lambda: 0, device_count=lambda: 1, is_available=lambda: False, set_device=lambda d: None,
        NPUGraph=_Graph, graph=graph, graph_pool_handle=lambda: None,
        mem_get_info=lambda *a: (1 << 34, 1 << 34), empty_cache=lambda: None,
        get_device_name=lambda *a: "Ascend910B1", get_device_properties=lambda *a: types.SimpleNamespace(
            name="Ascend910B1", total_memory=1 << 34, cube_core_num=24, vector_core_num=48),
        utils=_Anything("torch_npu.npu.utils"), config=_Anything("torch_npu.npu.config"),
        _lazy_init=lambda: None)


def _triton_device_properties() -> None:
    """triton-ascend's `driver.active.utils.get_device_properties` (vllm-ascend reads its core
    counts to size grids); the interpreter itself never asks the driver."""
    import triton.runtime

    class _Utils:
        @staticmethod
        def get_device_properties(device=None):
            return {"num_aicore": NUM_AICORE, "num_vectorcore": NUM_VECTORCORE, "num_aic": NUM_AICORE}

    class _Active:
        utils = _Utils()

        @staticmethod
        def get_current_device():
            return 0

    class _Driver:
        active = _Active()

        def set_active(self, driver):
            pass

        def reset_active(self):
            pass

    triton.runtime.driver = _Driver()


def _triton_ascend_language() -> None:
    """triton-ascend's language extensions under upstream Triton: the names vllm-ascend's
    kernels on the driven paths use, bound to upstream's where one exists."""
    import triton.language as tl

    extra = sys.modules.get("triton.language.extra") or importlib.import_module("triton.language.extra")
    cann = _module("triton.language.extra.cann")
    extension = _module("triton.language.extra.cann.extension")
    libdevice = _module("triton.language.extra.cann.libdevice")
    try:
        from triton.language.extra import libdevice as upstream_libdevice

        libdevice.__dict__.update({k: v for k, v in vars(upstream_libdevice).items() if not k.startswith("__")})
    except ImportError:
        pass
    cann.extension, cann.libdevice = extension, libdevice
    extra.cann = cann
    for name in ("gather", "cumsum", "flip"):
        if hasattr(tl, name):
            setattr(extension, name, getattr(tl, name))

    def missing(name: str):
        def unavailable(*args, **kwargs):
            raise RuntimeError(f"triton-ascend's {name} has no upstream counterpart: a kernel off the driven paths")
        unavailable.__name__ = name
        return unavailable

    # Resolved at import by vllm-ascend (ops/triton/triton_utils.py), used by kernels the drivers never launch.
    for name in ("insert_slice", "extract_slice", "get_element"):
        setattr(extension, name, missing(name))


def install() -> None:
    """Installs every stand-in (idempotent); call before anything imports vllm_ascend."""
    global _INSTALLED
    if _INSTALLED:
        return
    _INSTALLED = True
    import torch

    npu = _npu_namespace()
    c_module = _module("torch_npu._C", _NPUTaskGroupHandle=object)
    c_module.__getattr__ = _anything_but_dunders("torch_npu._C")
    _module("torch_npu._C._distributed_c10d").__getattr__ = _anything_but_dunders("torch_npu._C._distributed_c10d")
    c_module._distributed_c10d = sys.modules["torch_npu._C._distributed_c10d"]
    torch_npu = _module(
        "torch_npu", npu=npu, profiler=_Anything("torch_npu.profiler"), _C=c_module, __path__=[],
        npu_format_cast=lambda weight, fmt: weight, float4_e2m1fn_x2=296, hifloat8=290, float8_e8m0fnu=293,
        __version__="2.13.0")
    torch_npu.__getattr__ = _anything_but_dunders("torch_npu")  # CANN ops nobody runs here
    _module("torch_npu._inductor")
    _module("torch_npu.contrib", transfer_to_npu=None)
    _module("torch_npu.npu", **vars(npu))
    try:
        torch.utils.rename_privateuse1_backend("npu")
    except RuntimeError:
        pass
    torch.npu = npu
    torch.version.cann = None
    torch.distributed.is_hccl_available = lambda: True
    acl_rt = _module("acl.rt", memcpy=lambda *a, **k: None)
    _module("acl", rt=acl_rt)
    _module("mooncake")
    _module("mooncake.engine", TransferEngine=object)
    _triton_device_properties()
    _triton_ascend_language()
