"""The engine launchers find the checkout's own engine environments (``.venv-sglang``, ``.venv-vllm``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pbkv_server.backends import engine_env
from pbkv_server.backends.sglang.launch import sglang_python

REPO = Path(__file__).resolve().parents[3]


def test_the_checkout_root_is_the_folder_with_pyproject():
    # the SGLang launcher once looked under pbkv_server/ and never found .venv-sglang
    assert engine_env.CHECKOUT_ROOT == REPO and (REPO / "pyproject.toml").is_file()


def test_the_launcher_takes_the_env_var_then_the_checkout_venv_then_itself(tmp_path, monkeypatch):
    monkeypatch.setattr(engine_env, "CHECKOUT_ROOT", tmp_path)
    monkeypatch.delenv("PBKV_SGLANG_PYTHON", raising=False)
    assert sglang_python() == sys.executable
    python = tmp_path / ".venv-sglang" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    assert sglang_python() == str(python)
    monkeypatch.setenv("PBKV_SGLANG_PYTHON", "/opt/sglang/bin/python")
    assert sglang_python() == "/opt/sglang/bin/python"


def test_a_missing_engine_is_one_line_with_the_fix():
    with pytest.raises(engine_env.EngineMissing, match=r"no_such_engine_pkg is not installed for .*; run "
                       r"scripts/setup_x\.sh \(creates \.venv-x\) or set PBKV_X_PYTHON"):
        engine_env.check_engine_installed(sys.executable, "no_such_engine_pkg", "scripts/setup_x.sh", ".venv-x",
                                          "PBKV_X_PYTHON", "X")
