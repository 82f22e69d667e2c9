"""Subscribers that hand the library's messages to where a host's code lives.

Every ``subscriber=`` object here is a ``put()`` subscriber: the library calls ``put()`` on a
thread of its own, and each bridge carries the message over to an asyncio event loop, a Tk
main loop or a Qt receiver's thread without blocking on the host's code there. What a bridge
cannot deliver (a closed loop, a destroyed window) is dropped with a rate-limited log, never
raised into the library. See docs/API.md, *Bridges*.
"""

from __future__ import annotations

from ._asyncio import AsyncioSubscriber
from ._qt import QtSubscriber
from ._tk import TkSubscriber

__all__ = ["AsyncioSubscriber", "QtSubscriber", "TkSubscriber"]
