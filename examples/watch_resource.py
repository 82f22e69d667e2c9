"""Watch a real server's resource, then survive the server being killed.

Starts examples/demo_server.py (the official MCP SDK's low-level server) over
stdio, watches ``demo://counter``, bumps it a few times, kills the server, and
shows the client starting a new server process, re-subscribing and carrying on.

    pip install -e '.[examples]' && python examples/watch_resource.py [--protocol auto|legacy|modern]
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import exmcp_actors as mcp

SERVER = [sys.executable, str(Path(__file__).with_name("demo_server.py"))]
COUNTER = "demo://counter"


def text_of(result: dict[str, Any]) -> str:
    return str(result["content"][0]["text"])


def show(message: object) -> None:
    match message:
        case mcp.Notification(method=method, params=params):
            print(f"  notification  {method} {params}")
        case mcp.Reconnected(report=report):
            print(f"  reconnected   resubscribed={report['resubscribed']} failed={report['failed']}")
        case mcp.Closed(reason=reason):
            print(f"  closed        {reason!r}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--protocol", default="auto", choices=["auto", "legacy", "modern"])
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the client does")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(name)s: %(message)s")

    backoff = mcp.Backoff(initial=0.2, factor=2.0, maximum=2.0, jitter=0.1)
    with mcp.connect(
        SERVER, protocol=args.protocol, backoff=backoff, client_info={"name": "watch-example", "version": "1.0"}
    ) as client:
        print(f"connected: MCP {client.protocol_version} ({client.era} era), server {client.server_info.get('name')}")
        with client.watch({"resourceSubscriptions": [COUNTER]}) as watch:
            for _ in range(3):
                print(f"bump -> {text_of(client.call_tool('bump'))}")
                show(watch.get(timeout=10))

            pid = int(text_of(client.call_tool("pid")))
            print(f"killing the server (pid {pid}) ...")
            os.kill(pid, signal.SIGKILL)
            show(watch.get(timeout=30))  # Reconnected: a new server process, the URI re-subscribed
            print(f"now: MCP {client.protocol_version}, server pid {text_of(client.call_tool('pid'))}")

            print(f"bump -> {text_of(client.call_tool('bump'))}")
            show(watch.get(timeout=10))
            print(f"read -> {client.read_resource(COUNTER)['contents'][0]['text']}")
    print(f"status after disconnect: {client.status}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
