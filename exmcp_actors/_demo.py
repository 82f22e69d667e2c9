"""The embedded demo server: ``python -m exmcp_actors._demo`` speaks MCP over stdio and changes every second.

It needs nothing beyond this package: it is the public test peer,
:class:`exmcp_actors.testing.FakeServer`, answering both eras (``initialize`` and
``server/discover``), bridged to stdin/stdout one JSON message per line. Every
``--interval`` seconds (default 1) it renames a tool, swaps a resource, rewrites
``demo://clock`` (its ``lastModified`` too) and ``demo://counter``, and tells each client: list changes and
``resources/updated`` for what it subscribed (legacy), or events on its open
``subscriptions/listen`` streams (2026-07-28). ``exmcp-watch --demo`` runs it.
It ends when stdin closes, or on SIGINT/SIGTERM, quietly.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from datetime import UTC, datetime
from typing import IO, Any

from .testing import FakeConnection, FakeServer, serve_stdio

CLOCK = "demo://clock"
COUNTER = "demo://counter"
_TOOL_NAMES = ("add", "multiply", "shout", "reverse")
_UPDATED = "notifications/resources/updated"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class DemoServer:
    """A :class:`FakeServer` whose content changes on every :meth:`tick`."""

    def __init__(self) -> None:
        self.fake = FakeServer(era="both", server_info={"name": "exmcp-demo", "version": "1.0"})
        self.fake.instructions = "A demo server: its tools and resources change every second."
        self.ticks = 0
        self._filters: dict[Any, dict[str, Any]] = {}  # listen id -> what it asked for
        self._lock = threading.Lock()
        self.fake.on("subscriptions/listen", self._listen)
        self._set_content()

    def _listen(self, params: dict[str, Any], ctx: FakeConnection) -> Any:
        with self._lock:
            self._filters[ctx.request_id] = dict(params.get("notifications") or {})
        default = self.fake.default_handler("subscriptions/listen")
        assert default is not None
        return default(params, ctx)

    def _set_content(self) -> None:
        n = self.ticks
        tool = _TOOL_NAMES[n % len(_TOOL_NAMES)]
        self.fake.set_items(
            "tools",
            [
                {"name": "echo", "description": "Echo the arguments.", "inputSchema": {"type": "object"}},
                {"name": tool, "description": f"Tool of tick {n}.", "inputSchema": {"type": "object"}},
            ],
        )
        self.fake.set_items(
            "resources",
            [
                # Rewritten every tick: a catalog's diff shows it as changed annotations.
                {"uri": CLOCK, "name": "clock", "mimeType": "text/plain", "annotations": {"lastModified": _now()}},
                {"uri": COUNTER, "name": "counter", "mimeType": "text/plain"},
                {"uri": f"demo://note/{n % 3}", "name": f"note {n % 3}", "mimeType": "text/plain"},
            ],
        )
        self.fake.set_resource_text(CLOCK, time.strftime("%H:%M:%S"))
        self.fake.set_resource_text(COUNTER, str(n))

    def tick(self) -> None:
        """Change the content, then tell every connected client."""
        self.ticks += 1
        self._set_content()
        for number in range(1, self.fake.connections + 1):
            conn = self.fake.connection(number)
            if conn.closed:
                continue
            if conn.era == "modern":
                self._tell_listens(conn)
            else:
                conn.notify("notifications/tools/list_changed")
                conn.notify("notifications/resources/list_changed")
                for uri in conn.subscriptions:
                    conn.notify(_UPDATED, {"uri": uri})

    def _tell_listens(self, conn: FakeConnection) -> None:
        for listen_id in conn.listens:
            with self._lock:
                wanted = self._filters.get(listen_id, {})
            if wanted.get("toolsListChanged"):
                conn.event("notifications/tools/list_changed", {}, subscription_id=listen_id)
            if wanted.get("resourcesListChanged"):
                conn.event("notifications/resources/list_changed", {}, subscription_id=listen_id)
            for uri in wanted.get("resourceSubscriptions") or ():
                if uri in (CLOCK, COUNTER):
                    conn.event(_UPDATED, {"uri": uri}, subscription_id=listen_id)

    def serve_stdio(self, stdin: IO[bytes], stdout: IO[bytes], interval: float) -> None:
        """Serve one client on these pipes until stdin ends, changing every ``interval`` seconds meanwhile."""
        ended = threading.Event()
        ticker = threading.Thread(target=self._tick_until, args=(ended, interval), name="demo-ticker", daemon=True)
        ticker.start()
        try:
            serve_stdio(self.fake, stdin, stdout)
        finally:
            ended.set()
            self.fake.close()

    def _tick_until(self, ended: threading.Event, interval: float) -> None:
        while not ended.wait(interval):
            self.tick()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m exmcp_actors._demo", description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between changes (default 1)")
    args = parser.parse_args(argv)
    # Ctrl-C in a terminal reaches the whole process group: end quietly, like on EOF.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    DemoServer().serve_stdio(sys.stdin.buffer, sys.stdout.buffer, max(0.05, args.interval))
    return 0


if __name__ == "__main__":
    sys.exit(main())
