"""examples/desktop_tk.py's logic without a display: a put() subscriber's queue drained into the view."""

from __future__ import annotations

import importlib.util
import queue
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import exmcp_actors as mcp

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "desktop_tk.py"
WAIT = 10.0


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("desktop_tk", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_view_follows_the_demo_through_a_queue() -> None:
    desktop = _load()
    view = desktop.CatalogView(max_updates=5)
    box: queue.Queue[Any] = queue.Queue()
    demo = [sys.executable, "-m", "exmcp_actors._demo", "--interval", "0.1"]
    with mcp.connect(demo) as client, client.catalog(subscriber=box) as catalog:
        view.load(catalog)
        assert view.tools[0] == "echo" and "demo://clock" in view.resources
        with client.watch({"resourceSubscriptions": ["demo://clock"]}, subscriber=box):
            deadline = time.monotonic() + WAIT
            # The GUI's poll, as after() would call it: never blocks, bounded per call.
            while len(view.updates) < 5 and time.monotonic() < deadline:
                if not view.drain(box, limit=2):
                    box.put(box.get(timeout=WAIT))  # wait for the next message, then drain it
        assert len(view.updates) == 5  # the log keeps only the latest
        assert any("updated demo://clock" in line for line in view.updates)
        assert any("tools list now" in line for line in view.updates)


def test_reconnected_and_closed_messages_set_the_view_status() -> None:
    desktop = _load()
    view = desktop.CatalogView()
    view.apply(mcp.Reconnected("ex_mcp_notification_reconnected", None, {"resubscribed": ["u"], "failed": []}))
    assert view.status == "reconnected" and "resubscribed ['u']" in view.updates[-1]
    view.apply(mcp.Closed("ex_mcp_notification_closed", None, "disconnected"))
    assert view.status == "closed: disconnected"
