"""The stubs (`__init__.pyi`, `_native.pyi`) against the installed module: mypy's stubtest
reports every name, parameter or default that differs, so the stubs cannot drift."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT


def test_the_stubs_match_the_module(tmp_path):
    try:
        import mypy.stubtest  # noqa: F401
    except ImportError:
        message = "mypy is not installed (.ci/python installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    p = subprocess.run(
        [
            sys.executable, "-m", "mypy.stubtest", "symshard",
            "--mypy-config-file", str(ROOT / "python" / "pyproject.toml"),
            "--concise",
        ],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
    )
    assert p.returncode == 0, p.stdout + p.stderr
