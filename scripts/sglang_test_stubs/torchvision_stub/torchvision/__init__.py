"""TEST ENVIRONMENT ONLY: import stub for ``torchvision`` (see ../pyproject.toml).

SGLang 0.5.23 imports ``torchvision.transforms`` at module level in ``sglang.srt.configs``
(DeepSeek-OCR config), and transformers then imports its torchvision-backed image utilities;
the text-only paths exercised by PBKV's tests never call them. Every ``torchvision.*`` name
imports (see ``_missing``); using one raises ImportError saying why.
"""

from torchvision import _missing

__version__ = "0.0.0+pbkv.test.stub"
__pbkv_test_stub__ = True

_missing.install()


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    return _missing.placeholder(f"torchvision.{name}")
