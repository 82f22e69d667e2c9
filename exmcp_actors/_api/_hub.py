"""A hub of servers: every server of an ``mcpServers`` config, connected in parallel, watched as one.

Like fastmcp's multi-server ``Client(config)``, but each server keeps its own
:class:`Client` (nothing is renamed or prefixed): messages and merged catalog
items say which server they come from. :meth:`Hub.call_tool` routes ``"server/tool"``
or a bare tool name (``_hub_routing``); a hub catalog tracks the names more than one
server has (``_hub_collisions``).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from .._delivery._bound import DEFAULT_MAX_PENDING, Bound, check_max_pending
from .._delivery._inbox import Inbox, LatestInbox, catalog_key, coalesce_catalog, withdrawn_by_catalog
from .._delivery._targets import resolve_subscriber
from .._protocol._errors import Error
from .._util._threads import start_daemon
from ._catalog import KINDS, Catalog
from ._client import Client
from ._config import ServerSpec, load_config
from ._connect import connect, spec_transport
from ._handle import Handle
from ._hub_collisions import CollisionFeed
from ._hub_routing import ListedTools, resolve_tool
from ._lists import Meta

logger = logging.getLogger("exmcp_actors.hub")
_G = TypeVar("_G", bound="_Group")
#: connect() options every server entry sets itself.
_PER_SERVER = frozenset(("name", "env", "cwd", "auth"))


def _disconnect_late(future: Future[Client]) -> None:
    """A connect that ended after the hub gave up: its server must not outlive the hub."""
    if future.cancelled() or future.exception() is not None:
        return
    future.result().disconnect(timeout=2.0)


class _Group:
    """Handles on several clients whose messages share one inbox (unless a subscriber was given)."""

    def __init__(self, subscriber: Any, inbox: Callable[[], Inbox] = Inbox) -> None:
        self._inbox = inbox() if subscriber is None else None
        self.subscriber = subscriber if subscriber is not None else self._inbox
        self.handles: dict[str, Handle] = {}
        #: name -> why that server has no handle here.
        self.errors: dict[str, BaseException] = {}

    def _add(self, clients: Mapping[str, Client], make: Callable[[Client], Handle]) -> None:
        for name, client in clients.items():
            try:
                self.handles[name] = make(client)
            except Error as exc:
                self.errors[name] = exc

    def _inbox_or_raise(self) -> Inbox:
        if self._inbox is None:
            raise RuntimeError("messages go to the subscriber given, not to an inbox here")
        return self._inbox

    def get(self, timeout: float | None = None) -> Any:
        """The next message from any server (``msg[1].client.name`` tells which).

        Raises:
            queue.Empty: nothing arrived in time.
        """
        return self._inbox_or_raise().get(timeout)

    def get_nowait(self) -> Any:
        """The next message if one is waiting (else ``queue.Empty``)."""
        return self._inbox_or_raise().get(0)

    def pending(self) -> int:
        return len(self._inbox_or_raise())

    def __iter__(self) -> Iterator[Any]:
        """Every message, until closed."""
        inbox = self._inbox_or_raise()
        while True:
            try:
                yield inbox.get()
            except queue.Empty:
                return

    def close(self) -> None:
        """Close every handle; iteration ends once the inbox is drained. Idempotent."""
        for handle in self.handles.values():
            handle.close()
        if self._inbox is not None:
            self._inbox.finish()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


class HubWatch(_Group):
    """One :meth:`Client.watch` per server, one inbox (see :meth:`Hub.watch`).

    Attributes:
        handles: name -> :class:`Watch`. errors: name -> why that server's watch failed.
    """


def _end_later(group: HubWatch) -> None:
    """End ``group`` on a thread of its own (its inbox overflowed, under the inbox's lock);
    when none may start (see start_daemon), it ends with the hub."""
    start_daemon(group.close, "exmcp-hub-watch-end")


class _SharedInbox:
    """The ``put()`` subscriber of a hub watch's watches: the shared inbox, within a bound.

    Each watch's own ``max_pending`` counts only what waits in its proxy; what waits in the
    shared inbox is bounded here with the same policy (change signals coalesced, anything
    else past the bound closes the whole inbox with ``("overflow", max_pending)``).
    """

    def __init__(self, inbox: Inbox, max_pending: int, on_overflow: Callable[[], None]) -> None:
        self._lock = threading.Lock()
        self._inbox = inbox
        self._bound = Bound(max_pending, on_overflow)

    def put(self, message: Any) -> None:
        # Several proxies put at once, and a Bound is not thread-safe. One watch's closing
        # message does not end the shared inbox (the others go on); an overflow does.
        with self._lock:
            admitted = self._bound.admit([message], len(self._inbox))
            self._inbox.put_many(admitted)
            if self._bound.overflowed:
                self._inbox.finish()


class HubCatalog(_Group):
    """The catalogs of every server, merged (see :meth:`Hub.catalog`).

    ``tools``, ``prompts`` and ``resources`` are the servers' lists concatenated in
    config order, each item a copy with ``"server"`` (the config name) added.
    The inbox yields each server's :class:`CatalogChanged`, and a :class:`HubCollision`
    whenever a name's set of servers changes (see :attr:`collisions`).
    """

    _feed: CollisionFeed | None = None

    def _lists(self, kind: str) -> dict[str, list[dict[str, Any]]]:
        return {name: getattr(cat, kind) for name, cat in self.handles.items()}

    @property
    def collisions(self) -> dict[str, dict[str, list[str]]]:
        """``{"tools": {name: servers}, "prompts": {...}, "resources": {uri: servers}}``: the names
        more than one server has now (servers sorted; at most ``MAX_TRACKED`` per kind)."""
        current = self._feed.current if self._feed is not None else {}
        return {kind: {name: list(servers) for name, servers in current.get(kind, {}).items()} for kind in KINDS}

    def _merged(self, kind: str) -> list[dict[str, Any]]:
        return [{**item, "server": name} for name, cat in self.handles.items() for item in getattr(cat, kind)]

    @property
    def catalogs(self) -> dict[str, Catalog]:
        return {name: cat for name, cat in self.handles.items() if isinstance(cat, Catalog)}

    @property
    def tools(self) -> list[dict[str, Any]]:
        return self._merged("tools")

    @property
    def prompts(self) -> list[dict[str, Any]]:
        return self._merged("prompts")

    @property
    def resources(self) -> list[dict[str, Any]]:
        return self._merged("resources")


class Hub:
    """Several servers at once. Make it with :meth:`from_config`.

    Attributes:
        clients: config name -> connected :class:`Client` (``client.name`` is that name).
        errors: config name -> the exception of a server that failed to connect.
        specs: config name -> the parsed server entry.
    """

    def __init__(self, clients: dict[str, Client], errors: dict[str, BaseException], specs: dict[str, ServerSpec]):
        self.clients = clients
        self.errors = errors
        self.specs = specs
        self._groups: list[_Group] = []
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, config: str | os.PathLike[str] | Mapping[str, Any], **connect_options: Any) -> Hub:
        """Connect every server of an ``mcpServers`` config (a JSON file path or the dict), in parallel.

        ``connect_options`` go to every :func:`connect` (``protocol``, ``backoff``,
        ``connect_timeout``, ...). A server that fails lands in :attr:`errors`; the
        others still work. Bad config raises :class:`ConfigError` (a ValueError) before
        anything starts.
        """
        clashing = sorted(_PER_SERVER & connect_options.keys())
        if clashing:
            raise ValueError(
                f"Hub.from_config cannot take {', '.join(clashing)}: each server entry of the config sets them"
            )
        specs = load_config(config)
        clients: dict[str, Client] = {}
        errors: dict[str, BaseException] = {}

        def start(spec: ServerSpec) -> Client:
            return connect(spec_transport(spec), name=spec.name, **connect_options)

        pool = ThreadPoolExecutor(max_workers=min(16, len(specs)), thread_name_prefix="exmcp-hub-connect")
        futures = {name: pool.submit(start, spec) for name, spec in specs.items()}
        try:
            for name, future in futures.items():
                try:
                    clients[name] = future.result()
                except (Error, ValueError, OSError) as exc:
                    logger.info("hub: server %r failed to connect: %s", name, exc)
                    errors[name] = exc
        except BaseException:
            # Interrupted (Ctrl-C): return at once, not after in-flight connects (up to
            # connect_timeout); whatever connects later is disconnected by its callback.
            pool.shutdown(wait=False, cancel_futures=True)
            for future in futures.values():
                future.add_done_callback(_disconnect_late)
            raise
        pool.shutdown(wait=True)
        return cls(clients, errors, specs)

    def watch(
        self, filter: Any, subscriber: Any = None, timeout: float = 5.0, *, max_pending: int = DEFAULT_MAX_PENDING
    ) -> HubWatch:
        """One :meth:`Client.watch` per connected server; their messages in one inbox.

        A server whose watch fails is in the result's ``errors``; the others still deliver.
        ``max_pending`` goes to every watch and also bounds the shared inbox (as for
        :meth:`Client.watch`: past it change signals are coalesced, anything else ends the
        inbox with a closing message whose reason is ``("overflow", max_pending)``).
        """
        limit = check_max_pending(max_pending)
        group = HubWatch(subscriber)
        target = group.subscriber
        if group._inbox is not None:
            target = _SharedInbox(group._inbox, limit, lambda: _end_later(group))
        group._add(self.clients, lambda client: client.watch(filter, target, timeout, max_pending=limit))
        return self._keep(group)

    def catalog(self, subscriber: Any = None, timeout: float = 5.0) -> HubCatalog:
        """The merged live catalog of every connected server (see :class:`HubCatalog`).

        Its inbox keeps only the newest pending :class:`CatalogChanged` per server and kind.
        """
        if isinstance(subscriber, threading.Thread):
            subscriber = None  # a thread reads the hub catalog's inbox
        group = HubCatalog(subscriber, lambda: LatestInbox(catalog_key, coalesce_catalog, withdrawn_by_catalog))
        feed = group._feed = CollisionFeed(group, group._lists, resolve_subscriber(group.subscriber).target)
        group._add(self.clients, lambda client: client.catalog(feed, timeout))
        feed.start()
        return self._keep(group)

    def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        progress: Callable[[dict[str, Any]], Any] | None = None,
        task: bool | dict[str, Any] = False,
        meta: Meta = None,
        validate: bool = True,
        timeout: float | None = None,
        reset_timeout_on_progress: bool = False,
        max_total_timeout: float | None = None,
    ) -> Any:
        """:meth:`Client.call_tool` (the same options) on the server ``name`` means: ``"server/tool"`` or ``"tool"``.

        Every split of ``name`` at a ``/`` whose prefix is a server of the hub and whose rest
        is a tool that server lists is a match; with none, ``name`` as a whole is looked up
        on every server. The lists are each server's latest ``tools/list`` (a hub catalog's
        refetches keep them current); a server not listed yet is listed once, within
        ``timeout``, and one whose listing fails is left out of the search.

        Raises:
            AmbiguousTool: more than one server has it (``.servers``, ``.choices``).
            UnknownTool: no server lists it (``.servers`` searched, ``.unlisted``).
            TypeError, ValueError: ``name`` is not a string, or empty.
        """
        if not isinstance(name, str):
            raise TypeError(f"name must be a string, 'server/tool' or 'tool', got {type(name).__name__}")
        if not name:
            raise ValueError("name must not be empty: give 'server/tool' or 'tool'")
        server, tool = resolve_tool(name, list(self.clients), ListedTools(self.clients, timeout))
        client = self.clients[server]
        return client.call_tool(
            tool,
            arguments,
            progress=progress,
            task=task,
            meta=meta,
            validate=validate,
            timeout=timeout,
            reset_timeout_on_progress=reset_timeout_on_progress,
            max_total_timeout=max_total_timeout,
        )

    def _keep(self, group: _G) -> _G:
        with self._lock:
            self._groups.append(group)
        return group

    def close(self, timeout: float = 5.0) -> None:
        """Disconnect every client in parallel, then end every watch and catalog. Idempotent.

        Disconnecting first closes the handles without a round trip per handle, so a
        hung server costs ``timeout`` once, not once per handle.
        """
        threads: list[threading.Thread] = []
        left: list[Client] = []
        for client in self.clients.values():
            thread = start_daemon(client.disconnect, f"exmcp-hub-close-{client.name}", timeout)
            if thread is not None:
                threads.append(thread)
            else:
                left.append(client)
        # Those no thread may close (see start_daemon) are all asked at once, then awaited
        # in turn within the one timeout.
        for client in left:
            client._begin_disconnect()
        deadline = time.monotonic() + timeout
        for client in left:
            client.disconnect(max(0.001, deadline - time.monotonic()))
        for thread in threads:
            thread.join(timeout + 1.0)
        with self._lock:
            groups, self._groups = self._groups, []
        for group in groups:
            group.close()

    def __enter__(self) -> Hub:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Hub clients={sorted(self.clients)} errors={sorted(self.errors)}>"
