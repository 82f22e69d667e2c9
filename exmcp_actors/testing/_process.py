"""Server processes for tests and benchmarks: learn the port a child listens on, stop it.

A peer started as a child process prints ``LISTENING <port>`` on stdout once it
accepts connections. Both waits here are bounded, and stopping always ends with
the child reaped.
"""

from __future__ import annotations

import signal
import subprocess
import threading

#: The line a listening peer prints, followed by its port.
LISTENING = "LISTENING "


def wait_for_listening(proc: subprocess.Popen[bytes], timeout: float) -> int | None:
    """The port from the child's ``LISTENING <port>`` line; None on EOF or after ``timeout``.

    The child's stdout is read on a helper thread, so the wait itself is bounded.
    """
    stdout = proc.stdout
    assert stdout is not None, "start the child with stdout=subprocess.PIPE"
    found: list[int] = []
    done = threading.Event()

    def read() -> None:
        try:
            for raw in stdout:
                line = raw.decode("utf-8", "replace").strip()
                if line.startswith(LISTENING):
                    found.append(int(line.split()[1]))
                    return
        except (ValueError, OSError):
            pass
        finally:
            done.set()

    threading.Thread(target=read, name="peer-listening-reader", daemon=True).start()
    done.wait(timeout)
    return found[0] if found else None


def stop_process(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM and wait; SIGKILL and wait if it has not exited within ``timeout`` seconds."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout)
