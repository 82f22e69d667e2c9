"""Starting the library's daemon threads where the interpreter may refuse one.

Python 3.12.0 and 3.12.1 start no thread from the interpreter's exit hooks on (later
versions wait for the host's own threads to end first), and clients are closed from those
hooks (see ``_api/_shutdown``); an exhausted system refuses one too. Each caller says what it
does instead: runs the work itself, answers with an error, or leaves it to a thread started
later.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def start_daemon(target: Callable[..., Any], name: str, *args: Any) -> threading.Thread | None:
    """A started daemon thread running ``target(*args)``; None when none may start now."""
    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    try:
        thread.start()
    except RuntimeError:
        return None
    return thread
