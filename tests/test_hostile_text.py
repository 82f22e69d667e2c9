"""A hostile server's words (error messages, stderr lines, log notifications, names, reason
phrases, frames that are no JSON-RPC) reach our log records, our errors' texts and the
terminal ``exmcp-watch`` writes to escaped: nothing they carry can retitle the window, clear
the screen, write the clipboard (OSC 52) or forge a line."""

from __future__ import annotations

import io
import json
import logging
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hostile_text import no_raw_control, raw_in_output, raw_in_texts
from raw_http import WAIT, Exchange, RawHttp, legacy_basics

import exmcp_actors as mcp
from exmcp_actors import _cli
from exmcp_actors._protocol._peer_text import escape_unsafe
from tests.cli_helpers import run_cli
from tests.peers.hostile_stdio import HOSTILE

PEER = Path(__file__).resolve().parent / "peers" / "hostile_stdio.py"
#: How the start of :data:`HOSTILE` reads once escaped.
ESCAPED = "\\x1b]0;pwned\\x07\\x1b[2J"
#: The colours ``exmcp-watch`` paints on a terminal (SGR), and nothing else.
OUR_COLOURS = re.compile("\x1b\\[[0-9;]*m")


def hostile_stdio(mode: str) -> list[str]:
    return [sys.executable, str(PEER), mode]


class Seen(logging.Handler):
    """Sets ``event`` at the first record of its logger whose message holds ``text``."""

    def __init__(self, text: str) -> None:
        super().__init__(logging.DEBUG)
        self.text = text
        self.event = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.event.set()


@pytest.fixture
def seen() -> Iterator[Callable[[str, str], threading.Event]]:
    """``seen(logger, text)``: an event set once ``logger`` logs a record holding ``text``."""
    added: list[tuple[logging.Logger, Seen]] = []

    def watch(name: str, text: str) -> threading.Event:
        handler = Seen(text)
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        added.append((logger, handler))
        return handler.event

    yield watch
    for logger, handler in added:
        logger.removeHandler(handler)


def error_texts(*errors: BaseException) -> list[str]:
    return [text for error in errors for text in (str(error), repr(error))]


# -- the library: records and error texts ------------------------------------------------------


def test_a_hostile_stdio_server_reaches_no_record_and_no_error_text_raw(
    caplog: pytest.LogCaptureFixture, seen: Callable[[str, str], threading.Event]
) -> None:
    caplog.set_level(logging.DEBUG)
    with pytest.raises(mcp.ConnectError) as refused:  # an initialize error, and a stderr line
        mcp.connect(hostile_stdio("refuse"), protocol="legacy", reconnect=False, connect_timeout=WAIT)

    stderr_line = seen("exmcp_actors.stdio", "forged line")
    with mcp.connect(hostile_stdio("chatty"), protocol="legacy", reconnect=False, connect_timeout=WAIT) as client:
        assert stderr_line.wait(WAIT)
        listener = client.subscribe_notifications({"toolsListChanged": True, "logMessages": True})
        methods = {listener.get(timeout=WAIT).method for _ in range(4)}  # log notifications, list changes
        assert methods == {"notifications/message", "notifications/tools/list_changed"}
        with pytest.raises(mcp.RequestError) as answered:  # an error response
            client.request("tools/list", timeout=WAIT)
        with pytest.raises(mcp.Error) as not_subscribed:
            client.subscribe_notifications({"resourceSubscriptions": ["file:///a"]})
        assert client.server_info == {"name": HOSTILE, "version": HOSTILE}  # the data, as it came

    errors = (refused.value, answered.value, not_subscribed.value)
    assert raw_in_texts(*error_texts(*errors)) == []
    assert no_raw_control(caplog.records) == []
    messages = [record.getMessage() for record in caplog.records]
    shown = "\n".join(messages + error_texts(*errors))
    assert ESCAPED in shown  # escaped, not dropped
    # The stderr lines, the initialize error, the bad frames, the unknown server request:
    assert any(m.startswith("[") and "forged line" in m for m in messages)
    assert any("initialize failed" in m for m in messages)
    assert any("skipped an invalid frame" in m for m in messages)
    assert any("is not supported; answering -32601" in m for m in messages)


def test_a_hostile_http_server_reaches_no_record_and_no_error_text_raw(caplog: pytest.LogCaptureFixture) -> None:
    # A reason phrase may carry any byte but CR and LF: httpx logs it raw at INFO.
    reason = "Busy\x1b]0;pwned\x07\x1b[2J\x9b31m"
    listening = threading.Event()

    def answer(exchange: Exchange) -> bool:
        if legacy_basics(exchange):
            return True
        if exchange.method == "GET":  # the GET stream: an odd event type, bad JSON, a message, the end
            listening.wait(WAIT)
            events = [f"event: {HOSTILE}\ndata: {{}}", f"data: {HOSTILE} not json", "data: " + json.dumps(LOG)]
            body = "retry: 60000\n" + "".join(f"{event}\n\n" for event in events)
            exchange.whole("200 OK", body.encode(), content_type="text/event-stream")
            return True
        if exchange.rpc_method == "resources/subscribe":  # an error response
            exchange.whole("200 OK", json.dumps(ERROR | {"id": exchange.body["id"]}).encode())
            return True
        exchange.whole(f"503 {reason}", HOSTILE.encode(), content_type="text/plain")
        return True

    caplog.set_level(logging.DEBUG)
    with RawHttp(answer) as server:
        with mcp.connect(mcp.HttpTransport(server.url), protocol="legacy", reconnect=False) as client:
            listener = client.subscribe_notifications({"logMessages": True})
            listening.set()
            assert listener.get(timeout=WAIT).params == LOG["params"]
            with pytest.raises(mcp.ExchangeFailed) as failed:
                client.request("tools/list", timeout=WAIT)
            with pytest.raises(mcp.Error) as not_subscribed:
                client.subscribe_notifications({"resourceSubscriptions": ["file:///a"]})

    assert raw_in_texts(*error_texts(failed.value, not_subscribed.value)) == []
    assert no_raw_control(caplog.records) == []
    messages = [record.getMessage() for record in caplog.records]
    assert any(record.name == "httpx" and "503 Busy\\x1b]0;pwned" in record.getMessage() for record in caplog.records)
    assert any("ignored SSE event of type" in m for m in messages)
    assert any("skipped an invalid frame" in m for m in messages)


LOG = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": HOSTILE}}
ERROR = {"jsonrpc": "2.0", "error": {"code": -32000, "message": HOSTILE, "data": HOSTILE}}


# -- exmcp-watch: what reaches the terminal ----------------------------------------------------


def watch(*args: str) -> subprocess.CompletedProcess[bytes]:
    """``exmcp-watch ARGS`` to its end: its status, and stdout and stderr as the terminal gets them."""
    return run_cli(*args, raw=True)


@pytest.mark.parametrize("mode", [[], ["--json"]])
def test_exmcp_watch_writes_what_a_hostile_server_says_escaped_on_stdout_and_through_its_logs(mode: list[str]) -> None:
    done = watch("-v", "--count", "2", *mode, "--", *hostile_stdio("chatty"))
    assert done.returncode == 0, done.stderr
    assert raw_in_output(done.stdout) == [] and raw_in_output(done.stderr) == []
    stdout, stderr = done.stdout.decode(), done.stderr.decode()
    assert "\\u001b]0;pwned" in stdout  # the server's name and params, as JSON escapes them
    assert "exmcp-watch: exmcp_actors.stdio: [" in stderr  # its stderr lines
    assert ESCAPED in stderr  # its stderr lines and what the library logged of it
    assert all(line.startswith(("exmcp-watch: ", "    ")) for line in stderr.splitlines())  # no forged line


def test_exmcp_watch_writes_a_hostile_servers_refusal_as_one_escaped_line() -> None:
    done = watch("--", *hostile_stdio("refuse"))
    assert done.returncode == 1 and done.stdout == b""
    (line,) = done.stderr.decode().splitlines()
    assert line.startswith("exmcp-watch: cannot connect to") and ESCAPED in line
    assert raw_in_output(done.stderr) == []


def test_exmcp_watch_writes_a_hostile_servers_error_answer_as_one_escaped_line() -> None:
    done = watch("--uri", "file:///a", "--", *hostile_stdio("chatty"))
    assert done.returncode == 1
    (line,) = done.stderr.decode().splitlines()
    assert line.startswith("exmcp-watch: cannot watch") and ESCAPED in line
    assert raw_in_output(done.stdout) == [] and raw_in_output(done.stderr) == []


def test_exmcp_watch_writes_a_dependencys_record_of_a_hostile_reason_phrase_escaped() -> None:
    def answer(exchange: Exchange) -> bool:
        exchange.whole("503 Busy\x1b]0;pwned\x07\x1b[2J\x9b31m", b"", content_type="text/plain")
        return True

    with RawHttp(answer) as server:
        done = watch("-v", "--era", "legacy", server.url)
    assert done.returncode == 1
    stderr = done.stderr.decode()
    assert "exmcp-watch: httpx: HTTP Request: POST" in stderr and "503 Busy\\x1b]0;pwned\\x07\\x1b[2J" in stderr
    assert raw_in_output(done.stderr) == []


def test_the_text_mode_on_a_terminal_keeps_only_its_own_colours() -> None:
    out = io.StringIO()
    printer = _cli.Printer(out, as_json=False, colour=True)
    printer.line(HOSTILE, HOSTILE, {"data": HOSTILE})
    printer.line(HOSTILE, "closed", {"reason": HOSTILE}, kind="closed")
    coloured = out.getvalue()
    assert "\x1b[" in coloured  # its colours
    shown = OUR_COLOURS.sub("", coloured)
    assert raw_in_output(shown.encode()) == []
    assert ESCAPED in shown  # the server's name, escaped


def test_the_log_format_of_exmcp_watch_escapes_a_record_and_indents_its_traceback() -> None:
    formatter = _cli.TerminalSafeFormatter("exmcp-watch: %(name)s: %(message)s")
    try:
        raise ValueError(HOSTILE)
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "said %s", (HOSTILE,), sys.exc_info())
    record.exc_text = "cached by another handler\x1b[2J"  # never used as it is
    lines = formatter.format(record).split("\n")
    assert lines[0] == f"exmcp-watch: x: said {escape_unsafe(HOSTILE)}"  # one line, all of it escaped
    assert "\\x0d\\x0aexmcp-watch: forged line\\x9b31m\\u202e\\x7f" in lines[0]
    assert len(lines) > 2 and all(line.startswith("    ") for line in lines[1:])
    assert raw_in_output(formatter.format(record).encode()) == []


def run_here(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return _cli.run(list(args), out, err), out.getvalue(), err.getvalue()


def test_exmcp_watch_in_process_logs_to_its_own_stderr_and_leaves_the_root_logger_as_it_was() -> None:
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    rc, _, err = run_here("-v", "--", *hostile_stdio("refuse"))
    assert rc == 1
    assert "exmcp-watch: exmcp_actors.stdio: [" in err and ESCAPED in err
    assert raw_in_output(err.encode()) == []
    assert (root.level, root.handlers) == (level, handlers)
