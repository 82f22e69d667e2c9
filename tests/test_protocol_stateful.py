"""A hypothesis stateful test of the listener registry and the URI refcount core.

The sans-IO :class:`Session` (registry, index, legacy listeners) and the
:class:`RefcountBook` the worker drives are fed random sequences of what hosts,
servers and subscribers do: register, activate, abandon, remove, a subscriber's
death, an overflow, a notification, a loss and a reconnect. A small model shell
performs the effects as the real one does (the worker's wire calls on a model
server). After every step:

- the server's subscriptions equal the URIs the book holds, and those equal the union
  of the URIs of live listeners and of registrations in flight that acquired them;
- a notification reaches exactly the active listeners whose filter names it;
- no handle ever gets a second closing message;
- nothing leaks: the entries are those of live listeners and registrations in flight,
  the index holds the live ones, every slot serves an entry;
and when the client stops, each listener the host still holds gets exactly one closing message.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, initialize, invariant, precondition, rule

from exmcp_actors._delivery._targets import Subscriber
from exmcp_actors._protocol import _events as ev
from exmcp_actors._protocol._errors import Error, ListenerNotFound
from exmcp_actors._protocol._filters import normalize_filter
from exmcp_actors._protocol._messages import FINAL_TAGS
from exmcp_actors._protocol._refcount import RefcountBook
from exmcp_actors._protocol._state import EntryState, Pause
from tests.test_protocol_session import Driver, new_handle

URIS = ["file:///a", "file:///b", "file:///c"]
#: Subscriber keys: three put() objects, two threads.
SUBSCRIBERS = [("put", 1), ("put", 2), ("put", 3), ("thread", 1), ("thread", 2)]
UPDATED = "notifications/resources/updated"


class RegistryMachine(RuleBasedStateMachine):
    pending = Bundle("pending")
    active = Bundle("active")

    @initialize()
    def connect(self) -> None:
        self.driver = Driver("legacy")
        self.book = RefcountBook()
        self.server: set[str] = set()  # the model server's subscriptions for this session
        self.alive = dict.fromkeys(SUBSCRIBERS, True)
        self.closes: Counter[Any] = Counter()
        self.delivered: list[Any] = []
        self.in_flight: dict[Any, tuple[str, ...]] = {}  # registering handle id -> URIs acquired
        self.live: dict[Any, Any] = {}  # handle id -> handle, for active listeners the host holds
        self.feed_start()

    # -- the model shell ----------------------------------------------------------------------

    def feed_start(self) -> None:
        self.perform(self.driver.start())
        self.perform(self.driver.answer_handshake(self.driver.opened()))
        assert self.driver.session.ready

    def feed(self, event: Any) -> None:
        self.perform(self.driver.feed(event))

    def perform(self, effects: list[Any]) -> None:
        reports = []
        for effect in effects:
            if isinstance(effect, ev.ToWorker):
                message = effect.message
                if isinstance(message, ev.Release):
                    self.release(message.listener_id)
                elif isinstance(message, ev.Resubscribe):
                    for uri in self.book.held_uris():
                        self.server.add(uri)
                        self.book.mark_found(uri)
                    reports.append(ev.ResubscribeReport(message.generation, frozenset(self.book.held_uris()), {}))
                elif isinstance(message, ev.Reset):
                    self.book = RefcountBook()
        for messages in self.driver.out.values():
            for message in messages:
                if message[0] in FINAL_TAGS:
                    self.closes[message[1].id] += 1
                else:
                    self.delivered.append(message)
        for report in reports:
            self.feed(report)

    def release(self, handle_id: Any) -> None:
        """The worker's Release: drop exactly what the handle acquired."""
        for uri in reversed(self.book.forget(handle_id)):
            if self.book.drop(uri):
                self.server.discard(uri)

    def acquire(self, handle_id: Any, uris: tuple[str, ...]) -> None:
        """The worker's Acquire (every resources/subscribe succeeds on the model server)."""
        for uri in uris:
            if self.book.needs_subscribe(uri):
                self.server.add(uri)
            self.book.take(uri)
        self.book.record(handle_id, uris)

    def subscriber(self, key: Any) -> Subscriber:
        target = None if key[0] == "thread" else object()
        return Subscriber(key, target, lambda: self.alive[key], key[0] == "thread", key)

    # -- rules --------------------------------------------------------------------------------

    @precondition(lambda self: self.driver.session.ready)
    @rule(
        target=pending,
        uris=st.lists(st.sampled_from(URIS), unique=True, max_size=3),
        tools=st.booleans(),
        key=st.sampled_from(SUBSCRIBERS),
    )
    def register(self, uris: list[str], tools: bool, key: Any) -> Any:
        flt: dict[str, Any] = {"resourceSubscriptions": uris}
        if tools or not uris:
            flt["toolsListChanged"] = True
        normalized = normalize_filter(flt)
        subscriber = self.subscriber(key)
        handle = new_handle("listener", normalized, subscriber, "legacy")
        try:
            self.feed(ev.RegisterListener(handle, "listener", normalized, subscriber))
        except Error:
            return None  # a dead subscriber: nothing was registered
        self.acquire(handle.id, normalized.uris)
        self.in_flight[handle.id] = normalized.uris
        return handle

    @rule(target=active, handle=consumes(pending))
    def activate(self, handle: Any) -> Any:
        if handle is None:
            return None
        del self.in_flight[handle.id]
        try:
            self.feed(ev.ActivateListener(handle.id))
        except Error:
            self.abandon_now(handle)  # what the host's registration does on any failure
            return None
        self.live[handle.id] = handle
        return handle

    @rule(handle=consumes(pending))
    def abandon(self, handle: Any) -> None:
        if handle is not None:
            del self.in_flight[handle.id]
            self.abandon_now(handle)

    def abandon_now(self, handle: Any) -> None:
        self.feed(ev.AbandonListener(handle.id))
        self.release(handle.id)

    @rule(handle=consumes(active))
    def remove(self, handle: Any) -> None:
        if handle is None:
            return
        try:
            self.feed(ev.RemoveHandle(handle.id))
        except ListenerNotFound:
            assert handle.id not in self.live, "a live listener was not found"
            return
        self.release(handle.id)  # the host asks the worker after the actor
        del self.live[handle.id]

    @rule(key=st.sampled_from(SUBSCRIBERS))
    def subscriber_dies(self, key: Any) -> None:
        self.alive[key] = False
        self.feed(ev.SubscriberDied(key))
        for handle_id, handle in list(self.live.items()):
            if handle.subscriber == key:
                del self.live[handle_id]

    @rule(handle=active)
    def overflow(self, handle: Any) -> None:
        if handle is not None:
            self.feed(ev.Overflowed(handle.id))
            self.live.pop(handle.id, None)

    @precondition(lambda self: self.driver.session.ready and self.driver.session.listeners.pause is Pause.NONE)
    @rule(uri=st.sampled_from(URIS))
    def notify(self, uri: str) -> None:
        self.delivered = []
        self.feed(ev.Frames(self.driver.generation, [{"jsonrpc": "2.0", "method": UPDATED, "params": {"uri": uri}}]))
        reached = sorted(message[1].id for message in self.delivered)
        expected = sorted(i for i, h in self.live.items() if uri in h.filter.get("resourceSubscriptions", []))
        assert reached == expected

    @precondition(lambda self: self.driver.session.ready)
    @rule()
    def lose(self) -> None:
        self.server = set()  # the server's session, and its subscriptions, are gone
        self.feed(ev.Lost(self.driver.generation, "connection reset"))

    @precondition(lambda self: self.driver.session.status == "reconnecting")
    @rule()
    def reconnect(self) -> None:
        self.perform(self.driver.answer_handshake(self.driver.opened()))

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def server_subscriptions_are_the_union_of_live_listeners_uris(self) -> None:
        if not hasattr(self, "driver"):
            return
        held = set(self.book.held_uris())
        wanted = {uri for uris in self.in_flight.values() for uri in uris}
        wanted |= {uri for h in self.live.values() for uri in h.filter.get("resourceSubscriptions", [])}
        assert held == wanted
        session = self.driver.session
        if session.ready and session.listeners.pause is Pause.NONE:
            assert self.server == held

    @invariant()
    def no_handle_is_closed_twice(self) -> None:
        if hasattr(self, "closes"):
            assert all(count == 1 for count in self.closes.values()), self.closes

    @invariant()
    def nothing_leaks(self) -> None:
        if not hasattr(self, "driver"):
            return
        registry = self.driver.session.registry
        # A registration whose subscriber died stays (DEAD) until its host abandons it.
        assert set(registry.entries) == set(self.in_flight) | set(self.live)
        assert len(registry.index) == len(self.live)
        live_slots = {entry.slot.key for entry in registry.entries.values() if entry.state is not EntryState.DEAD}
        assert set(registry.slots) == live_slots  # a dead subscriber's slot is gone already

    def teardown(self) -> None:
        """The client stops: every listener the host still holds gets exactly one closing message."""
        if not hasattr(self, "driver"):
            return
        self.driver.session.close("disconnected")
        self.perform(self.driver.take())
        assert self.closes == Counter(dict.fromkeys(self.live, 1)), "closing messages were not one per live listener"
        registry = self.driver.session.registry
        assert not registry.entries and not registry.slots and len(registry.index) == 0


RegistryMachine.TestCase.settings = settings(
    max_examples=50, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_registry_and_refcount = RegistryMachine.TestCase
