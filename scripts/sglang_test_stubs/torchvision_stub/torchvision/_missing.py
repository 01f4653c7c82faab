"""Placeholders that fail only when used (TEST ENVIRONMENT ONLY, see ../pyproject.toml).

Importers such as SGLang's DeepSeek-OCR config and transformers' image utilities do
``from torchvision.transforms.functional import pil_to_tensor`` (or subclass, or read
``InterpolationMode.BICUBIC``) at module level, so every dotted name below ``torchvision`` must
import. :class:`_StubFinder` creates any ``torchvision.*`` submodule on demand; each attribute is a
placeholder class: subclassing it and reading its attributes work, calling or instantiating it
raises ImportError with the reason.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

REASON = (
    "is unavailable: this is PBKV's test-only torchvision stub (scripts/sglang_test_stubs/torchvision_stub); "
    "install a real torchvision to use vision models"
)


class _PlaceholderMeta(type):
    """Metaclass: attribute reads give nested placeholders; calling raises ImportError."""

    def __getattr__(cls, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return placeholder(f"{cls.__qualname__}.{name}")

    def __call__(cls, *args, **kwargs):
        raise ImportError(f"{cls.__qualname__} {REASON}")


def placeholder(qualname: str) -> type:
    """A placeholder class named ``qualname`` (see the module docstring)."""
    return _PlaceholderMeta(qualname.rsplit(".", 1)[-1], (), {"__qualname__": qualname})


class StubModule(types.ModuleType):
    """A ``torchvision.*`` module whose every public attribute is a placeholder."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        value = placeholder(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec):
        module = StubModule(spec.name)
        module.__path__ = []  # a package, so deeper submodules resolve through the finder too
        return module

    def exec_module(self, module) -> None:
        return None


class _StubFinder(importlib.abc.MetaPathFinder):
    """Finds every ``torchvision.<anything>`` submodule and makes it a :class:`StubModule`."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)
        return None


def install() -> None:
    """Register the finder once (idempotent)."""
    if not any(isinstance(f, _StubFinder) for f in sys.meta_path):
        sys.meta_path.append(_StubFinder())
