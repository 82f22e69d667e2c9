"""A host program for the call-futures tests: blocks its main thread in call_tool("hang")
against the SDK peer at argv[1] (legacy HTTP) until the test sends SIGINT; says "interrupted"
once the KeyboardInterrupt has come through call_tool, after which the call's cancel is sent."""

import sys

import exmcp_actors as mcp

url, key = sys.argv[1], sys.argv[2]
client = mcp.connect(mcp.HttpTransport(url), protocol="legacy", connect_timeout=10)
print("calling", flush=True)
try:
    client.call_tool("hang", {"key": key, "seconds": 30}, timeout=60)
except KeyboardInterrupt:
    print("interrupted", flush=True)
finally:
    client.disconnect()
