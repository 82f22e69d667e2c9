"""Every Python block of README.md and every script in examples/ runs, each with a bound.

Generic on purpose: a block or an example added later is picked up without editing this file.
Blocks run as they are written, with ``python`` on PATH meaning this interpreter and the
work tree importable. An example that needs a display runs under Xvfb when there is one.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_helpers import cli_env

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
BOUND = 60.0
#: Examples that are not run on their own: a server another example starts.
SERVED_BY = {"demo_server.py": "watch_resource.py"}
#: Examples that open a window: the arguments that make them close by themselves.
NEEDS_DISPLAY = {"desktop_tk.py": ["--seconds", "3"]}


def _python_blocks() -> list[tuple[int, str]]:
    text = README.read_text()
    return [
        (text[: m.start()].count("\n") + 1, m.group(1))
        for m in re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
    ]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """``python`` on PATH is this interpreter, and the work tree comes first on PYTHONPATH.

    A shim that execs the interpreter by its own path, not a symlink: CPython finds a virtual
    environment's ``pyvenv.cfg`` beside the path it was started from, so a symlink elsewhere
    would run the bare interpreter without the environment's packages.
    """
    bin_dir = tmp_path_factory.mktemp("bin")
    shim = bin_dir / "python"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    shim.chmod(0o755)
    environment = cli_env()
    environment["PATH"] = os.pathsep.join([str(bin_dir), environment.get("PATH", "")])
    return environment


def _run(argv: list[str], env: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=BOUND, stdin=subprocess.DEVNULL
    )


def test_readme_opens_with_the_demo_then_the_tests() -> None:
    first_block = re.search(r"```sh\n(.*?)```", README.read_text(), flags=re.S)
    assert first_block is not None
    assert first_block.group(1).splitlines() == [
        "pip install -e . && exmcp-watch --demo",
        "pip install -e '.[test]' && python -m pytest -q",
    ]


def test_readme_has_python_blocks() -> None:
    assert len(_python_blocks()) >= 3


@pytest.mark.parametrize(("line", "code"), _python_blocks(), ids=lambda v: f"line{v}" if isinstance(v, int) else "")
def test_readme_python_block_runs(line: int, code: str, env: dict[str, str], tmp_path: Path) -> None:
    script = tmp_path / f"readme_line{line}.py"
    script.write_text(code)
    done = _run([sys.executable, str(script)], env, cwd=tmp_path)
    assert done.returncode == 0, f"README block at line {line} failed:\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("example", [p for p in EXAMPLES if p.name not in SERVED_BY], ids=lambda p: p.name)
def test_example_runs(example: Path, env: dict[str, str]) -> None:
    argv = [sys.executable, str(example)]
    if example.name in NEEDS_DISPLAY:
        xvfb_run = shutil.which("xvfb-run")
        if xvfb_run is None:
            pytest.skip("no virtual display: install xvfb (Debian package) to run the window")
        argv = [xvfb_run, "-a", *argv, *NEEDS_DISPLAY[example.name]]
    done = _run(argv, env)
    assert done.returncode == 0, f"{example.name} failed:\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr


def test_every_served_example_is_run_by_another() -> None:
    for served, runner in SERVED_BY.items():
        assert (ROOT / "examples" / served).exists()
        assert served in (ROOT / "examples" / runner).read_text()
