"""Shared fixtures: the symshard command line, to compare the package against."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any, List

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


def _binary() -> Path:
    env = os.environ.get("SYMSHARD_BIN")
    if env:
        return Path(env)
    built = [p for p in (ROOT / "target" / d / "symshard" for d in ("release", "debug")) if p.is_file()]
    if built:
        return max(built, key=lambda p: p.stat().st_mtime)
    pytest.fail(
        "the symshard command line is not built: run `cargo build` at the repository root "
        "(or set SYMSHARD_BIN)"
    )


class Cli:
    """Runs the command line."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def run(self, *args: str, cwd: Any = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.path), *args], capture_output=True, text=True, cwd=cwd, timeout=600
        )

    def json(self, *args: str) -> Any:
        p = self.run(*args, "--format", "json")
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    def error(self, *args: str) -> tuple:
        """(message, exit code) of a failing command, as the package reports it."""
        p = self.run(*args)
        assert p.returncode != 0, p.stdout
        lines: List[str] = [l for l in p.stderr.splitlines() if l.startswith("error: ")]
        assert lines, p.stderr
        return lines[-1][len("error: ") :], p.returncode


@pytest.fixture(scope="session")
def cli() -> Cli:
    return Cli(_binary())
