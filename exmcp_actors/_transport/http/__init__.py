"""MCP Streamable HTTP, both eras, on httpx's synchronous client.

One endpoint URL. Every outgoing message is an HTTP POST; the reply to a
request is a JSON body or a ``text/event-stream`` (SSE) body carrying
notifications, server requests and finally the response. A legacy
(2024-11-05 .. 2025-11-25) server may also push on a standalone GET stream;
a modern (2026-07-28) server has no session and no GET stream, and a
``subscriptions/listen`` request's SSE response *is* the subscription.

Threads (all daemon, all joined by :meth:`HttpTransport.close`): the
``writer``, which takes messages in ``send`` order, and the elastic pool of
``workers``, one busy worker per in-flight request (``_dispatch.py``); the
legacy standalone ``get`` stream reader (``_resume.py``).

Where each part lives (each module's docstring tells the rules it keeps):

* ``_facade.py``: :class:`HttpTransport`, the public face; ``open`` does no I/O.
* ``_config.py``: the settings, the logger, the errors an exchange may raise.
* ``_link.py``: one connection (``open`` .. ``close``), built from the parts below.
* ``_plumbing.py``: httpx plumbing: sockets another thread can shut down
  (how ``cancel_stream`` and ``close`` wake a blocked reader), the client, TLS.
* ``_dispatch.py``: the writer thread (wire order) and the worker pool.
* ``_requests.py``: one :class:`Post` per message; the requests in flight,
  by id, and ``cancel_stream``.
* ``_session.py``: the session id, the negotiated version, the headers.
* ``_exchange.py``: one POST: routing its answer, the failure of a request
  that gets none (whose fault, never a made-up answer), a 404 that ends the session.
* ``_outlet.py``: the one way out to the sink; nothing after ``close`` or a loss.
* ``_pump.py``: SSE body to frames, one batch per network read; the drain.
* ``_resume.py``: the legacy GET stream and the resumption of a dropped
  stream (``Last-Event-ID``, ``retry:``).
* ``_sse.py``: the sans-IO SSE parser.
"""

from __future__ import annotations

from ._facade import HttpTransport
from ._resume import STREAM_DROPPED

__all__ = ["STREAM_DROPPED", "HttpTransport"]
