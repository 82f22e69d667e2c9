"""One POST: send a message, route the answer, and say whose fault it was when
there is no usable one.

Every outgoing message is an HTTP POST; the reply to a request is a JSON
body or a ``text/event-stream`` (SSE) body carrying notifications, server
requests and finally the response (read by ``_resume.py`` and ``_pump.py``).

A request never hangs on an HTTP failure, and the transport never makes up
a server's answer: when none will come it delivers a ``RequestFailed`` for
the request's id (``Outlet.fail``), whose error names the fault.

* HTTP status outside 2xx whose body is a JSON-RPC error: the server's error
  is forwarded as is, with ``id`` set to the request's id (servers send
  ``null`` when they reject before parsing the id). That is an answer.
* Any other HTTP status outside 2xx: :class:`ExchangeFailed` with
  ``.status`` (404, 503, ...) and ``.body`` (its first 1000 characters).
  When probing ``server/discover``, a 400/404/405 here means "legacy server".
* The connection failed before a response arrived (refused, reset, timed
  out): :class:`ExchangeFailed` saying how; :class:`OutcomeUnknown` (one) once the whole
  request had been written, since the server may have run it. A failure to connect at all also
  reports ``transport_lost("server unreachable: ...")``, after the failure.
* An SSE response stream ended before the request's response arrived:
  :class:`ExchangeFailed`, see ``_resume.py``.
* A 2xx that is no answer (a 202/204 or no body for a request, an unknown
  content type, a JSON body that does not decode or is not the request's
  response): :class:`ProtocolError`, the server's fault. A JSON-RPC error
  whose id is null is the answer, as it is in an HTTP error's body.
* A bug of ours while posting: :class:`InternalError`, never blamed on the
  server or the network.

A 404 on a message that carried ``Mcp-Session-Id`` means the session is gone
(unless its body is a JSON-RPC error naming the request's own id, which is
an ordinary method error): after the request's failure, ``transport_lost("session
expired (404)")``. So does a 400 whose body names the session (what the
Python SDK 1.x answers an unknown session id after a restart). The client
must ``close`` and ``open`` again and re-initialize.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Final

import httpx

from ..._protocol._errors import ExchangeFailed, InternalError, OutcomeUnknown, ProtocolError
from .._base import InvalidFrame
from ._config import IO_ERRORS, Config, io_error_text, logger, status_line
from ._pump import answers, decode
from ._session import InvalidSessionId, session_gone, session_id_from

if TYPE_CHECKING:
    from ._outlet import Outlet
    from ._plumbing import TrackingBackend
    from ._requests import InFlight, Post
    from ._resume import StreamResumer
    from ._session import HttpSession

__all__ = ["Poster"]

#: How much of an error body is read, and how much of it is quoted in ``ExchangeFailed.body``.
_ERROR_BODY_READ: Final = 64 * 1024
_ERROR_BODY_QUOTE: Final = 1000


class Poster:
    """Runs the HTTP exchange of one message at a time, on the calling thread."""

    def __init__(
        self,
        cfg: Config,
        client: httpx.Client,
        backend: TrackingBackend,
        session: HttpSession,
        inflight: InFlight,
        outlet: Outlet,
        resumer: StreamResumer,
    ) -> None:
        self._cfg = cfg
        self._client = client
        self._backend = backend
        self._session = session
        self._inflight = inflight
        self._outlet = outlet
        self._resumer = resumer

    def run(self, post: Post) -> None:
        """POST ``post`` and handle the answer; never raises."""
        try:
            self._post(post)
        except Exception as exc:  # a worker must fail the request, not die with it
            logger.exception("unexpected error while posting %s", post.describe())
            if post.has_id and not self._outlet.silenced(post):
                self._outlet.fail(post, InternalError(f"the HTTP transport failed posting {post.describe()}: {exc!r}"))
        finally:
            post.written.set()
            self._inflight.remove(post)

    def _post(self, post: Post) -> None:
        self._backend.forget_thread()
        if not self._inflight.claim(post):
            return
        timeout = None if post.has_id else self._cfg.io_timeout
        request = self._client.build_request(
            "POST",
            self._cfg.url,
            content=post.body,
            headers=self._session.post_headers(post),
            extensions={"trace": post.trace},
            timeout=httpx.Timeout(self._cfg.io_timeout, read=timeout),
        )
        try:
            response = self._client.send(request, stream=True)
        except IO_ERRORS as exc:
            self._connection_failed(post, exc)
            return
        try:
            post.written.set()
            self._handle_response(post, response)
        finally:
            response.close()

    def _connection_failed(self, post: Post, exc: Exception) -> None:
        if self._outlet.silenced(post):
            return
        reason = io_error_text(exc)
        logger.debug("POST %s failed: %s", post.describe(), reason)
        if post.has_id:
            self._fail_connection(post, reason)
        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
            self._outlet.report_lost(f"server unreachable: {reason}")
        elif not post.has_id:
            logger.warning("could not POST %s: %s", post.describe(), reason)

    def _fail_connection(self, post: Post, reason: str) -> None:
        what = f"connection error: {reason}"
        if post.written.is_set():  # the whole request went out: the server may have run it
            self._outlet.fail(post, OutcomeUnknown(what, request=post.describe()))
        else:
            self._outlet.fail(post, ExchangeFailed(what))

    def _handle_response(self, post: Post, response: httpx.Response) -> None:
        status = response.status_code
        if post.method == "initialize" and 200 <= status < 300:
            values = [value for name, value in response.headers.raw if name.lower() == b"mcp-session-id"]
            try:
                session_id = session_id_from(values)
            except InvalidSessionId as refused:
                self._refuse_session(post, refused)
                return
            if session_id is not None:
                self._session.assigned(session_id)
        if not 200 <= status < 300:
            self._http_error(post, response)
            return
        if not post.has_id:
            return  # 202 (or any 2xx) for a notification or a response: done
        content_type = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        if status in (202, 204) or not content_type:
            why = f"the server answered a request with HTTP {status_line(response)} and no response"
            self._outlet.fail(post, ProtocolError(why, reason=("no_response", status)))
        elif content_type == "text/event-stream":
            self._resumer.consume(post, response)
        elif content_type == "application/json" or content_type.endswith("+json"):
            self._consume_json(post, response)
        else:
            why = f"the server answered a request with content type {content_type!r} (HTTP {status})"
            self._outlet.fail(post, ProtocolError(why, reason=("unexpected_content_type", content_type)))

    def _refuse_session(self, post: Post, refused: InvalidSessionId) -> None:
        """No session on an id the spec forbids: ``initialize`` fails, so nothing is ever sent
        back with it (a control or a space would be echoed into every request's head)."""
        self._cfg.misbehaviour.warning("session-id", "the server assigned %s; initialize fails", refused)
        why = f"the server assigned {refused}, which no MCP server may send"
        self._outlet.fail(post, ProtocolError(why, reason=("invalid_session_id", str(refused))))

    def _http_error(self, post: Post, response: httpx.Response) -> None:
        status = response.status_code
        raw = _read_some(response, _ERROR_BODY_READ)
        server_error = _jsonrpc_error(raw)
        if post.has_id:
            if server_error is not None:  # the server's own answer (its id null if it could not read ours)
                frame: dict[str, Any] = dict(server_error)
                frame["id"] = post.request_id
                self._outlet.deliver([frame], post)
            else:
                text = raw.decode("utf-8", "replace")[:_ERROR_BODY_QUOTE]
                what = f"HTTP {status_line(response)}"
                self._outlet.fail(post, ExchangeFailed(what, status=status, body=text))
        elif not self._outlet.silenced(post):
            self._cfg.misbehaviour.warning("refused", "HTTP %s answering %s", status_line(response), post.describe())
        own_id = server_error is not None and post.has_id and server_error.get("id") == post.request_id
        gone = session_gone(status, raw) if post.sent_session and not own_id else None
        if gone is not None:
            self._session.expired()
            self._outlet.report_lost(gone)

    def _consume_json(self, post: Post, response: httpx.Response) -> None:
        limit = self._cfg.max_frame_bytes
        try:
            body = _read_some(response, limit + 1, strict=True)
        except IO_ERRORS as exc:
            if not self._outlet.silenced(post):
                self._fail_connection(post, io_error_text(exc))
            return
        if len(body) > limit:
            bad = InvalidFrame(f"JSON body larger than {limit} bytes", body[:200])
        else:
            frame = decode(body)
            if isinstance(frame, InvalidFrame):
                bad = frame
            else:
                if _unaddressed_error(frame):  # the server's error; it could not read our id
                    frame = {**frame, "id": post.request_id}
                if answers(frame, post.request_id):
                    self._outlet.deliver([frame], post)
                    return
                # One request, one JSON answer: anything else means none will come, so the
                # request fails now rather than at its timeout. The frame goes first, as sent.
                why = "the server answered a request with a JSON body that is no answer to it"
                self._outlet.fail(post, ProtocolError(why, reason=("not_the_answer", post.request_id)), before=[frame])
                return
        why = f"the server answered a request with an unusable JSON body: {bad.error}"
        # The bad frame goes first, logged like any other; then the request fails.
        self._outlet.fail(post, ProtocolError(why, reason=("unusable_body", bad.error)), before=[bad])


def _unaddressed_error(frame: Any) -> bool:
    """Whether ``frame`` is a JSON-RPC error whose id is null."""
    return (
        isinstance(frame, dict)
        and "id" in frame
        and frame["id"] is None
        and isinstance(frame.get("error"), dict)
        and "result" not in frame
        and "method" not in frame
    )


def _jsonrpc_error(raw: bytes) -> dict[str, Any] | None:
    """The body as a JSON-RPC error response, if it is one."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    error = value.get("error")
    if not isinstance(error, dict) or not isinstance(error.get("code"), int) or "result" in value:
        return None
    return value


def _read_some(response: httpx.Response, limit: int, *, strict: bool = False) -> bytes:
    """Up to ``limit`` bytes of the body. Errors are swallowed unless ``strict``."""
    buf = bytearray()
    try:
        for chunk in response.iter_bytes():
            buf += chunk
            if len(buf) >= limit:
                break
    except IO_ERRORS:
        if strict:
            raise
    return bytes(buf[:limit])
