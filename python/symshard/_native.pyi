"""The native half of the package: the symshard library, compiled."""

from typing import List

__all__ = ["NativeError", "run_json", "version"]

class NativeError(Exception):
    """A symshard error; ``args`` is ``(message, exit_code)``."""

def run_json(args: List[str]) -> List[str]:
    """Run ``symshard ARGS...`` (with ``--format json`` where the command takes it) and return
    the JSON documents it prints."""

def version() -> str:
    """The library's version."""
