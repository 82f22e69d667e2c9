"""The WebSocket transport (subprotocol ``"mcp"``) and its sans-IO frame parser."""
