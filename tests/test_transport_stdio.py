"""StdioTransport against tiny child processes, and the line splitter on its own."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers_transport import (
    ECHO,
    IGNORES_SIGTERM,
    NEVER_READS,
    WAIT,
    LogWaiter,
    RecordingSink,
    burst,
    exmcp_threads,
    invalid,
    join_exmcp_threads,
    py,
    send_from_four_threads_and_check_order,
    writes,
)

from exmcp_actors._protocol._errors import TransportError
from exmcp_actors._transport._base import InvalidFrame
from exmcp_actors._transport._framing import LineSplitter
from exmcp_actors._transport.stdio._process import DEFAULT_INHERITED_ENV_VARS, StdioTransport

MakeTransport = Callable[..., StdioTransport]


@pytest.fixture
def make() -> Iterator[MakeTransport]:
    """Build transports that are closed after the test, and check no thread is left."""
    made: list[StdioTransport] = []

    def factory(argv: list[str], **kwargs: Any) -> StdioTransport:
        transport = StdioTransport(argv, **kwargs)
        made.append(transport)
        return transport

    yield factory
    for transport in made:
        transport.close()
    assert join_exmcp_threads() == []


def opened(make: MakeTransport, argv: list[str], **kwargs: Any) -> tuple[StdioTransport, RecordingSink]:
    transport = make(argv, **kwargs)
    sink = RecordingSink()
    transport.open(sink, timeout=WAIT)
    return transport, sink


def child(transport: StdioTransport) -> subprocess.Popen[bytes]:
    """The Popen object of the current connection (white box, for poll())."""
    conn = transport._slot.current
    assert conn is not None
    return conn.proc


# -- reading and writing ---------------------------------------------------------


def test_a_message_sent_comes_back_from_an_echoing_child(make: MakeTransport) -> None:
    transport, sink = opened(make, ECHO)
    message = {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"s": "é ✓"}}

    transport.send(message)

    assert sink.wait_frames(1) == [message]
    assert sink.threads == {"exmcp-stdio-reader"}


def test_messages_go_out_as_compact_utf8_lines(make: MakeTransport) -> None:
    transport, sink = opened(
        make,
        py(
            """
            import json, sys
            line = sys.stdin.buffer.readline()
            sys.stdout.write(json.dumps({"raw": line.decode("utf-8")}) + "\\n")
            sys.stdout.flush()
            sys.stdin.read()
            """
        ),
    )

    transport.send({"a": "é", "b": [1, 2], "c": "line\nbreak"})

    assert sink.wait_frames(1) == [{"raw": '{"a":"é","b":[1,2],"c":"line\\nbreak"}\n'}]


def test_a_burst_of_lines_arrives_in_few_batches_and_in_order(
    make: MakeTransport,
) -> None:
    _, sink = opened(make, burst(1000))

    frames = sink.wait_frames(1000)

    assert frames == [{"n": i} for i in range(1000)]
    assert len(sink.batches) < 50, f"{len(sink.batches)} batches for 1000 lines"


def test_malformed_json_becomes_an_invalid_frame_and_reading_goes_on(
    make: MakeTransport,
) -> None:
    _, sink = opened(make, writes(b'{"ok":1}\nnot json\n{"ok":2}\n'))

    frames = sink.wait_frames(3)

    assert frames[0] == {"ok": 1}
    assert frames[2] == {"ok": 2}
    assert isinstance(frames[1], InvalidFrame)
    assert "invalid JSON" in frames[1].error
    assert frames[1].raw == b"not json"


def test_blank_lines_and_crlf_endings_are_accepted(make: MakeTransport) -> None:
    _, sink = opened(make, writes(b'\n\r\n   \n{"a":1}\r\n {"b":2} \n'))

    assert sink.wait_frames(2) == [{"a": 1}, {"b": 2}]


def test_a_line_with_bad_utf8_becomes_an_invalid_frame(make: MakeTransport) -> None:
    _, sink = opened(make, writes(b'{"a":"\xff"}\n{"b":1}\n'))

    frames = sink.wait_frames(2)

    assert isinstance(frames[0], InvalidFrame)
    assert "invalid UTF-8" in frames[0].error
    assert frames[1] == {"b": 1}


def test_an_oversized_line_becomes_one_invalid_frame(make: MakeTransport) -> None:
    big = b'{"big":"' + b"x" * 500 + b'"}'
    _, sink = opened(make, writes(big + b'\n{"after":1}\n'), max_frame_bytes=100)

    frames = sink.wait_frames(2)

    assert len(frames) == 2
    assert isinstance(frames[0], InvalidFrame)
    assert "oversized" in frames[0].error
    assert frames[1] == {"after": 1}


def test_an_oversized_line_written_in_pieces_is_skipped_as_it_comes(
    make: MakeTransport,
) -> None:
    pieces = (b'{"a":"', b"x" * 800, b"x" * 800, b"x" * 800, b'"}\n{"after":1}\n')
    _, sink = opened(make, writes(*pieces), max_frame_bytes=1000)

    frames = sink.wait_frames(2)

    assert len(frames) == 2
    assert "oversized" in frames[0].error
    assert frames[1] == {"after": 1}


def test_an_unterminated_last_line_is_decoded_at_end_of_stream(
    make: MakeTransport,
) -> None:
    # startup_grace=0: a child this quick would otherwise count as "exited at once".
    script = writes(b'{"first":1}\n{"last":2}', then_exit=0)
    _, sink = opened(make, script, startup_grace=0)

    sink.wait_lost()

    assert sink.frames == [{"first": 1}, {"last": 2}]


def test_env_is_laid_over_the_inherited_environment_and_cwd_is_used(make: MakeTransport, tmp_path: Path) -> None:
    script = py(
        """
        import json, os, sys
        print(json.dumps({"x": os.environ.get("EXMCP_X"), "path": "PATH" in os.environ,
                          "cwd": os.getcwd()}), flush=True)
        sys.stdin.read()
        """
    )
    _, sink = opened(make, script, env={"EXMCP_X": "y"}, cwd=str(tmp_path))

    assert sink.wait_frames(1) == [{"x": "y", "path": True, "cwd": str(tmp_path)}]


ENV_DUMP = py(
    """
    import json, os, sys
    print(json.dumps(dict(os.environ)), flush=True)
    sys.stdin.read()
    """
)


def test_the_child_inherits_only_the_allow_listed_environment_plus_env(
    make: MakeTransport, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXMCP_SECRET_TOKEN", "hunter2")
    monkeypatch.setenv("SHELL", "() { :; }; echo pwned")  # an exported shell function is never passed on

    _, sink = opened(make, ENV_DUMP, env={"EXMCP_GIVEN": "1", "TERM": "given-wins"})

    env = sink.wait_frames(1)[0]
    assert "EXMCP_SECRET_TOKEN" not in env
    assert env["EXMCP_GIVEN"] == "1" and env["TERM"] == "given-wins"
    assert env["PATH"] == os.environ["PATH"] and "SHELL" not in env
    inherited = set(env) - {"EXMCP_GIVEN"} - _ADDED_BY_THE_CHILD
    assert inherited <= set(DEFAULT_INHERITED_ENV_VARS), inherited


def test_inherit_env_passes_the_whole_environment(make: MakeTransport, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXMCP_SECRET_TOKEN", "hunter2")

    _, sink = opened(make, ENV_DUMP, inherit_env=True, env={"EXMCP_GIVEN": "1"})

    env = sink.wait_frames(1)[0]
    assert env["EXMCP_SECRET_TOKEN"] == "hunter2" and env["EXMCP_GIVEN"] == "1"


#: Variables the Python runtime of the child sets for itself (not inherited from us).
_ADDED_BY_THE_CHILD = {"LC_CTYPE", "__CF_USER_TEXT_ENCODING", "PYTHONUNBUFFERED"}


def test_argv_beyond_the_program_stays_out_of_reprs_and_errors() -> None:
    transport = StdioTransport(["/nonexistent/server", "--token", "hunter2"])
    assert "hunter2" not in repr(transport)
    with pytest.raises(TransportError) as info:
        transport.open(lambda frames: None, timeout=1.0)  # type: ignore[arg-type]
    assert "hunter2" not in str(info.value) and "/nonexistent/server" in str(info.value)


def test_send_never_blocks_on_a_child_that_does_not_read(make: MakeTransport) -> None:
    transport, sink = opened(make, NEVER_READS, stop_timeout=1.0)
    sink.wait_frames(1)
    payload = "x" * 10_000

    started = time.monotonic()
    for i in range(2000):  # 20 MB, far beyond the pipe's 64 KiB
        transport.send({"i": i, "p": payload})
    queued_in = time.monotonic() - started

    assert queued_in < 5.0
    transport.close()
    assert exmcp_threads() == []


def test_many_threads_may_send_at_once(make: MakeTransport) -> None:
    transport, sink = opened(make, ECHO)
    send_from_four_threads_and_check_order(transport, sink)


def test_a_message_json_cannot_encode_raises_type_error(make: MakeTransport) -> None:
    transport, _ = opened(make, ECHO)

    with pytest.raises(TypeError):
        transport.send({"x": object()})


# -- stderr --------------------------------------------------------------------


def test_each_stderr_line_is_logged_at_info_with_the_server_name(
    make: MakeTransport,
) -> None:
    with LogWaiter("exmcp_actors.stdio", "hello from the server") as log:
        transport, _ = opened(make, ECHO, name="echo-server")
        transport.send({"method": "stderr", "params": {"text": "hello from the server"}})

        record = log.wait()

    assert record.levelname == "INFO"
    assert record.getMessage() == "[echo-server] hello from the server"


# -- losses --------------------------------------------------------------------


def test_the_exit_code_is_in_the_loss_reason_reported_once(make: MakeTransport) -> None:
    transport, sink = opened(make, ECHO)

    transport.send({"method": "exit", "params": {"code": 3}})

    assert "exit code 3" in sink.wait_lost()
    assert join_exmcp_threads() == []  # the threads end by themselves
    assert len(sink.lost) == 1


def test_the_loss_reason_quotes_the_last_stderr_line(make: MakeTransport) -> None:
    script = py(
        """
        import sys
        sys.stdin.readline()
        sys.stderr.write("boom: config missing\\n")
        sys.exit(2)
        """
    )
    transport, sink = opened(make, script)

    transport.send({"go": True})

    reason = sink.wait_lost()
    assert "exit code 2" in reason
    assert "boom: config missing" in reason


def test_send_after_a_loss_raises_transport_error(make: MakeTransport) -> None:
    transport, sink = opened(make, ECHO)
    transport.send({"method": "exit", "params": {"code": 0}})
    sink.wait_lost()

    with pytest.raises(TransportError, match="lost"):
        transport.send({"method": "ping"})


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs a pidfd (Linux)")
def test_the_death_of_the_child_is_noticed_while_a_grandchild_holds_stdout(
    make: MakeTransport,
) -> None:
    script = ["sh", "-c", 'sleep 60 & echo "{\\"pid\\": $!}"; read line; exit 5']
    transport, sink = opened(make, script)
    grandchild = sink.wait_frames(1)[0]["pid"]
    try:
        transport.send({"go": True})

        reason = sink.wait_lost()
    finally:
        os.kill(grandchild, signal.SIGKILL)

    assert "process exited" in reason
    assert "exit code 5" in reason


# -- opening ------------------------------------------------------------------


def test_open_raises_for_a_program_that_does_not_exist(make: MakeTransport) -> None:
    transport = make(["/nonexistent/mcp-server"])

    with pytest.raises(TransportError, match="cannot start"):
        transport.open(RecordingSink(), timeout=WAIT)
    assert exmcp_threads() == []


def test_open_raises_for_a_child_that_exits_at_once(make: MakeTransport) -> None:
    script = py("import sys; sys.stderr.write('bad config\\n'); sys.exit(4)")
    transport = make(script, startup_grace=WAIT)  # wait returns at the exit

    with pytest.raises(TransportError, match="exit code 4") as caught:
        transport.open(RecordingSink(), timeout=WAIT)
    assert "bad config" in str(caught.value)
    assert exmcp_threads() == []


def test_open_after_a_loss_starts_a_new_process(make: MakeTransport) -> None:
    transport, first = opened(make, ECHO)
    transport.send({"method": "pid"})
    old_pid = first.wait_frames(1)[0]["pid"]
    transport.send({"method": "exit", "params": {"code": 1}})
    first.wait_lost()

    second = RecordingSink()
    transport.open(second, timeout=WAIT)
    transport.send({"method": "pid"})

    new_pid = second.wait_frames(1)[0]["pid"]
    assert new_pid != old_pid
    assert new_pid == transport.pid
    assert first.frames == [{"pid": old_pid}]
    assert len(first.lost) == 1
    assert second.lost == []


# -- closing ------------------------------------------------------------------


def test_close_leaves_no_thread_no_process_and_reports_no_loss(
    make: MakeTransport,
) -> None:
    transport, sink = opened(make, ECHO)
    transport.send({"ready": True})
    sink.wait_frames(1)
    proc = child(transport)

    transport.close()

    assert exmcp_threads() == []
    assert proc.poll() is not None
    assert sink.lost == []
    with pytest.raises(TransportError, match="not open"):
        transport.send({"after": "close"})


def test_close_kills_a_child_that_ignores_sigterm(make: MakeTransport) -> None:
    transport, sink = opened(make, IGNORES_SIGTERM, stop_timeout=0.3)
    sink.wait_frames(1)  # the SIGTERM handler is in place
    proc = child(transport)

    with LogWaiter("exmcp_actors.transport", "SIGKILL") as log:
        started = time.monotonic()
        transport.close()
        took = time.monotonic() - started
        log.wait(0)

    assert proc.returncode == -signal.SIGKILL
    assert took < 3.0
    assert exmcp_threads() == []
    assert sink.lost == []


def test_close_is_idempotent_and_harmless_before_open(make: MakeTransport) -> None:
    transport = make(ECHO)
    transport.close()
    transport.open(RecordingSink(), timeout=WAIT)

    transport.close()
    transport.close()

    assert exmcp_threads() == []


def test_argv_must_be_a_list() -> None:
    with pytest.raises(ValueError, match="argv"):
        StdioTransport("python server.py")


def test_describe_names_the_script_an_interpreter_runs() -> None:
    assert StdioTransport(["python3", "-u", "srv/server.py"]).describe() == "stdio python3 server.py"
    assert StdioTransport(["npx", "-y", "@scope/pkg"]).describe() == "stdio npx pkg"
    assert StdioTransport(["/usr/bin/my-server", "--x"]).describe() == "stdio my-server"


# -- the line splitter --------------------------------------------------------

STREAM = '{"a":1}\n\n{"é":"ü✓𝄞"}\r\n  {"b":[1,2]}  \nnot json\n{"c":"\\n"}\n'.encode()
EXPECTED_ERRORS = 1


def split_frames(chunks: list[bytes], max_frame_bytes: int = 1 << 20) -> list[Any]:
    splitter = LineSplitter(max_frame_bytes)
    frames: list[Any] = []
    for chunk in chunks:
        frames.extend(splitter.feed(chunk))
    frames.extend(splitter.finish())
    return frames


def test_splitting_the_stream_anywhere_gives_the_same_frames() -> None:
    whole = split_frames([STREAM])
    assert [f for f in whole if not isinstance(f, InvalidFrame)] == [
        {"a": 1},
        {"é": "ü✓𝄞"},
        {"b": [1, 2]},
        {"c": "\n"},
    ]
    assert len(invalid(whole)) == EXPECTED_ERRORS

    for cut in range(len(STREAM) + 1):
        assert split_frames([STREAM[:cut], STREAM[cut:]]) == whole, cut
    rng = random.Random(7)
    for _ in range(200):
        cuts = sorted(rng.sample(range(len(STREAM)), 6))
        chunks = [STREAM[a:b] for a, b in zip([0, *cuts], [*cuts, len(STREAM)], strict=True)]
        assert split_frames(chunks) == whole


def test_the_splitter_drops_an_oversized_line_without_holding_it() -> None:
    splitter = LineSplitter(max_frame_bytes=1500)
    out: list[Any] = splitter.feed(b'{"ok":0}\n{"x":"')
    for _ in range(10):
        out += splitter.feed(b"x" * 1000)
        assert splitter._parts_len <= 1500  # never buffers past the limit
    out += splitter.feed(b'"}\n{"ok":1}\n')

    assert out[0] == {"ok": 0}
    assert len(invalid(out)) == 1
    assert "oversized" in out[1].error
    assert out[2:] == [{"ok": 1}]


def test_a_line_exactly_at_the_limit_is_accepted() -> None:
    line = json.dumps({"x": "y" * 50}).encode()
    assert split_frames([line + b"\n"], max_frame_bytes=len(line)) == [{"x": "y" * 50}]
    assert "oversized" in split_frames([line + b"\n"], max_frame_bytes=len(line) - 1)[0].error


def test_deeply_nested_json_is_an_invalid_frame_not_a_crash() -> None:
    frames = split_frames([b"[" * 100_000 + b"]" * 100_000 + b"\n[1]\n"])

    assert isinstance(frames[0], InvalidFrame)
    assert frames[1] == [1]


def test_the_benchmark_child_is_runnable() -> None:
    """Keeps benchmarks/transport_raw.py honest: its flood script runs."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    try:
        import transport_raw
    finally:
        sys.path.pop(0)
    rate, batches = transport_raw.transport_round(2000)
    assert rate > 0
    assert batches < 2000


def test_a_sink_may_close_the_transport_from_its_loss_callback(
    make: MakeTransport,
) -> None:
    transport = make(ECHO)
    closed = threading.Event()

    class ClosingSink(RecordingSink):
        def transport_lost(self, reason: str) -> None:
            super().transport_lost(reason)
            transport.close()  # on the reader thread, re-entrantly
            closed.set()

    sink = ClosingSink()
    transport.open(sink, timeout=WAIT)
    transport.send({"method": "exit", "params": {"code": 0}})

    assert closed.wait(WAIT)
    assert join_exmcp_threads() == []
    assert len(sink.lost) == 1
