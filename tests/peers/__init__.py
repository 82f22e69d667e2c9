"""Real MCP peers for tests: the official SDK low-level server over stdio, WebSocket and HTTP (see FRAMES.md)."""
