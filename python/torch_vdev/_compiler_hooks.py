"""Registers vdev with TorchDynamo and Inductor when torch imports them.

Importing Dynamo and Inductor takes seconds, so importing vdev must not do it: vdev's
integrations (``_dynamo``, ``_inductor``) are registered right after the module of
torch that needs them has been imported, by a finder on ``sys.meta_path`` that wraps
that module's loader.
"""

import importlib.abc
import importlib.machinery
import sys
from typing import Callable, Dict


def _register_dynamo() -> None:
    from . import _dynamo

    _dynamo.register()


def _register_fake_convolution() -> None:
    from . import _fake

    _fake.register()


def _register_inductor() -> None:
    from . import _inductor

    _inductor.register()


# torch module -> what to register once it is imported. Dynamo looks device interfaces
# up in device_interface; FakeTensor's rules for operators are in fake_impls; every
# Inductor compilation (torch.compile, cpp_wrapper, AOTInductor) goes through
# compile_fx before it generates code.
_REGISTRATIONS: Dict[str, Callable[[], None]] = {
    "torch._dynamo.device_interface": _register_dynamo,
    "torch._subclasses.fake_impls": _register_fake_convolution,
    "torch._inductor.compile_fx": _register_inductor,
}


class _RegisteringLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader, register: Callable[[], None]):
        self.loader = loader
        self.register = register

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        self.register()


class _RegisteringFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        register = _REGISTRATIONS.get(fullname)
        if register is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _RegisteringLoader(spec.loader, register)
        return spec


def install() -> None:
    """Registers the integrations whose torch module is imported already, and the
    others when it will be."""
    for name, register in _REGISTRATIONS.items():
        if name in sys.modules:
            register()
    sys.meta_path.insert(0, _RegisteringFinder())
