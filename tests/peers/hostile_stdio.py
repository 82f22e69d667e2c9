"""A hostile legacy stdio server: every text it supplies carries terminal controls.

    python tests/peers/hostile_stdio.py refuse|chatty

``refuse`` answers ``initialize`` with a JSON-RPC error, writes a line on stderr and exits.
``chatty`` completes the handshake with a hostile ``serverInfo``, then, once initialized,
pushes what a server may push (log notifications, list changes, a resource update, server
requests, frames that are no JSON-RPC), answers every request with a JSON-RPC error and
writes to stderr; the text of each is :data:`HOSTILE`. From then on it pushes a list change
and a log notification every 50 ms, until stdin closes, when it ends.
Standard library only, so it starts in a few tens of milliseconds.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

#: A window title (OSC 0), a screen clear (CSI 2J), a clipboard write (OSC 52), a forged line
#: (CR LF), a C1 CSI (0x9b), a bidirectional override and a DEL.
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x1b]52;c;cHduZWQ=\x07\r\nexmcp-watch: forged line\x9b31m\u202e\x7f"


_OUT = threading.Lock()
#: What it pushes again and again once initialized.
_REPEATED = [
    {"jsonrpc": "2.0", "method": "notifications/tools/list_changed", "params": {"x": HOSTILE}},
    {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": HOSTILE}},
]


def _send(message: Any) -> None:
    _write(json.dumps(message))


def _write(line: str) -> None:
    with _OUT:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def _keep_pushing() -> None:
    while True:
        time.sleep(0.05)
        for message in _REPEATED:
            _send(message)


def _say(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _error(request_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32000, "message": HOSTILE, "data": HOSTILE}}


def _pushes() -> list[Any]:
    note = {"jsonrpc": "2.0", "method": "notifications/message"}
    return [
        {**note, "params": {"level": "error", "logger": HOSTILE, "data": HOSTILE}},
        {"jsonrpc": "2.0", "method": "notifications/tools/list_changed", "params": {"x": HOSTILE}},
        {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": HOSTILE}},
        {"jsonrpc": "2.0", "method": HOSTILE, "params": {"data": HOSTILE}},
        {"jsonrpc": "2.0", "id": "s1", "method": HOSTILE},
        {"jsonrpc": "2.0", "id": HOSTILE, "method": "roots/list"},
        {"jsonrpc": "2.0", "id": HOSTILE, "result": {}},
        {"jsonrpc": "2.0", "id": "nobody", "error": {"code": 1, "message": HOSTILE}},
        {"jsonrpc": "1.0", "method": HOSTILE},
        [{"jsonrpc": "2.0", "method": HOSTILE}],
    ]


def main(mode: str) -> None:
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        method, request_id = message.get("method"), message.get("id")
        if method == "initialize":
            if mode == "refuse":
                _say(HOSTILE)
                _send(_error(request_id))
                return
            info = {"name": HOSTILE, "version": HOSTILE}
            capabilities = {"tools": {"listChanged": True}, "resources": {"subscribe": True, "listChanged": True}}
            result = {"protocolVersion": "2025-11-25", "capabilities": capabilities, "serverInfo": info}
            _send({"jsonrpc": "2.0", "id": request_id, "result": {**result, "instructions": HOSTILE}})
        elif method == "notifications/initialized":
            _say(HOSTILE)
            for push in _pushes():
                _send(push)
            _write(HOSTILE.replace("\r\n", " "))  # no JSON at all
            threading.Thread(target=_keep_pushing, daemon=True).start()
        elif method is not None and request_id is not None:
            _send(_error(request_id))


if __name__ == "__main__":
    main(sys.argv[1])
