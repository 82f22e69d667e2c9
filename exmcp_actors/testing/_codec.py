"""The wire codec: encoding pushes, decoding frames as a real transport does, shaping and matching messages."""

from __future__ import annotations

import json
from typing import Any, Final

from exmcp_actors._transport._base import InvalidFrame
from exmcp_actors.testing._protocol import SUBSCRIPTION_ID_KEY

#: One frame on the wire, already encoded (or raw, from send_raw).
Wire = str | bytes

#: How many bytes of a bad frame an InvalidFrame keeps for the log.
RAW_SNIPPET_BYTES: Final = 256


def encode(message: Any) -> str:
    """One message as compact JSON text."""
    # Serialising at push time snapshots the message and raises TypeError to the caller.
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False)


def encode_logged(message: Any) -> tuple[str, Any]:
    """The frame for ``message`` and the decoded copy that ``sent`` keeps.

    The copy is decoded from the frame, so later changes to ``message`` do not show.
    """
    text = encode(message)
    return text, json.loads(text)


def decode_frame(data: Wire, max_frame_bytes: int) -> Any:
    """Decode one frame as a real transport does: a JSON value or an InvalidFrame."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if len(raw) > max_frame_bytes:
        return InvalidFrame(
            f"frame too large: {len(raw)} bytes (limit {max_frame_bytes})",
            raw[:RAW_SNIPPET_BYTES],
        )
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return InvalidFrame(f"invalid UTF-8: {exc}", raw[:RAW_SNIPPET_BYTES])
    except ValueError as exc:
        return InvalidFrame(f"invalid JSON: {exc}", raw[:RAW_SNIPPET_BYTES])


def with_params(message: dict[str, Any], params: dict[str, Any] | None) -> dict[str, Any]:
    """``message`` with a ``params`` member, unless ``params`` is None (then the member is omitted)."""
    if params is not None:
        message["params"] = params
    return message


def notification(method: str, params: dict[str, Any] | None) -> dict[str, Any]:
    """A JSON-RPC notification; ``params=None`` omits the member."""
    return with_params({"jsonrpc": "2.0", "method": method}, params)


def stamped(params: dict[str, Any] | None, subscription_id: Any) -> dict[str, Any]:
    """A copy of ``params`` whose ``_meta`` carries the subscription id."""
    stamped = dict(params or {})
    meta = dict(stamped.get("_meta") or {})
    meta[SUBSCRIPTION_ID_KEY] = subscription_id
    stamped["_meta"] = meta
    return stamped


def is_response(message: Any) -> bool:
    """Whether ``message`` answers a request (an id and no method)."""
    return isinstance(message, dict) and "id" in message and "method" not in message


def params_match(message: Any, method: str | None, filters: dict[str, Any]) -> bool:
    """Whether ``message`` has ``method`` (any if None) and every ``filters`` member in its params."""
    if not isinstance(message, dict):
        return False
    if method is not None and message.get("method") != method:
        return False
    params = message.get("params")
    params = params if isinstance(params, dict) else {}
    return all(key in params and params[key] == value for key, value in filters.items())
