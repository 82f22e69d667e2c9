"""Transports: stdio, WebSocket and Streamable HTTP behind one interface."""

from __future__ import annotations

from ._base import DEFAULT_MAX_FRAME_BYTES, Frame, FrameSink, InvalidFrame, Transport

__all__ = ["DEFAULT_MAX_FRAME_BYTES", "Frame", "FrameSink", "InvalidFrame", "Transport"]
