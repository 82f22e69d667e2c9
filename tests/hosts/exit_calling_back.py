"""A host program for the exit test: when it ends, a put() subscriber is called with its
closing message and calls back into the client (a request, then disconnect()), while one host
thread iterates a listener and another waits for a request the server never answers. The
interpreter must still exit at once, each of them ending with the client's error."""

import sys
import threading
from typing import Any

import exmcp_actors as mcp
from exmcp_actors.testing import NO_REPLY, FakeServer


def say(line: str) -> None:
    """One write per line: threads print at once (print() writes the newline separately)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


server = FakeServer(era=sys.argv[1])  # type: ignore[arg-type]
server.on("test/never", lambda params, ctx: NO_REPLY)
client = mcp.connect(server.transport(), request_timeout=60)


class CallsBackOnClosing:
    def put(self, message: Any) -> None:
        if message[0] not in ("ex_mcp_notification_closed", "ex_mcp_subscription_closed"):
            return
        try:
            client.request("test/never", timeout=30)
        except mcp.Error as error:
            say(f"put request: {type(error).__name__}")
        client.disconnect(timeout=30)
        say("put disconnect: returned")


def iterate(handle: Any) -> None:
    for _ in handle:
        pass
    say("iteration: ended")


def wait_for_an_answer() -> None:
    try:
        client.request("test/never", timeout=60)
    except mcp.Error as error:
        say(f"request: {type(error).__name__}")


flt = {"toolsListChanged": True}
register = client.listen if client.era == "modern" else client.subscribe_notifications
register(flt, CallsBackOnClosing())
threading.Thread(target=iterate, args=(register(flt),), name="host-iterating").start()
threading.Thread(target=wait_for_an_answer, name="host-requesting").start()
server.wait_for("test/never")
say("exiting")
