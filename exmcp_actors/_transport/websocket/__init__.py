"""_transport.websocket."""
