"""Python in a child process that imports this worktree's copy first: a script, or a test file
run again with ``httpx2`` hidden (``tests/hide_httpx2.py`` loaded as a pytest plugin before
anything imports it, as on a machine without the MCP SDK)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_python(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` from the worktree root, to its end; its status and text output."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def rerun_with_httpx2_hidden(test_file: str) -> subprocess.CompletedProcess[str]:
    """Every test of ``test_file`` but the ones naming ``httpx2_hidden`` (this one), again in a
    child whose ``import httpx2`` fails (authlib's fallback)."""
    plugins = ["-p", "no:cacheprovider", "-p", "tests.hide_httpx2"]
    return run_python("-m", "pytest", "-q", *plugins, test_file, "-k", "not httpx2_hidden", timeout=600)
