"""The GUI toolkits' fixtures of the bridge tests: a private Xvfb display and a Tk root on it,
the Tk main loop run until a condition, and a Qt core application (offscreen)."""

from __future__ import annotations

import os
import select
import shutil
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.sdk_helpers import WAIT


@pytest.fixture(scope="session")
def display() -> Iterator[str]:
    """A private Xvfb display, ready once it wrote its number (``-displayfd``): one for the whole
    run, as the Tk roots on it live to the end (see ``_TK_ROOTS``), and Tk ends the process when
    its display goes away under it."""
    xvfb = shutil.which("Xvfb")
    if xvfb is None:
        pytest.skip("no virtual display: install xvfb (Debian package) to run the Tk tests")
    read_end, write_end = os.pipe()
    server = subprocess.Popen(
        [xvfb, "-displayfd", str(write_end), "-nolisten", "tcp", "-screen", "0", "640x480x24"],
        pass_fds=(write_end,),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], WAIT)
        number = os.read(read_end, 64).decode().strip() if ready else ""
        if not number:
            pytest.skip("Xvfb did not report a display")
        yield f":{number}"
    finally:
        os.close(read_end)
        server.terminate()
        server.wait(WAIT)


#: Every root the tests made, kept to the end: Tk objects live in reference cycles, and Tcl
#: aborts the process when the garbage collector frees one on another thread (a later test's
#: library thread, say); at exit they are freed on the main thread.
_TK_ROOTS: list[Any] = []


@pytest.fixture
def tk_root(display: str) -> Iterator[Any]:
    tkinter = pytest.importorskip("tkinter", reason="this Python has no tkinter")
    root = tkinter.Tk(screenName=display)
    _TK_ROOTS.append(root)
    root.withdraw()
    yield root
    try:
        root.destroy()
    except tkinter.TclError:
        pass  # the test destroyed it


def run_tk(root: Any, until: Callable[[], bool], then: Callable[[], None]) -> None:
    """Run ``root``'s main loop: ``then`` starts once it runs; it quits once ``until()`` or after WAIT."""
    guard = root.after(int(WAIT * 1000), root.quit)

    def check() -> None:
        if until():
            root.quit()
        else:
            root.after(10, check)

    root.after_idle(then)
    root.after(10, check)
    root.mainloop()
    root.after_cancel(guard)


@pytest.fixture
def qt_app(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    qtcore = pytest.importorskip("PySide6.QtCore", reason="PySide6 is not installed (pip install PySide6-Essentials)")
    return qtcore.QCoreApplication.instance() or qtcore.QCoreApplication([])
