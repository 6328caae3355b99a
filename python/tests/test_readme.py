"""The README's Python block runs as written (a doctest of the documentation)."""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _python_block() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README.md has no ```python block"
    return blocks[0]


def test_the_readme_python_block_runs_as_written(tmp_path: Path) -> None:
    code = _python_block()
    cwd = os.getcwd()
    os.chdir(tmp_path)  # report() writes report.html where it runs
    try:
        exec(compile(code, "README.md", "exec"), {})
    finally:
        os.chdir(cwd)
    assert (tmp_path / "report.html").stat().st_size > 0
