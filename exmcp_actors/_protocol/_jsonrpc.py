"""JSON-RPC 2.0 framing for MCP (sans-IO): classify what arrives, build what leaves.

Requests are built with jsonrpcclient, but with ids from a per-client counter
(jsonrpcclient's own counter is process-global). Incoming frames are
classified here first: jsonrpcclient's ``parse`` raises ``KeyError`` on
anything that is not a response, so it only ever sees responses.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Final

import jsonrpcclient

JSONRPC = "2.0"


@dataclass(frozen=True, slots=True)
class InvalidFrame:
    """A frame that could not be decoded as JSON, or that was too large.

    Attributes:
        error: what was wrong, for the log.
        raw: the first bytes of the frame, for the log (truncated).
    """

    error: str
    raw: bytes = b""


@dataclass(frozen=True, slots=True)
class RequestFailed:
    """A transport could not complete the exchange of one of our requests: no answer will
    come. Delivered in a batch like a frame, so it keeps its place in the wire order.

    Never a JSON-RPC frame: a server's error answer and a transport's failure stay apart.

    Attributes:
        id: the id of the request that failed (named like an answer's).
        error: why: a :class:`~._errors.TransportError` (the connection or the HTTP exchange
            failed), a :class:`~._errors.ProtocolError` (the server's reply was no answer) or
            an :class:`~._errors.InternalError` (a bug in the transport).
    """

    id: Any
    error: Exception


#: What a sink receives per frame: the decoded JSON value, an InvalidFrame or a RequestFailed.
Frame = Any


# The message kinds below are plain (not frozen) slotted dataclasses: one is built per
# incoming frame, and a frozen one costs about twice as much to build.

# JSON-RPC error codes used by this client.
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
#: MCP 2026-07-28 Streamable HTTP: the request's headers do not match its body.
HEADER_MISMATCH = -32020
#: MCP 2026-07-28: the requested protocol version is not supported.
UNSUPPORTED_VERSION = -32022
#: MCP 2026-07-28: a standard header disagrees with the body (HTTP 400).
HEADER_MISMATCH = -32020
#: MCP 2026-07-28: the request needs a client capability it did not declare.
MISSING_CLIENT_CAPABILITY = -32021
#: Errors only a 2026-07-28 server answers: whoever sends one speaks that revision.
MODERN_ONLY_ERRORS: frozenset[int] = frozenset((UNSUPPORTED_VERSION, HEADER_MISMATCH, MISSING_CLIENT_CAPABILITY))


@dataclass(frozen=True, slots=True)
class Response:
    """A successful response to one of our requests."""

    id: Any
    result: Any


@dataclass(frozen=True, slots=True)
class ErrorResponse:
    """An error response to one of our requests (``id`` may be None for parse errors)."""

    id: Any
    code: int
    message: str
    data: Any = None


@dataclass(frozen=True, slots=True)
class ServerRequest:
    """A request from the server that we must answer."""

    id: Any
    method: str
    params: Any


@dataclass(frozen=True, slots=True)
class Notification:
    """A notification from the server (no id)."""

    method: str
    params: Any


@dataclass(frozen=True, slots=True)
class Invalid:
    """A frame that is not a valid JSON-RPC 2.0 message; ``why`` says what was wrong."""

    why: str
    frame: Any = None


Incoming = Response | ErrorResponse | ServerRequest | Notification | Invalid
#: How one of our requests ends: the server's answer, or the transport's failure.
Answer = Response | ErrorResponse | RequestFailed


def _is_id(value: Any) -> bool:
    # JSON-RPC ids are strings or integers; bool is an int in Python and is not an id.
    return isinstance(value, (str, int)) and not isinstance(value, bool)


def answer_id(value: Any) -> Any:
    """A response's id as we sent it, or ``_BAD_ID`` (equal to no id).

    JSON has one number type: ``7.0`` is our ``7`` (some peers round-trip ids
    through doubles), and is looked up as such for results and errors alike.
    ``"7"`` and ``true`` are not our ``7``. A transport that watches for the answer
    to a request (an SSE stream ends with it) reads ids through this too, so it
    never takes for the answer what the session will not route as one.
    """
    if _is_id(value):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return _BAD_ID


_BAD_ID: Final = object()


def classify(frame: Any) -> Incoming:
    """Sort one decoded frame into the message kinds the client acts on."""
    if isinstance(frame, InvalidFrame):
        return Invalid(frame.error, frame.raw[:200])
    if isinstance(frame, list):
        return Invalid("batches are not supported (JSON-RPC batches existed only in MCP 2025-03-26)", None)
    if not isinstance(frame, dict):
        return Invalid(f"a message must be a JSON object, got {type(frame).__name__}", frame)
    if frame.get("jsonrpc") != JSONRPC:
        return Invalid("missing or wrong 'jsonrpc' member", frame)
    method = frame.get("method")
    has_id = "id" in frame
    if method is not None:
        if not isinstance(method, str):
            return Invalid("'method' must be a string", frame)
        params = frame.get("params")
        if params is not None and not isinstance(params, (dict, list)):
            return Invalid("'params' must be an object or an array", frame)
        if has_id:
            if not _is_id(frame["id"]):
                return Invalid("a request id must be a string or an integer", frame)
            return ServerRequest(frame["id"], method, params)
        return Notification(method, params)
    if not has_id:
        return Invalid("neither a request, a notification nor a response", frame)
    if ("result" in frame) == ("error" in frame):
        return Invalid("a response must have exactly one of 'result' and 'error'", frame)
    our_id = answer_id(frame["id"])
    if "error" in frame:
        if our_id is _BAD_ID and frame["id"] is not None:  # null: the server could not read our id
            return Invalid("a response id must be a string, an integer or null", frame)
        return _error_response(frame, None if our_id is _BAD_ID else our_id)
    if our_id is _BAD_ID:
        return Invalid("a response id must be a string or an integer", frame)
    parsed = jsonrpcclient.parse(frame)
    assert isinstance(parsed, jsonrpcclient.Ok)  # classified above: a single success response
    return Response(our_id, parsed.result)


def _error_response(frame: dict[str, Any], answer_id: Any) -> Incoming:
    error = frame["error"]
    if not isinstance(error, dict) or not isinstance(error.get("code"), int) or isinstance(error.get("code"), bool):
        return Invalid("an error response needs an error object with an integer code", frame)
    message = error.get("message")
    parsed = jsonrpcclient.parse(
        {
            "jsonrpc": JSONRPC,
            "id": answer_id,
            "error": {**error, "message": message if isinstance(message, str) else ""},
        }
    )
    assert isinstance(parsed, jsonrpcclient.Error)
    return ErrorResponse(parsed.id, parsed.code, parsed.message, parsed.data)


class RequestBuilder:
    """Builds outgoing messages with ids from this client's own counter."""

    def __init__(self, prefix: str = "") -> None:
        self._counter = itertools.count(1)
        self._prefix = prefix

    def next_id(self) -> int | str:
        """A fresh request id, unique for this client. Safe to call from any thread."""
        number = next(self._counter)  # itertools.count is atomic under the GIL
        return f"{self._prefix}{number}" if self._prefix else number

    @staticmethod
    def request(method: str, params: dict[str, Any] | None, request_id: Any) -> dict[str, Any]:
        """A request frame; ``params`` is omitted when None (jsonrpcclient also drops ``{}``)."""
        message: dict[str, Any] = jsonrpcclient.request(method, params, id=request_id)
        if params is not None and "params" not in message:
            # Keep an explicit empty object: some methods require params to be present.
            message["params"] = params
        return message


def notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """A notification frame."""
    message: dict[str, Any] = jsonrpcclient.notification(method, params)
    if params is not None and "params" not in message:
        message["params"] = params
    return message


def result_frame(request_id: Any, result: Any) -> dict[str, Any]:
    """Our answer to a server request."""
    return {"jsonrpc": JSONRPC, "id": request_id, "result": result}


def error_frame(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    """Our error answer to a server request."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": JSONRPC, "id": request_id, "error": error}
