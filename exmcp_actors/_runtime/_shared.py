"""What the host's facade reads without entering the session: published after each input."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .._protocol._tool_book import ToolBook
    from ._monitor import SessionMonitor


@dataclass
class SharedState:
    """Written by whichever thread holds the session monitor (``Shell.publish``), read by the
    facade from any thread without a lock: each field is replaced whole, never changed in place."""

    status: str = "connecting"
    era: str | None = None
    protocol_version: str | None = None
    server_info: dict[str, Any] = field(default_factory=dict)
    server_capabilities: dict[str, Any] = field(default_factory=dict)
    instructions: str | None = None
    #: The ``server/discover`` result of a 2026-07-28 connection (None on a legacy one).
    discover_result: dict[str, Any] | None = None
    generation: int = 0
    ready: threading.Event = field(default_factory=threading.Event)
    connect_error: BaseException | None = None
    #: Set when the client actor has finished shutting down (pykka's actor_stopped comes earlier).
    finished: threading.Event = field(default_factory=threading.Event)
    #: Threads the client started, so disconnect() can wait for all of them.
    children: list[threading.Thread] = field(default_factory=list)
    children_lock: threading.Lock = field(default_factory=threading.Lock)
    #: Threads waiting in :meth:`join_children` right now (a ``put()`` may call disconnect()).
    joining: set[threading.Thread] = field(default_factory=set)
    #: The handles a host's disconnect() closed: nothing new reaches them once it returns.
    disconnected_handles: list[Any] = field(default_factory=list)
    #: The one way into the session (set by the client actor as it is made).
    monitor: SessionMonitor | None = None
    #: The session's tool book, whose facts host threads read without entering it (set with
    #: the monitor; see ``_protocol._tool_book``).
    tools: ToolBook | None = None
    #: The client's subscriber liveness watch (``_subscriber_proxy.LivenessWatcher``, set as the
    #: client actor is made), for handles that deliver without a proxy (resource watches, catalogs).
    liveness: Any = None

    def adopt(self, thread: threading.Thread) -> None:
        """Remember a thread (forgetting finished ones) so disconnect() can join it."""
        with self.children_lock:
            self.children[:] = [t for t in self.children if t.is_alive()]
            self.children.append(thread)

    def adopt_current_thread(self) -> None:
        self.adopt(threading.current_thread())

    def join_children(self, deadline: float) -> None:
        """Wait until ``deadline`` (a monotonic time) for every thread the client started to end,
        except the calling thread. One of those threads (a subscriber's proxy in ``put()``)
        waits for none that waits here too: two ``put()`` that both call disconnect() would
        otherwise wait for each other until their timeouts. (Each enters before it looks, so of
        any two, one sees the other and goes on; the other's wait then ends with it.) Any other
        thread waits for them all."""
        me = threading.current_thread()
        with self.children_lock:
            self.joining.add(me)
            one_of_them = me in self.children
            children = [child for child in self.children if child is not me]
        try:
            for child in children:
                with self.children_lock:
                    waits_for_us = one_of_them and child in self.joining
                if not waits_for_us:
                    child.join(max(0.0, deadline - time.monotonic()))
        finally:
            with self.children_lock:
                self.joining.discard(me)
