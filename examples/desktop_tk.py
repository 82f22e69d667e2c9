"""A desktop window on a server's live catalog and resource updates (Tkinter).

The library delivers on its own threads; Tk may only be touched from its main
loop. So every message goes to a ``queue.Queue`` (a ``put()`` subscriber) and
the window drains it from Tk's loop with ``after()``. The same pattern in Qt:
drain the queue from a ``QTimer``, or give the library an object whose
``put()`` emits a signal (Qt queues a cross-thread signal to the GUI thread).

    python examples/desktop_tk.py                       # the embedded demo server
    python examples/desktop_tk.py -- python server.py   # your server (stdio)
    python examples/desktop_tk.py ws://localhost:8000/  # or a URL
"""

from __future__ import annotations

import argparse
import queue
import sys
import time
from collections import deque
from typing import Any

import exmcp_actors as mcp

DEMO = [sys.executable, "-m", "exmcp_actors._demo"]
#: How often the window drains the queue, in milliseconds.
POLL_MS = 50


class CatalogView:
    """What the window shows, built from messages; no Tk in here, so it is testable headless."""

    def __init__(self, max_updates: int = 200) -> None:
        self.tools: list[str] = []
        self.prompts: list[str] = []
        self.resources: list[str] = []
        self.updates: deque[str] = deque(maxlen=max_updates)
        self.status = "connecting"

    def load(self, catalog: mcp.Catalog) -> None:
        for kind in ("tools", "prompts", "resources"):
            self._set(kind, getattr(catalog, kind))

    def _set(self, kind: str, items: list[dict[str, Any]]) -> None:
        key = "uri" if kind == "resources" else "name"
        setattr(self, kind, [str(item.get(key, "?")) for item in items])

    def apply(self, message: Any) -> None:
        """Take one message from the queue."""
        stamp = time.strftime("%H:%M:%S")
        match message:
            case mcp.CatalogChanged(kind=kind, items=items):
                self._set(kind, items)
                self.updates.append(f"{stamp}  {kind} list now {len(items)} items")
            case mcp.Notification(method="notifications/resources/updated", params=params):
                self.updates.append(f"{stamp}  updated {params.get('uri')}")
            case mcp.Reconnected(report=report):
                self.status = "reconnected"
                self.updates.append(f"{stamp}  reconnected, resubscribed {report['resubscribed']}")
            case mcp.Closed(reason=reason):
                self.status = f"closed: {reason}"

    def drain(self, box: queue.Queue[Any], limit: int = 500) -> int:
        """Apply what waits in ``box`` without blocking (at most ``limit``, so the GUI stays responsive)."""
        n = 0
        while n < limit:
            try:
                self.apply(box.get_nowait())
            except queue.Empty:
                break
            n += 1
        return n


class Window:
    """The Tk window: three lists and a log, refreshed from a :class:`CatalogView`."""

    def __init__(self, root: Any, view: CatalogView, box: queue.Queue[Any], title: str) -> None:
        import tkinter as tk

        self.root, self.view, self.box = root, view, box
        root.title(title)
        self.lists: dict[str, Any] = {}
        for column, kind in enumerate(("tools", "prompts", "resources")):
            tk.Label(root, text=kind).grid(row=0, column=column)
            self.lists[kind] = tk.Listbox(root, width=28, height=8)
            self.lists[kind].grid(row=1, column=column, padx=4)
        self.log = tk.Listbox(root, width=90, height=10)
        self.log.grid(row=2, column=0, columnspan=3, pady=4)
        self.status = tk.Label(root, text=view.status, anchor="w")
        self.status.grid(row=3, column=0, columnspan=3, sticky="we")
        self.refresh()

    def refresh(self) -> None:
        for kind, box in self.lists.items():
            box.delete(0, "end")
            for name in getattr(self.view, kind):
                box.insert("end", name)
        self.log.delete(0, "end")
        for line in reversed(self.view.updates):
            self.log.insert("end", line)
        self.status.configure(text=self.view.status)

    def poll(self) -> None:
        if self.view.drain(self.box):
            self.refresh()
        self.root.after(POLL_MS, self.poll)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, command = argv[:at], argv[at + 1 :]
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url", nargs="?", help="a ws:// or http:// URL (default: the embedded demo)")
    parser.add_argument("--uri", action="append", help="resources to watch (default demo://clock for the demo)")
    parser.add_argument("--seconds", type=float, help="close the window after this long (for tests)")
    args = parser.parse_args(argv)
    target: Any = args.url or command or DEMO
    uris = args.uri or ([] if (args.url or command) else ["demo://clock"])

    import tkinter as tk

    root = tk.Tk()  # before connecting: no display, no server started
    box: queue.Queue[Any] = queue.Queue()
    view = CatalogView()
    with mcp.connect(target) as client:
        view.status = f"{client.server_info.get('name')} ({client.era} era, MCP {client.protocol_version})"
        with client.catalog(subscriber=box) as catalog:
            view.load(catalog)
            watch = client.watch({"resourceSubscriptions": uris}, subscriber=box) if uris else None
            window = Window(root, view, box, f"exmcp_actors: {client.server_info.get('name')}")
            root.after(POLL_MS, window.poll)
            if args.seconds is not None:
                root.after(int(args.seconds * 1000), root.destroy)
            root.mainloop()
            if watch is not None:
                watch.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
