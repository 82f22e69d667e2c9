"""Installing the pinned peers of the suite, each in a folder of its own under the
repository (ignored by git): npm packages under an npm prefix, Python packages in a
virtualenv. Each install runs once and is skipped while what is there matches the pins.

A lock file beside the folder keeps two processes (``.ci/run`` and a test run, or two
test runs) from installing into it at once.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import sys
import venv
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def install_main(missing_tools: Callable[[], str | None], install: Callable[[], Path]) -> None:
    """What ``python tests/peers/<peer>.py`` does (``.ci/run`` runs each): install the peer and
    print where it is, or say why it cannot be installed here and exit 0 (its tests skip)."""
    why = missing_tools()
    if why is not None:
        print(f"skipping: {why}", file=sys.stderr)
        sys.exit(0)
    print(install())


def script_argv(head: Sequence[str], transport: str, port: int | None) -> list[str]:
    """The command line of a peer script that takes ``--transport`` (and ``--port`` for HTTP):
    ``head`` (its runtime, the script and what comes before the options) with those options."""
    argv = [*head, "--transport", transport]
    return argv if port is None else [*argv, "--port", str(port)]


def missing_node() -> str | None:
    """Why npm peers cannot run here (no node or npm), else None."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    lock = folder.with_name(folder.name + ".lock")
    with open(lock, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def npm_version(prefix: Path, package: str) -> str | None:
    """The version of ``package`` installed under ``prefix``, or None."""
    manifest = prefix / "node_modules" / package / "package.json"
    try:
        version = json.loads(manifest.read_text(encoding="utf-8")).get("version")
    except (OSError, ValueError):
        return None
    return version if isinstance(version, str) else None


def npm_install(prefix: Path, pins: Mapping[str, str], timeout: float = 600.0) -> None:
    """Install every pinned package under ``prefix`` unless all are there at their pins."""

    def current() -> bool:
        return all(npm_version(prefix, name) == version for name, version in pins.items())

    if current():
        return
    prefix.mkdir(exist_ok=True)
    with _locked(prefix):
        if current():
            return
        specs = [f"{name}@{version}" for name, version in pins.items()]
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--save-exact", "--prefix", str(prefix), *specs],
            check=True,
            timeout=timeout,
            stdout=subprocess.DEVNULL,
        )


def missing_venv() -> str | None:
    """Why a virtualenv with pip cannot be made here, else None."""
    try:
        import ensurepip  # noqa: F401  (only asked whether it exists)
    except ImportError:
        return f"{sys.executable} has no ensurepip, so a virtualenv would have no pip"
    return None


def venv_python(folder: Path) -> Path:
    return folder / "bin" / "python"


def venv_install(folder: Path, requirements: Path, check: str, timeout: float = 900.0) -> Path:
    """A virtualenv at ``folder`` holding exactly ``requirements`` (every pin, installed with
    ``--no-deps``, so pins that their own metadata calls incompatible go in together);
    ``check`` is Python code that must run in it. Returns its interpreter."""
    wanted = requirements.read_text(encoding="utf-8")
    stamp = folder / "exmcp-requirements.txt"
    python = venv_python(folder)

    def current() -> bool:
        try:
            return python.exists() and stamp.read_text(encoding="utf-8") == wanted
        except OSError:
            return False

    if current():
        return python
    folder.parent.mkdir(parents=True, exist_ok=True)
    with _locked(folder):
        if current():
            return python
        venv.EnvBuilder(clear=True, with_pip=True).create(folder)
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps"]
        done = subprocess.run(
            [*pip, "-r", str(requirements)],
            check=False,
            timeout=timeout,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        if done.returncode != 0:
            raise RuntimeError(f"pip could not install {requirements.name}:\n{done.stdout.decode(errors='replace')}")
        subprocess.run([str(python), "-c", check], check=True, timeout=120)
        stamp.write_text(wanted, encoding="utf-8")
    return python
