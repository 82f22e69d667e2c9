"""A minimal legacy MCP server over stdio that ignores stdin EOF, SIGTERM and SIGINT,
and starts a grandchild (which must be ended with it). Prints nothing but JSON-RPC."""

import json
import signal
import subprocess
import sys
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGINT, signal.SIG_IGN)
STUBBORN_SLEEPER = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
grandchild = subprocess.Popen([sys.executable, "-c", STUBBORN_SLEEPER])
print(f"grandchild {grandchild.pid}", file=sys.stderr, flush=True)

for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message or "method" not in message:
        continue
    if message["method"] == "initialize":
        result = {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"resources": {"subscribe": True}},
            "serverInfo": {"name": "stubborn", "version": "1"},
        }
        reply = {"jsonrpc": "2.0", "id": message["id"], "result": result}
    elif message["method"] in ("ping", "resources/subscribe", "resources/unsubscribe"):
        reply = {"jsonrpc": "2.0", "id": message["id"], "result": {}}
    else:
        reply = {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "Method not found"}}
    print(json.dumps(reply), flush=True)

while True:  # stdin is closed: stay anyway
    time.sleep(1)
