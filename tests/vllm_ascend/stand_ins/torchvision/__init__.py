"""A stand-in for torchvision (tests/vllm_ascend/npu_stand_ins.py): its wheels are built for
CUDA torch, and vllm-ascend's worker patches import vision models (Qwen-VL's image
processors) that only name it at import. Every `torchvision.*` module is an empty one whose
attributes are inert; nothing the drivers run calls into it."""

import importlib.abc
import importlib.util
import sys
import types


class _Inert:
    def __init__(self, name):
        self._name = name

    def __getattr__(self, attribute):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return _Inert(f"{self._name}.{attribute}")

    def __call__(self, *args, **kwargs):
        return _Inert(f"{self._name}()")

    def __mro_entries__(self, bases):
        return (object,)


def _module_getattr(prefix):
    def getattr_(name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert(f"{prefix}.{name}")
    return getattr_


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name.startswith(__name__ + "."):
            return importlib.util.spec_from_loader(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = _module_getattr(spec.name)
        return module

    def exec_module(self, module):
        pass


__version__ = "0.0.0+stand.in"
__getattr__ = _module_getattr(__name__)
sys.meta_path.append(_Finder())
