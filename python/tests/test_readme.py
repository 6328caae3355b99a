"""The README's Python block runs as written (a doctest of the documentation)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Dict, Set

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


def _extras(command: str) -> Set[str]:
    """The extras a `pip install "./python[a,b]"` command names (empty without brackets)."""
    m = re.search(r"""pip"?\s+install\b[^\n]*?["']?\./python(?:\[([^\]]*)\])?""", command)
    assert m, f"no `pip install ./python` in {command!r}"
    return {e.strip() for e in (m.group(1) or "").split(",") if e.strip()}


def _pyproject_extras() -> Dict[str, Set[str]]:
    # No tomllib before Python 3.11: the table is read line by line (`name = ["a", "b"]`).
    text = (ROOT / "python" / "pyproject.toml").read_text(encoding="utf-8")
    table = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    return {
        m.group(1): set(re.findall(r'"([^"]+)"', m.group(2)))
        for m in re.finditer(r"^(\w+)\s*=\s*\[(.*)\]\s*$", table, flags=re.M)
    }


def test_the_readme_install_command_installs_what_its_python_block_needs() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Python and the HTML report", 1)[1]
    install = re.search(r"```sh\n(.*?)```", section, flags=re.S)
    assert install, "no ```sh block in the README's Python section"
    extras = _extras(install.group(1))
    declared = _pyproject_extras()
    assert extras <= declared.keys(), f"the README names extras pyproject lacks: {extras - declared.keys()}"
    installed: Set[str] = set().union(*(declared[e] for e in extras))
    code = _python_block()
    needs = {
        "pandas": "to_pandas()" in code,
        "sympy": ".sympy()" in code,
        "transformers": re.search(r"^\s*(import|from) transformers\b", code, flags=re.M) is not None,
    }
    for package, needed in needs.items():
        if needed:
            assert package in installed, (
                f"the README's block needs {package}; `{install.group(1).strip()}` does not install it"
            )
    # CI installs through the same extras, not a list of its own.
    ci = (ROOT / ".ci" / "python").read_text(encoding="utf-8")
    ci_lines = [
        line
        for line in ci.splitlines()
        if not line.lstrip().startswith("#") and "install" in line and "./python" in line
    ]
    assert ci_lines, ".ci/python does not install ./python"
    assert any(extras <= _extras(line) for line in ci_lines), (
        f".ci/python does not install the README's extras {sorted(extras)}"
    )
