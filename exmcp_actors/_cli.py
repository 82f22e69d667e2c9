"""``exmcp-watch``: point it at MCP servers and see what they push, one line per message.

    exmcp-watch [--era auto|legacy|modern] [--uri URI]... [--json] [--count N]
                [--config FILE] [--demo] [--catalog] [TARGET | -- COMMAND ARGS...]

TARGET is a ws/wss/http/https URL, or a server command after ``--``. ``--config``
reads an ``mcpServers`` file and watches every server in it; ``--demo`` runs the
embedded demo server. Ctrl-C disconnects and exits (status 130); ``--count N``
exits 0 after N notifications. ``--catalog`` prints the merged catalog, then its changes
(``_cli_catalog``). Also ``python -m exmcp_actors watch ...``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import queue
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import IO, Any, Final
from urllib.parse import urlsplit

from ._api._config import ConfigError, load_config
from ._api._hub import Hub
from ._cli_catalog import show_catalog
from ._cli_lines import PROG, say
from ._cli_resource import show_resource
from ._protocol._backoff import Backoff
from ._protocol._messages import CLOSED, NOTIFICATION, RECONNECTED
from ._protocol._peer_text import escape_unsafe

#: ``--demo`` watches this resource when no ``--uri`` is given.
DEMO_URI: Final = "demo://clock"
_EXIT_INTERRUPTED: Final = 130
_CLOSE_WAIT: Final = 0.8  # with the interrupted connect abandoned, Ctrl-C exits within 2 s
_COLOURS: Final = ("36", "35", "34", "32", "33", "96", "95")


class _Terminated(Exception):
    """SIGTERM: leave like Ctrl-C."""


class TerminalSafeFormatter(logging.Formatter):
    """Formats a record for a terminal: nothing in it can retitle the window, clear the screen,
    write the clipboard or forge a line.

    The message is one line, every control character escaped; a traceback keeps its lines,
    each escaped and indented, so no line of it can pass for a record of its own. The library
    escapes what servers say in its records already; this also covers every other logger, and
    a host that replaced the record factory.
    """

    def format(self, record: logging.LogRecord) -> str:
        record.message = record.getMessage()
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        text = escape_unsafe(self.formatMessage(record))
        # Formatted here rather than read from record.exc_text: another handler's formatter
        # may have cached an unescaped one there.
        blocks = [self.formatException(record.exc_info)] if record.exc_info else []
        if record.stack_info:
            blocks.append(self.formatStack(record.stack_info))
        for block in blocks:
            text += "".join(f"\n    {escape_unsafe(line)}" for line in block.split("\n"))
        return text


def _log_to(err: IO[str], verbose: bool) -> Callable[[], None]:
    """Send every log record to ``err`` (INFO and up with ``verbose``, else only CRITICAL),
    through a :class:`TerminalSafeFormatter`; returns what undoes it."""
    root = logging.getLogger()
    handler = logging.StreamHandler(err)
    handler.setFormatter(TerminalSafeFormatter(f"{PROG}: %(name)s: %(message)s"))
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO if verbose else logging.CRITICAL)

    def undo() -> None:
        root.removeHandler(handler)
        root.setLevel(level)

    return undo


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Watch what MCP servers push: list changes, resource updates, reconnects.",
        epilog="Examples: exmcp-watch --demo | exmcp-watch ws://localhost:8000/mcp --uri file:///a.txt | "
        "exmcp-watch -- python server.py | exmcp-watch --config servers.json. Ctrl-C to stop.",
    )
    parser.add_argument("--era", choices=("auto", "legacy", "modern"), default="auto", help="MCP era (default auto)")
    parser.add_argument("--uri", action="append", default=[], metavar="URI", help="a resource to watch (repeatable)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument(
        "--count", type=int, metavar="N", help="exit 0 after N notifications (N change lines with --catalog)"
    )
    parser.add_argument("--config", metavar="FILE", help='an {"mcpServers": {...}} file: watch every server in it')
    parser.add_argument("--demo", action="store_true", help="run and watch the embedded demo server")
    parser.add_argument(
        "--catalog", action="store_true", help="print the merged catalog once, then a line per change (+ - ~)"
    )
    parser.add_argument("--resource", metavar="URI", help="print a resource's contents, then again after each change")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the client does")
    parser.add_argument("target", nargs="?", help="a ws://, wss://, http:// or https:// URL")
    return parser


def _servers(args: argparse.Namespace, command: list[str], parser: argparse.ArgumentParser) -> Any:
    """The ``mcpServers`` config to watch (a dict, or the file's path), from whichever source was given."""
    sources = sum(bool(x) for x in (args.config, args.demo, args.target, command))
    if sources != 1:
        parser.error("give exactly one of TARGET, -- COMMAND ..., --config FILE or --demo")
    if args.config:
        load_config(args.config)  # checked here, so a bad file is one line and status 2
        return args.config
    if args.demo:
        # The child gets an allow-listed environment; PYTHONPATH lets it find this copy even when not installed.
        source_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        demo = {"command": sys.executable, "args": ["-m", "exmcp_actors._demo"], "env": {"PYTHONPATH": source_root}}
        return {"mcpServers": {"demo": demo}}
    if command:
        return {"mcpServers": {os.path.basename(command[0]): {"command": command[0], "args": command[1:]}}}
    parts = urlsplit(args.target)
    if parts.scheme.lower() not in ("ws", "wss", "http", "https") or not parts.hostname:
        parser.error(f"TARGET must be a ws://, wss://, http:// or https:// URL (or -- COMMAND), not {args.target!r}")
    name = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
    return {"mcpServers": {name: {"url": args.target}}}


class Printer:
    """One line per event, on ``out``: coloured text on a terminal, or JSON."""

    def __init__(self, out: IO[str], *, as_json: bool, colour: bool) -> None:
        self._out = out
        self._json = as_json
        self._colour = colour and not as_json
        self._server_colours: dict[str, str] = {}

    def _paint(self, code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self._colour else text

    def line(self, server: str, method: str, params: Any, *, kind: str = "notification") -> None:
        stamp = time.time()
        if self._json:
            text = json.dumps(
                {"time": round(stamp, 3), "server": server, "event": kind, "method": method, "params": params},
                default=str,
                separators=(",", ":"),
            )
        else:
            clock = time.strftime("%H:%M:%S", time.localtime(stamp)) + f".{int(stamp % 1 * 1000):03d}"
            colour = self._server_colours.setdefault(server, _COLOURS[len(self._server_colours) % len(_COLOURS)])
            shown = json.dumps(params, default=str) if params not in ({}, None) else ""
            method_colour = {"notification": "33", "reconnected": "35", "closed": "31"}.get(kind, "32")
            # The JSON escapes every control character (ensure_ascii); the names are escaped here.
            server, method = escape_unsafe(server), escape_unsafe(method)
            text = f"{self._paint('2', clock)}  {self._paint(colour, server)}  {self._paint(method_colour, method)}"
            text = f"{text}  {shown}" if shown else text
        print(text, file=self._out, flush=True)

    def message(self, message: Any) -> str:
        """Print a watch message; returns its kind."""
        name = message[1].client.name
        tag = message[0]
        if tag == NOTIFICATION:
            self.line(name, message.method, message.params)
            return "notification"
        if tag == RECONNECTED:
            report = {"resubscribed": message.report["resubscribed"], "failed": message.report["failed"]}
            self.line(name, "reconnected", report, kind="reconnected")
            return "reconnected"
        if tag == CLOSED:
            self.line(name, "closed", {"reason": message.reason}, kind="closed")
            return "closed"
        return "other"


def _connected_line(printer: Printer, client: Any) -> None:
    info = client.server_info or {}
    params = {
        "protocolVersion": client.protocol_version,
        "era": client.era,
        "serverInfo": {"name": info.get("name"), "version": info.get("version")},
    }
    printer.line(client.name, "connected", params, kind="connected")


def _watch_filter(uris: list[str]) -> dict[str, Any]:
    flt: dict[str, Any] = {"toolsListChanged": True, "promptsListChanged": True, "resourcesListChanged": True}
    if uris:
        flt["resourceSubscriptions"] = uris
    return flt


def run(argv: list[str], out: IO[str], err: IO[str]) -> int:
    """The command, with its streams; returns the exit status."""
    parser = _parser()
    command: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, command = argv[:at], argv[at + 1 :]
    args = parser.parse_args(argv)
    if args.count is not None and args.count < 1:
        parser.error("--count must be a positive number")
    if args.resource is not None and (args.catalog or args.uri):
        parser.error("--resource shows one resource's contents: give it without --catalog and --uri")
    if args.catalog and args.uri:
        parser.error("--uri watches a resource's content; --catalog shows only the lists: give one of them")
    undo_logging = _log_to(err, args.verbose)
    try:
        return _run(args, command, parser, out, err)
    finally:
        undo_logging()


def _run(
    args: argparse.Namespace, command: list[str], parser: argparse.ArgumentParser, out: IO[str], err: IO[str]
) -> int:
    try:
        config = _servers(args, command, parser)
    except ConfigError as exc:
        say(err, str(exc))
        return 2
    uris = args.uri or ([DEMO_URI] if args.demo else [])
    printer = Printer(out, as_json=args.json, colour=out.isatty() and "NO_COLOR" not in os.environ)
    hub: Hub | None = None
    try:
        hub = Hub.from_config(
            config,
            protocol=args.era,
            backoff=Backoff(initial=0.2, factor=2.0, maximum=2.0, jitter=0.2),  # a watcher wants the server back soon
        )
        for name, error in hub.errors.items():
            say(err, f"cannot connect to {name}: {error}")
        if not hub.clients:
            return 1
        if args.resource is not None:
            return show_resource(hub, args.resource, out, err, as_json=args.json, count=args.count)
        if args.catalog:
            return show_catalog(hub, out, err, as_json=args.json, count=args.count)
        watch = hub.watch(_watch_filter(uris))
        for name, error in watch.errors.items():
            say(err, f"cannot watch {name}: {error}")
        if not watch.handles:
            return 1
        for name in watch.handles:
            _connected_line(printer, hub.clients[name])  # connected, and watching
        return _loop(watch, printer, args.count)
    except (KeyboardInterrupt, _Terminated):
        return _EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
    finally:
        if hub is not None:
            _close_quietly(hub)


def _loop(watch: Any, printer: Printer, count: int | None) -> int:
    open_handles = len(watch.handles)
    seen = 0
    failed = False
    while True:
        try:
            message = watch.get(timeout=0.5)  # short, so a signal is handled promptly everywhere
        except queue.Empty:
            continue
        kind = printer.message(message)
        if kind == "notification":
            seen += 1
            if count is not None and seen >= count:
                return 0
        elif kind == "closed":
            failed = failed or message.reason != "disconnected"
            open_handles -= 1
            if open_handles == 0:
                return 1 if failed else 0


def _close_quietly(hub: Hub) -> None:
    # A second Ctrl-C while closing must not print a traceback either.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        hub.close(timeout=_CLOSE_WAIT)
    finally:
        signal.signal(signal.SIGINT, previous)


def _on_sigterm(signum: int, frame: Any) -> None:
    raise _Terminated


def main(argv: list[str] | None = None) -> int:
    """The ``exmcp-watch`` console script."""
    if threading.current_thread() is threading.main_thread():
        # Started in the background by a shell, SIGINT arrives ignored: Ctrl-C must still work.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return run(sys.argv[1:] if argv is None else argv, sys.stdout, sys.stderr)
    except KeyboardInterrupt:
        return _EXIT_INTERRUPTED
    except Exception:  # a bug of ours: its traceback may quote what a server said
        lines = traceback.format_exc().rstrip("\n").split("\n")
        print("\n".join(escape_unsafe(line) for line in lines), file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
