"""No log record emitted while the library works, from its loggers or its dependencies'
(httpx, httpcore, websocket-client), holds URL credentials or query values, header values,
a stdio server's arguments or its environment. Every record at DEBUG is captured at the root.
The redaction takes time in proportion to a record's length, however a server's text is made."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from peers.launch import Peer

import exmcp_actors as mcp
from exmcp_actors._util._redact import redact_text, redact_url
from tests.hostile_text import LONG, seconds_taken
from tests.sdk_helpers import every_log_record

SECRET = "Zs3cr3tZ"
STUBBORN = Path(__file__).resolve().parent / "hosts" / "stubborn_server.py"


@pytest.fixture
def everything() -> Iterator[list[str]]:
    with every_log_record() as lines:
        yield lines


def _session(transport: mcp.Transport) -> None:
    with mcp.connect(transport, protocol="legacy", connect_timeout=10, reconnect=False) as client:
        listener = client.subscribe_notifications({"resourceSubscriptions": ["file:///a.txt"]})
        with pytest.raises(mcp.RequestError):
            client.request("made/up", {})  # an error answer is logged on its way too
        listener.unsubscribe()


def _assert_kept(lines: list[str], *, expect: str) -> None:
    text = "\n".join(lines)
    assert expect in text, text[-2000:]  # the session was logged at all
    assert SECRET not in text, [line for line in lines if SECRET in line][:5]


def test_stdio_argv_and_env_stay_out_of_every_record(everything: list[str]) -> None:
    argv = [sys.executable, str(STUBBORN), "--token", SECRET]
    _session(mcp.StdioTransport(argv, env={"API_KEY": SECRET}, stop_timeout=0.5))
    _assert_kept(everything, expect="exmcp_actors")


def test_http_credentials_query_and_headers_stay_out_of_every_record(
    everything: list[str], shared_http_peer_legacy: Peer
) -> None:
    url = shared_http_peer_legacy.url.replace("http://", f"http://user:{SECRET}@") + f"?token={SECRET}"
    _session(mcp.HttpTransport(url, headers={"Authorization": f"Bearer {SECRET}", "X-Api-Key": SECRET}))
    _assert_kept(everything, expect="httpx")


def test_websocket_credentials_query_and_headers_stay_out_of_every_record(
    everything: list[str], shared_ws_peer_legacy: Peer
) -> None:
    url = shared_ws_peer_legacy.url.replace("ws://", f"ws://user:{SECRET}@") + f"?token={SECRET}"
    _session(mcp.WebSocketTransport(url, headers={"Authorization": f"Bearer {SECRET}"}))
    _assert_kept(everything, expect="exmcp_actors")


def test_what_dependencies_log_is_redacted() -> None:
    assert redact_url(f"wss://u:{SECRET}@[::1]:8443/mcp?token={SECRET}#f") == "wss://[::1]:8443/mcp"
    samples = [
        f'HTTP Request: POST http://u:{SECRET}@h/mcp?token={SECRET} "HTTP/1.1 200 OK"',
        f"return_value=(b'HTTP/1.1', 200, b'OK', [(b'mcp-session-id', b'{SECRET}')])",
        f"GET /mcp?token={SECRET} HTTP/1.1\r\nAuthorization: Bearer {SECRET}\r\n",
    ]
    for sample in samples:
        assert SECRET not in redact_text(sample), redact_text(sample)


@pytest.mark.parametrize(
    "text", ["a." * (LONG // 2), "a+" * (LONG // 2), "1." * (LONG // 2)], ids=["dots", "pluses", "digits"]
)
def test_a_record_quoting_a_long_server_text_is_redacted_at_once(text: str) -> None:
    message = f'HTTP Request: GET https://h/x?token=secret "HTTP/1.1 200 {text}"'
    took = seconds_taken(lambda: redact_text(message))
    assert took < 1.0, f"{took:.1f}s to redact a {len(message)}-character record"
    assert "secret" not in redact_text(message)


def test_urls_are_redacted_as_they_were() -> None:
    assert redact_text("x https://u:p@h/p?q=1#f y") == "x https://h/p?*** y"
    assert redact_text("1.https://h/p?q=1 git+ssh://u@h/r?k=v") == "1.https://h/p?*** git+ssh://h/r?***"


@pytest.mark.parametrize("name", ["exmcp_actors.hub", "exmcp_actors.auth", "exmcp_actors.some.new.child", "authlib.x"])
def test_every_library_logger_is_redacted(everything: list[str], name: str) -> None:
    logging.getLogger(name).warning("fetching %s", f"https://u:{SECRET}@h/mcp?code={SECRET}&state={SECRET}")
    _assert_kept(everything, expect="https://h/mcp?***")


def test_every_logger_the_package_names_is_covered() -> None:
    from exmcp_actors._util._redact import covered

    package = Path(mcp.__file__).resolve().parent
    names = {
        match
        for path in package.rglob("*.py")
        for line in path.read_text(encoding="utf-8").splitlines()
        if ">>>" not in line  # a docstring example, not a logger the package uses
        for match in re.findall(r"getLogger\(\"([^\"]+)\"\)", line)
    }
    assert "exmcp_actors.hub" in names
    assert [name for name in names if not covered(name)] == []


def test_a_logged_tracebacks_last_line_keeps_its_message_and_a_dumped_header_does_not() -> None:
    # A dumped HTTP head's "Name: value" lines are masked; a traceback ends in such a line too
    # ("RuntimeError: why"), and masking that one hid why a library thread failed.
    try:
        raise RuntimeError(f"can't create new thread\nAuthorization: Bearer {SECRET}")
    except RuntimeError:
        record = logging.LogRecord("exmcp_actors", logging.ERROR, __file__, 1, "failed", None, sys.exc_info())
    from exmcp_actors._util._redact import RedactingFilter

    assert RedactingFilter().filter(record)
    assert record.exc_text is not None
    assert "RuntimeError: can't create new thread" in record.exc_text
    assert SECRET not in record.exc_text and "Authorization: ***" in record.exc_text
    assert redact_text(f"HTTP/1.1 200 OK\nWarning: 199 {SECRET}\n") == "HTTP/1.1 200 OK\nWarning: ***\n"
