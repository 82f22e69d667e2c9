"""Clients are closed at interpreter exit, early enough to release the host's threads.

CPython joins non-daemon threads (``threading._shutdown``) *before* ``atexit``
handlers run: a host thread blocked in ``listener.get()`` or iterating a
handle would keep the interpreter from exiting, and an ``atexit`` handler
would never get to close its client. So the hook is registered with
``threading._register_atexit`` (as ``concurrent.futures`` does), which runs
before that join: each open client is disconnected, every handle gets its
``Closed``, and blocked hosts wake up. Stdio servers are stopped on the way.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ._client import Client

logger = logging.getLogger("exmcp_actors")

#: How long exit may wait for all clients to close (stdio: SIGTERM, then SIGKILL, within it).
EXIT_TIMEOUT: Final = 5.0

_lock = threading.Lock()
_clients: weakref.WeakSet[Client] = weakref.WeakSet()
_registered = False


def track(client: Client) -> None:
    """Disconnect ``client`` at interpreter exit if it is still open then."""
    global _registered
    with _lock:
        _clients.add(client)
        if _registered:
            return
        try:
            threading._register_atexit(close_all)  # type: ignore[attr-defined]
        except (AttributeError, RuntimeError):  # no such hook, or already shutting down
            import atexit

            atexit.register(close_all)
        _registered = True


def close_all(timeout: float = EXIT_TIMEOUT) -> None:
    """Disconnect every tracked client: all asked at once, then all awaited within ``timeout``."""
    with _lock:
        clients = list(_clients)
        _clients.clear()
    deadline = time.monotonic() + timeout
    for client in clients:
        try:
            # Only asks (the wait is below, shared): a disconnect() that returned, even after
            # 1 ms, would keep the closing messages not yet delivered from their put() subscribers.
            client._begin_disconnect()
        except Exception:  # exit must go on
            logger.debug("disconnect at exit failed", exc_info=True)
    for client in clients:
        try:
            client.disconnect(timeout=max(0.001, deadline - time.monotonic()))
        except Exception:
            logger.debug("disconnect at exit failed", exc_info=True)
