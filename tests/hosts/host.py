"""A host program for the process-hygiene tests: connects to a stdio server, blocks a
non-daemon thread in listener.get(), prints the server's pid, then ends in the way argv[1] says."""

import os
import signal
import sys
import threading
import time

import exmcp_actors as mcp

way = sys.argv[1]
server = [sys.executable, os.path.join(os.path.dirname(__file__), "stubborn_server.py")]
transport = mcp.StdioTransport(server, stop_timeout=0.5)
client = mcp.connect(transport, protocol="legacy", connect_timeout=10)
listener = client.subscribe_notifications({"resourceSubscriptions": ["file:///x"]})
# A host thread (not a daemon) waiting forever: it must not keep the interpreter alive.
threading.Thread(target=lambda: print("got", listener.get(), flush=True), name="host-waiter").start()
print(f"server {transport.pid}", flush=True)
sys.stdin.readline()  # the test has read the pid

if way == "normal":
    pass
elif way == "sys.exit":
    sys.exit(3)
elif way == "exception":
    raise RuntimeError("unhandled")
elif way == "sigint":
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(30)
elif way in ("sigterm", "sigkill"):
    os.kill(os.getpid(), signal.SIGTERM if way == "sigterm" else signal.SIGKILL)
    time.sleep(30)
