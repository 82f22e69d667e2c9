"""Whole scenarios through the sans-IO session: feed it inputs, read the effects and the
messages it queued. No threads, sockets or actors: every rule is a plain call."""

from __future__ import annotations

import itertools
from concurrent.futures import Future
from typing import Any, TypeVar

import pytest

from exmcp_actors._api._handle import Handle
from exmcp_actors._api._listener import Listener
from exmcp_actors._api._subscription import Subscription, Watch
from exmcp_actors._delivery._inbox import Inbox
from exmcp_actors._delivery._targets import Subscriber
from exmcp_actors._protocol import _messages as m
from exmcp_actors._protocol._backoff import Backoff
from exmcp_actors._protocol._config import SessionConfig
from exmcp_actors._protocol._errors import (
    ConnectError,
    ConnectionLost,
    ExchangeFailed,
    ListenerNotFound,
    ListenRequiresModern,
    NotConnected,
    ProtocolError,
    UseListen,
)
from exmcp_actors._protocol._events import (
    ActivateListener,
    ArmTimer,
    CancelOnWire,
    CancelRequest,
    CancelSubscription,
    DisarmTimers,
    Effect,
    FetchSnapshot,
    Frames,
    Lost,
    Opened,
    OpenFailed,
    OpenSubscription,
    OpenTransport,
    Outbox,
    ProbeTimeout,
    RegisterListener,
    Relisten,
    RemoveHandle,
    Reset,
    Resubscribe,
    ResubscribeReport,
    ResyncDone,
    RetireProxy,
    Send,
    SendFailed,
    SendRequest,
    Settle,
    StageTimeout,
    StartProxy,
    Stop,
    ToWorker,
    TransportNegotiated,
)
from exmcp_actors._protocol._filters import NotificationFilter, normalize_filter
from exmcp_actors._protocol._handshake import META_SUBSCRIPTION_ID, ProtocolMode, modern_meta
from exmcp_actors._protocol._index import ACK_METHOD
from exmcp_actors._protocol._jsonrpc import RequestBuilder, RequestFailed
from exmcp_actors._protocol._registry import ProxySlot
from exmcp_actors._protocol._session import Session
from exmcp_actors._protocol._state import Pause, Phase
from exmcp_actors._transport.http import STREAM_DROPPED

T = TypeVar("T")

INFO = {"name": "t", "version": "1"}
#: No jitter: every delay is the formula's.
BACKOFF = Backoff(initial=0.5, factor=2.0, maximum=10.0, jitter=0.0)
PROBE_TIMEOUT = 2.0
STAGE_TIMEOUT = 10.0  # the SessionConfig default
INITIALIZE_RESULT = {"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {"name": "legacy-server"}}
DISCOVER_RESULT = {"supportedVersions": ["2026-07-28"], "capabilities": {}, "serverInfo": {"name": "modern-server"}}
UPDATED = "notifications/resources/updated"
TOOLS_CHANGED = "notifications/tools/list_changed"
A, B, C = "file:///a", "file:///b", "file:///c"

_ids = itertools.count(1)

# -- what the server sends -------------------------------------------------------------------


def result(request_id: Any, value: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


def failure(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def stream_dropped(listen_id: Any) -> RequestFailed:
    """What the HTTP transport delivers when one request's SSE stream ends early."""
    return RequestFailed(listen_id, ExchangeFailed(STREAM_DROPPED))


PING = {"jsonrpc": "2.0", "id": "s1", "method": "ping"}


def notice(method: str, params: dict[str, Any] | None = None, *, stamp: Any = None) -> dict[str, Any]:
    """A server notification; ``stamp`` makes it an event of that modern subscription."""
    body = dict(params or {})
    if stamp is not None:
        body["_meta"] = {**body.get("_meta", {}), META_SUBSCRIPTION_ID: stamp}
    return {"jsonrpc": "2.0", "method": method, "params": body}


def updated(uri: str, *, stamp: Any = None) -> dict[str, Any]:
    return notice(UPDATED, {"uri": uri}, stamp=stamp)


def acknowledgment(listen_id: Any, notifications: Any) -> dict[str, Any]:
    return notice(ACK_METHOD, {"notifications": notifications}, stamp=listen_id)


# -- reading effects -------------------------------------------------------------------------


def sent(effects: list[Effect]) -> list[dict[str, Any]]:
    return [effect.message for effect in effects if isinstance(effect, Send)]


def only(effects: list[Effect], kind: type[T]) -> list[T]:
    return [effect for effect in effects if isinstance(effect, kind)]


def rejected(effects: list[Effect]) -> list[tuple[Any, BaseException]]:
    return [(effect.future, effect.error) for effect in only(effects, Settle) if effect.error is not None]


def resolved(effects: list[Effect]) -> list[Settle]:
    return [effect for effect in only(effects, Settle) if effect.error is None]


# -- subscribers and handles, built as _client._new_handle builds them ------------------------


class Sink:
    """A put() subscriber. The core only queues messages for it; the shell delivers."""

    def put(self, item: Any) -> None:
        raise AssertionError("the sans-IO core never delivers by itself")


def put_subscriber() -> Subscriber:
    sink = Sink()
    return Subscriber(key=("put", id(sink)), target=sink, alive=lambda: True, watched=False, owner=sink)


def thread_subscriber() -> Subscriber:
    """A thread subscriber without a thread: its messages go to the handle's own inbox."""
    name = f"thread-{next(_ids)}"
    return Subscriber(key=("thread", name), target=None, alive=lambda: True, watched=True, owner=name)


def new_handle(kind: str, flt: NotificationFilter, subscriber: Subscriber, era: str) -> Handle:
    handle_id = f"{kind}-{next(_ids)}"
    inbox = Inbox() if subscriber.target is None else None
    if kind == "watch":
        return Watch(handle_id, None, subscriber.owner, flt, inbox, era)
    if kind == "subscription":
        return Subscription(handle_id, None, subscriber.owner, flt, inbox)
    return Listener(handle_id, None, subscriber.owner, flt, inbox)


def uris(*names: str) -> dict[str, Any]:
    return {"resourceSubscriptions": list(names)}


class Driver:
    """One session, fed one input at a time; keeps the messages the last input queued."""

    def __init__(self, mode: ProtocolMode = "legacy", *, reconnect: bool = True, attempts: int = 3) -> None:
        config = SessionConfig(
            mode=mode,
            reconnect=reconnect,
            max_reconnect_attempts=attempts,
            backoff=BACKOFF,
            probe_timeout=PROBE_TIMEOUT,
            client_info=INFO,
        )
        self.session = Session(config, RequestBuilder())
        self.out: Outbox = {}
        #: handle id -> where its messages go (kept after the entry is gone).
        self.routes: dict[Any, Any] = {}
        #: The stage deadlines the last input armed, and their disarming once it settled.
        self.stage_timers: list[ArmTimer | DisarmTimers] = []

    @property
    def generation(self) -> int:
        return self.session.generation

    def take(self) -> list[Effect]:
        """The last input's effects; stage deadlines are kept apart (tests/test_protocol_stages.py)."""
        effects, self.out = self.session.effects.take()
        self.stage_timers = [
            e
            for e in effects
            if (isinstance(e, ArmTimer) and isinstance(e.event, StageTimeout)) or isinstance(e, DisarmTimers)
        ]
        return [e for e in effects if e not in self.stage_timers]

    def feed(self, event: Any) -> list[Effect]:
        self.session.handle(event)
        return self.take()

    def frames(self, *frames: Any) -> list[Effect]:
        return self.feed(Frames(self.generation, list(frames)))

    def received(self, handle: Handle) -> list[Any]:
        """What the last input queued for ``handle`` (its route may serve other handles too)."""
        return [message for message in self.out.get(self.routes[handle.id], []) if message[1] is handle]

    # -- the connection --

    def start(self) -> list[Effect]:
        self.session.start()
        return self.take()

    def opened(self) -> list[Effect]:
        return self.feed(Opened(self.generation))

    def answer_handshake(self, effects: list[Effect]) -> list[Effect]:
        """Answer the handshake request in ``effects`` as a server of its era would."""
        [request] = [message for message in sent(effects) if "id" in message]
        answer = DISCOVER_RESULT if request["method"] == "server/discover" else INITIALIZE_RESULT
        return self.frames(result(request["id"], answer))

    def connect(self) -> Driver:
        self.start()
        self.answer_handshake(self.opened())
        assert self.session.ready
        return self

    def lose(self, reason: str = "connection reset") -> list[Effect]:
        return self.feed(Lost(self.generation, reason))

    def reconnect(self) -> list[Effect]:
        """After a loss: the next transport opens and its handshake succeeds."""
        effects = self.answer_handshake(self.opened())
        assert self.session.ready
        return effects

    def request(self, method: str = "tools/list", params: dict[str, Any] | None = None) -> tuple[Any, Future[Any]]:
        request_id, future = f"req-{next(_ids)}", Future[Any]()
        self.feed(SendRequest(request_id, method, params, future))
        return request_id, future

    # -- handles --

    def register(
        self, flt: dict[str, Any], subscriber: Subscriber | None = None, kind: str = "listener"
    ) -> tuple[Handle, list[Effect]]:
        """Step 1 of a legacy registration."""
        normalized = normalize_filter(flt)
        subscriber = subscriber if subscriber is not None else put_subscriber()
        handle = new_handle(kind, normalized, subscriber, "legacy")
        effects = self.feed(RegisterListener(handle, kind, normalized, subscriber))
        self.routes[handle.id] = self.session.registry.entries[handle.id].route
        return handle, effects

    def listener(self, flt: dict[str, Any], subscriber: Subscriber | None = None, kind: str = "listener") -> Handle:
        """A registered and activated legacy listener (the worker's part is the shell's)."""
        handle, _ = self.register(flt, subscriber, kind)
        assert self.feed(ActivateListener(handle.id)) == []
        return handle

    def subscribe(
        self, flt: dict[str, Any], subscriber: Subscriber | None = None, kind: str = "subscription"
    ) -> tuple[Handle, Future[Any], dict[str, Any]]:
        """Open a modern subscription: its handle, its ack future and the listen request sent."""
        normalized = normalize_filter(flt, allow_tasks=True)
        subscriber = subscriber if subscriber is not None else thread_subscriber()
        handle = new_handle(kind, normalized, subscriber, "modern")
        acknowledged = Future[Any]()
        [listen] = sent(self.feed(OpenSubscription(handle, kind, normalized, subscriber, acknowledged)))
        self.routes[handle.id] = self.session.registry.entries[handle.id].route
        return handle, acknowledged, listen

    def live(self, flt: dict[str, Any], kind: str = "subscription") -> tuple[Handle, Any]:
        """An acknowledged subscription (acknowledged as requested) and its listen id."""
        handle, _, listen = self.subscribe(flt, kind=kind)
        self.frames(acknowledgment(listen["id"], flt))
        return handle, listen["id"]


def legacy() -> Driver:
    return Driver("legacy").connect()


def modern() -> Driver:
    return Driver("modern").connect()


def event(handle: Handle, method: str, params: dict[str, Any]) -> Any:
    if isinstance(handle, Subscription):
        return m.SubscriptionEvent(m.SUBSCRIPTION, handle, method, params)
    return m.Notification(m.NOTIFICATION, handle, method, params)


# -- the connection's life ---------------------------------------------------------------------


def test_start_opens_the_first_transport_at_once() -> None:
    driver = Driver()
    assert driver.start() == [OpenTransport(1, 0.0)]
    assert driver.session.status == "connecting"


def test_an_opened_transport_is_probed_with_server_discover_under_a_probe_timer() -> None:
    driver = Driver("modern")
    driver.start()
    effects = driver.opened()
    [probe] = sent(effects)
    assert probe["method"] == "server/discover"
    assert probe["params"] == {"_meta": modern_meta(INFO)}
    assert effects == [Send(probe, probe["id"]), ArmTimer(PROBE_TIMEOUT, ProbeTimeout(1, probe["id"]))]
    assert driver.session.life.connection.phase is Phase.PROBING


def test_a_legacy_handshake_initializes_then_sends_initialized() -> None:
    driver = Driver("legacy")
    driver.start()
    [initialize] = sent(driver.opened())
    assert initialize["method"] == "initialize"
    assert driver.session.status == "connecting"
    effects = driver.frames(result(initialize["id"], INITIALIZE_RESULT))
    assert effects == [
        Send({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        TransportNegotiated("2025-11-25", "legacy", INITIALIZE_RESULT["capabilities"]),
    ]
    session = driver.session
    negotiated = session.life.negotiated
    assert negotiated is not None
    assert (session.status, session.era, negotiated.protocol_version) == ("ready", "legacy", "2025-11-25")
    assert negotiated.server_info == {"name": "legacy-server"}


@pytest.mark.parametrize("mode", ["modern", "auto"])
def test_a_discover_answer_naming_the_modern_revision_is_ready_at_once(mode: ProtocolMode) -> None:
    driver = Driver(mode)
    driver.start()
    [probe] = sent(driver.opened())
    assert driver.frames(result(probe["id"], DISCOVER_RESULT)) == [
        TransportNegotiated("2026-07-28", "modern", DISCOVER_RESULT["capabilities"])
    ]
    session = driver.session
    negotiated = session.life.negotiated
    assert negotiated is not None
    assert (session.status, session.era, negotiated.server_info) == ("ready", "modern", {"name": "modern-server"})


@pytest.mark.parametrize("how", ["refused", "silent"])
def test_auto_falls_back_to_initialize_and_lands_legacy(how: str) -> None:
    driver = Driver("auto")
    driver.start()
    [probe] = sent(driver.opened())
    if how == "refused":
        effects = driver.frames(failure(probe["id"], -32601, "Method not found"))
    else:
        effects = driver.feed(ProbeTimeout(driver.generation, probe["id"]))
    [initialize] = sent(effects)
    assert initialize["method"] == "initialize"
    assert driver.frames(result(probe["id"], DISCOVER_RESULT)) == []  # a late probe answer is no one's
    assert sent(driver.frames(result(initialize["id"], INITIALIZE_RESULT))) == [
        {"jsonrpc": "2.0", "method": "notifications/initialized"}
    ]
    assert (driver.session.status, driver.session.era) == ("ready", "legacy")


def test_a_probe_timeout_of_an_answered_probe_or_an_old_connection_changes_nothing() -> None:
    driver = Driver("auto")
    driver.start()
    [probe] = sent(driver.opened())
    assert driver.feed(ProbeTimeout(driver.generation - 1, probe["id"])) == []
    driver.frames(result(probe["id"], DISCOVER_RESULT))
    assert driver.feed(ProbeTimeout(driver.generation, probe["id"])) == []
    assert driver.session.era == "modern"


# -- requests ------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["connecting", "reconnecting", "disconnected"])
def test_a_request_while_not_ready_is_rejected_with_not_connected(status: str) -> None:
    driver = Driver()
    driver.start()
    if status == "reconnecting":
        driver.answer_handshake(driver.opened())
        driver.lose()
    elif status == "disconnected":
        driver.session.close("disconnected")
        driver.take()
    future = Future[Any]()
    effects = driver.feed(SendRequest(1, "tools/list", None, future))
    [(rejected_future, error)] = rejected(effects)
    assert rejected_future is future and type(error) is NotConnected
    assert str(error) == f"the client is {status}"
    assert sent(effects) == []
    assert len(driver.session.pending) == 0


def test_a_legacy_request_is_sent_as_the_host_wrote_it_and_its_answer_resolves_it() -> None:
    driver = legacy()
    future = Future[Any]()
    effects = driver.feed(SendRequest(9, "tools/call", {"name": "echo"}, future))
    assert effects == [
        Send({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "echo"}, "id": 9}, request_id=9)
    ]
    assert driver.frames(result(9, {"content": []})) == [Settle(future, {"content": []})]


def test_a_modern_request_carries_the_modern_meta_envelope_keeping_the_hosts_own_meta() -> None:
    driver = modern()
    future = Future[Any]()
    [message] = sent(driver.feed(SendRequest(9, "tools/call", {"name": "echo", "_meta": {"mine": 1}}, future)))
    assert message["params"] == {"name": "echo", "_meta": {"mine": 1, **modern_meta(INFO)}}
    assert message["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"


def test_a_request_the_transport_could_not_send_fails_with_connection_lost() -> None:
    driver = legacy()
    request_id, future = driver.request()
    [(rejected_future, error)] = rejected(driver.feed(SendFailed(request_id)))
    assert rejected_future is future and type(error) is ConnectionLost
    assert driver.feed(SendFailed(request_id)) == []
    assert driver.frames(result(request_id, {})) == []  # a late answer finds no one


@pytest.mark.parametrize("make", [legacy, modern], ids=["legacy", "modern"])
def test_cancelling_a_request_cancels_it_on_the_wire_with_notifications_cancelled(make: Any) -> None:
    driver = make()
    request_id, _ = driver.request()
    [cancel] = driver.feed(CancelRequest(request_id, "timed out"))
    assert isinstance(cancel, CancelOnWire) and cancel.request_id == request_id
    assert cancel.notice["method"] == "notifications/cancelled"
    params = dict(cancel.notice["params"])
    if driver.session.era == "modern":
        assert params.pop("_meta") == modern_meta(INFO)
    assert params == {"requestId": request_id, "reason": "timed out"}
    assert driver.frames(result(request_id, {})) == []  # its late answer is skipped
    assert driver.feed(CancelRequest(request_id, "again")) == []


def test_a_server_ping_is_answered_and_other_server_requests_are_refused() -> None:
    driver = legacy()
    assert sent(driver.frames(PING)) == [{"jsonrpc": "2.0", "id": "s1", "result": {}}]
    [refusal] = sent(driver.frames({"jsonrpc": "2.0", "id": "s2", "method": "sampling/createMessage"}))
    assert refusal["id"] == "s2" and refusal["error"]["code"] == -32601


# -- failures, losses and reconnects ---------------------------------------------------------


def refuse_the_open(driver: Driver) -> list[Effect]:
    return driver.feed(OpenFailed(driver.generation, OSError("connection refused")))


def refuse_the_initialize(driver: Driver) -> list[Effect]:
    [initialize] = sent(driver.opened())
    return driver.frames(failure(initialize["id"], -32600, "no thanks"))


def drop_during_the_handshake(driver: Driver) -> list[Effect]:
    driver.opened()
    return driver.feed(Lost(driver.generation, "eof"))


@pytest.mark.parametrize(
    ("fail", "why"),
    [
        (refuse_the_open, "connection refused"),
        (refuse_the_initialize, "initialize failed: -32600 no thanks"),
        (drop_during_the_handshake, "the connection closed during the handshake: eof"),
    ],
    ids=["open", "initialize", "drop"],
)
def test_the_first_connect_failing_stops_the_client_and_reports_why(fail: Any, why: str) -> None:
    driver = Driver("legacy", attempts=5)
    driver.start()
    effects = fail(driver)
    assert effects == [Stop(("transport_closed", why))]
    session = driver.session
    assert isinstance(session.life.connect_error, ConnectError)
    assert why in str(session.life.connect_error)
    assert session.life.closed and not session.life.connection.was_ready
    connect_error = session.life.connect_error
    session.close(("transport_closed", why))
    assert session.status == "disconnected" and session.life.connect_error is connect_error


def test_once_stopping_late_events_of_the_same_connection_change_nothing() -> None:
    # An open that fails after its reader already reported a loss: both name this connection.
    driver = Driver("legacy", attempts=5)
    driver.start()
    generation = driver.generation
    assert refuse_the_open(driver) == [Stop(("transport_closed", "connection refused"))]
    assert driver.feed(Lost(generation, "reader ended")) == []
    assert driver.feed(Opened(generation)) == []
    assert (driver.session.status, driver.session.life.connection.phase) == ("disconnected", Phase.CLOSED)


def test_a_loss_when_ready_fails_pending_requests_and_reopens_after_the_first_backoff_delay() -> None:
    driver = legacy()
    _, first = driver.request()
    _, second = driver.request()
    old = driver.generation
    effects = driver.lose()
    assert [(future, type(error)) for future, error in rejected(effects)] == [
        (first, ConnectionLost),
        (second, ConnectionLost),
    ]
    [reopen] = only(effects, OpenTransport)
    assert reopen.generation == driver.generation > old
    assert reopen.delay == BACKOFF.delay(1) == 0.5
    assert effects[-1] == reopen  # the futures fail before anything else happens
    assert (driver.session.status, driver.session.life.connection.phase) == ("reconnecting", Phase.RECONNECTING)
    assert len(driver.session.pending) == 0


def test_events_of_an_old_connection_are_ignored() -> None:
    driver = legacy()
    handle = driver.listener(uris(A))
    request_id, _ = driver.request()
    old = driver.generation
    driver.lose()
    assert driver.feed(Frames(old, [result(request_id, {}), updated(A)])) == []
    assert driver.feed(Opened(old)) == []
    assert driver.feed(OpenFailed(old, OSError("late"))) == []
    assert driver.feed(Lost(old, "late")) == []
    assert driver.session.status == "reconnecting"
    driver.reconnect()
    driver.feed(ResubscribeReport(driver.generation, frozenset({A}), {}))
    assert driver.feed(Lost(old, "a late loss of the old connection")) == []
    assert driver.feed(Frames(old, [updated(A)])) == [] and driver.out == {}
    assert driver.session.status == "ready"
    driver.frames(updated(A))
    assert driver.received(handle) == [event(handle, UPDATED, {"uri": A})]


def test_a_loss_without_reconnect_stops_the_client() -> None:
    driver = Driver("legacy", reconnect=False).connect()
    _, future = driver.request()
    effects = driver.lose("eof")
    assert [f for f, _ in rejected(effects)] == [future]
    assert effects[-1] == Stop(("transport_closed", "eof"))
    assert only(effects, OpenTransport) == []
    # Stopping is final at once: a request that arrives before the shell has stopped is refused.
    assert (driver.session.status, driver.session.life.connection.phase) == ("disconnected", Phase.CLOSED)
    late = Future[Any]()
    [(refused, error)] = rejected(driver.feed(SendRequest("late", "tools/list", None, late)))
    assert refused is late and type(error) is NotConnected


def test_failed_attempts_back_off_and_the_last_one_gives_up() -> None:
    driver = Driver("legacy", attempts=3).connect()
    assert only(driver.lose(), OpenTransport)[0].delay == 0.5
    # attempt 1: the transport will not open
    [again] = refuse_the_open(driver)
    assert again == OpenTransport(driver.generation, BACKOFF.delay(2)) and again.delay == 1.0
    # attempt 2: it opens, and drops during the handshake
    [again] = drop_during_the_handshake(driver)
    assert again == OpenTransport(driver.generation, 2.0)
    assert driver.session.status == "reconnecting"
    # attempt 3: the handshake is refused; that was the last attempt
    effects = refuse_the_initialize(driver)
    assert effects == [Stop(("reconnect_exhausted", "initialize failed: -32600 no thanks"))]
    assert driver.session.life.connect_error is None  # connect() succeeded long ago


def test_a_successful_reconnect_starts_the_count_of_attempts_afresh() -> None:
    driver = Driver("legacy", attempts=2).connect()
    driver.lose()
    assert only(refuse_the_open(driver), OpenTransport)[0].delay == 1.0
    driver.reconnect()
    driver.feed(ResubscribeReport(driver.generation, frozenset(), {}))  # the reconnect settled
    assert only(driver.lose(), OpenTransport)[0].delay == 0.5
    assert only(refuse_the_open(driver), OpenTransport)[0].delay == 1.0  # not exhausted


# -- legacy listeners --------------------------------------------------------------------------


def test_registering_a_put_subscriber_starts_its_proxy_once_for_all_its_listeners() -> None:
    driver = legacy()
    subscriber = put_subscriber()
    first, effects = driver.register(uris(A), subscriber)
    [start] = effects
    assert isinstance(start, StartProxy)
    slot = start.slot
    assert isinstance(slot, ProxySlot) and slot.key == subscriber.key and slot.subscriber is subscriber
    assert driver.routes[first.id] is slot  # its messages go to the proxy
    second, effects = driver.register({"toolsListChanged": True}, subscriber)
    assert effects == []
    assert driver.routes[second.id] is slot
    assert slot.handle_ids == {first.id, second.id}


def test_a_thread_subscribers_messages_go_to_the_handles_inbox_and_it_still_gets_a_proxy() -> None:
    driver = legacy()
    handle, effects = driver.register(uris(A), thread_subscriber())
    assert [type(effect) for effect in effects] == [StartProxy]  # the stop hook
    assert isinstance(driver.routes[handle.id], Inbox)
    assert driver.routes[handle.id] is handle._inbox


def test_a_listener_is_delivered_to_only_once_activated() -> None:
    driver = legacy()
    handle, _ = driver.register(uris(A))
    assert driver.frames(updated(A)) == [] and driver.out == {}
    assert handle.id not in driver.session.registry.index
    assert driver.feed(ActivateListener(handle.id)) == []
    assert handle.id in driver.session.registry.index
    driver.frames(updated(A))
    assert driver.out == {driver.routes[handle.id]: [event(handle, UPDATED, {"uri": A})]}


def test_a_notification_no_filter_enables_queues_nothing() -> None:
    driver = legacy()
    driver.listener(uris(A))
    driver.frames(updated(B), notice(TOOLS_CHANGED), notice("notifications/message", {"level": "info"}))
    assert driver.out == {}


def test_matching_notifications_reach_each_listener_in_wire_order() -> None:
    driver = legacy()
    subscriber = put_subscriber()
    files = driver.listener(uris(A, B), subscriber)
    tools = driver.listener({"toolsListChanged": True}, subscriber)
    driver.frames(updated(B), notice(TOOLS_CHANGED), updated(A))
    assert driver.out == {
        driver.routes[files.id]: [
            event(files, UPDATED, {"uri": B}),
            event(tools, TOOLS_CHANGED, {}),
            event(files, UPDATED, {"uri": A}),
        ]
    }


def test_handles_of_the_wrong_era_or_while_not_ready_are_refused() -> None:
    with pytest.raises(UseListen):
        modern().register(uris(A))
    with pytest.raises(ListenRequiresModern):
        legacy().subscribe(uris(A))
    driver = Driver()
    driver.start()
    with pytest.raises(NotConnected, match="connecting"):
        driver.register(uris(A))
    assert driver.take() == [] and driver.session.registry.entries == {}


def test_removing_a_handle_forgets_it_and_retires_its_idle_proxy() -> None:
    driver = legacy()
    subscriber = put_subscriber()
    first = driver.listener(uris(A), subscriber)
    second = driver.listener(uris(A), subscriber)
    slot = driver.routes[first.id]
    assert driver.feed(RemoveHandle(first.id)) == []  # the proxy still serves the second
    driver.frames(updated(A))
    assert driver.out == {slot: [event(second, UPDATED, {"uri": A})]}
    assert driver.feed(RemoveHandle(second.id)) == [RetireProxy(slot)]
    assert driver.session.registry.slots == {}


def test_removing_an_unknown_or_unfinished_handle_raises_listener_not_found() -> None:
    driver = legacy()
    with pytest.raises(ListenerNotFound):
        driver.feed(RemoveHandle("listener-nobody"))
    pending, _ = driver.register(uris(A))
    with pytest.raises(ListenerNotFound):
        driver.feed(RemoveHandle(pending.id))
    active = driver.listener(uris(B))
    driver.feed(RemoveHandle(active.id))
    with pytest.raises(ListenerNotFound):
        driver.feed(RemoveHandle(active.id))


def paused_with_three_uris() -> tuple[Driver, Handle, Handle]:
    """A legacy session reconnected after a loss, listeners on [A, B, C], on [B] and on the tools
    list (the session's first listener), the report not in yet."""
    driver = legacy()
    driver.listener({"toolsListChanged": True})
    everything = driver.listener(uris(A, B, C))
    only_b = driver.listener(uris(B), thread_subscriber())
    driver.lose()
    effects = driver.reconnect()
    assert only(effects, ToWorker) == [ToWorker(Resubscribe(driver.generation, STAGE_TIMEOUT))]
    return driver, everything, only_b


def test_after_a_loss_notifications_wait_for_reconnected_then_arrive_in_wire_order() -> None:
    driver, everything, only_b = paused_with_three_uris()
    driver.frames(updated(C), notice("notifications/message"), updated(A), updated("file:///z"), updated(B))
    assert driver.out == {}
    report = ResubscribeReport(driver.generation, frozenset({C, A}), {B: "refused"})
    assert driver.feed(report) == []
    assert driver.received(everything) == [
        m.Reconnected(m.RECONNECTED, everything, {"resubscribed": [A, C], "failed": [(B, "refused")]}),
        event(everything, UPDATED, {"uri": C}),
        event(everything, UPDATED, {"uri": A}),
        event(everything, UPDATED, {"uri": B}),
    ]
    assert driver.received(only_b) == [
        m.Reconnected(m.RECONNECTED, only_b, {"resubscribed": [], "failed": [(B, "refused")]}),
        event(only_b, UPDATED, {"uri": B}),
    ]
    [tools] = [entry.handle for entry in driver.session.registry.entries.values() if not entry.requested.uris]
    assert driver.received(tools) == [m.Reconnected(m.RECONNECTED, tools, {"resubscribed": [], "failed": []})]
    driver.frames(updated(A))  # delivery no longer waits
    assert driver.received(everything) == [event(everything, UPDATED, {"uri": A})]


def test_a_resubscribe_report_of_an_earlier_connection_is_ignored() -> None:
    driver, everything, _ = paused_with_three_uris()
    driver.frames(updated(A))
    assert driver.feed(ResubscribeReport(driver.generation - 2, frozenset({A, B, C}), {})) == []
    assert driver.out == {} and driver.session.listeners.pause is Pause.HELD
    driver.feed(ResubscribeReport(driver.generation, frozenset({A, B, C}), {}))
    assert [message.tag for message in driver.received(everything)] == [m.RECONNECTED, m.NOTIFICATION]


def test_a_resubscribe_report_while_reconnecting_again_is_ignored() -> None:
    driver, _, _ = paused_with_three_uris()
    generation = driver.generation
    driver.lose()
    assert driver.feed(ResubscribeReport(generation, frozenset({A}), {})) == []
    assert driver.feed(ResubscribeReport(driver.generation, frozenset({A}), {})) == []  # not ready yet
    assert driver.out == {} and driver.session.listeners.pause is Pause.HELD


def test_a_listener_registered_after_the_reconnect_is_not_in_its_report() -> None:
    driver, everything, _ = paused_with_three_uris()
    late = driver.listener(uris(A))
    driver.feed(ResubscribeReport(driver.generation, frozenset({A, B, C}), {}))
    assert driver.received(late) == []
    assert [message.tag for message in driver.received(everything)] == [m.RECONNECTED]


def test_frames_after_a_failed_handshake_answer_in_the_same_batch_are_ignored() -> None:
    driver = legacy()
    handle = driver.listener(uris(A))
    driver.lose()
    [initialize] = sent(driver.opened())
    effects = driver.frames(failure(initialize["id"], -32600, "no thanks"), updated(A), PING)
    answered = sent(effects)
    driver.reconnect()
    driver.feed(ResubscribeReport(driver.generation, frozenset({A}), {}))
    delivered = driver.received(handle)
    assert answered == []
    assert delivered == [m.Reconnected(m.RECONNECTED, handle, {"resubscribed": [A], "failed": []})]


def test_close_queues_one_closed_per_active_handle_retires_every_proxy_and_fails_requests() -> None:
    driver = legacy()
    shared = put_subscriber()
    first = driver.listener(uris(A), shared)
    second = driver.listener({"toolsListChanged": True}, shared)
    threaded = driver.listener(uris(B), thread_subscriber())
    unfinished, _ = driver.register(uris(C))
    _, future = driver.request()
    slots = list(driver.session.registry.slots.values())
    assert len(slots) == 3
    driver.session.close("disconnected")
    effects = driver.take()
    [(failed, error)] = rejected(effects)
    assert failed is future and type(error) is NotConnected
    retired = [effect.slot for effect in only(effects, RetireProxy)]
    assert len(retired) == 3 and {id(slot) for slot in retired} == {id(slot) for slot in slots}
    for handle in (first, second, threaded):
        assert driver.received(handle) == [m.Closed(m.CLOSED, handle, "disconnected")]
    assert driver.received(unfinished) == []  # its registering caller is told instead
    assert sum(len(messages) for messages in driver.out.values()) == 3
    session = driver.session
    assert session.status == "disconnected" and session.registry.entries == {} and session.registry.slots == {}


# -- modern subscriptions ----------------------------------------------------------------------


def test_open_subscription_sends_subscriptions_listen_with_the_requested_filter() -> None:
    driver = modern()
    handle, acknowledged, listen = driver.subscribe({"toolsListChanged": True, **uris(A)})
    assert listen["method"] == "subscriptions/listen"
    assert listen["params"] == {
        "notifications": {"toolsListChanged": True, "resourceSubscriptions": [A]},
        "_meta": modern_meta(INFO),
    }
    assert isinstance(handle, Subscription) and handle.subscription_id == listen["id"]
    assert not acknowledged.done() and handle.acknowledged_filter is None


def test_the_acknowledgment_resolves_the_ack_future_with_the_acknowledged_filter() -> None:
    driver = modern()
    handle, acknowledged, listen = driver.subscribe(uris(A, B))
    effects = driver.frames(acknowledgment(listen["id"], uris(A)))
    assert effects == [Settle(acknowledged, NotificationFilter(uris=(A,)))]
    assert isinstance(handle, Subscription) and handle.acknowledged_filter == uris(A)


@pytest.mark.parametrize(
    ("requested", "acked"),
    [
        (uris(A), uris(A, B)),
        ({"toolsListChanged": True}, {"toolsListChanged": True, "promptsListChanged": True}),
        (uris(A), "everything"),
    ],
    ids=["more-uris", "more-categories", "malformed"],
)
def test_an_acknowledgment_wider_than_the_request_is_a_protocol_error_and_is_cancelled(
    requested: dict[str, Any], acked: Any
) -> None:
    driver = modern()
    _, acknowledged, listen = driver.subscribe(requested)
    listen_id = listen["id"]
    effects = driver.frames(acknowledgment(listen_id, acked))
    [cancel] = only(effects, CancelOnWire)
    assert cancel.request_id == listen_id and cancel.notice["params"]["requestId"] == listen_id
    [(future, error)] = rejected(effects)
    assert future is acknowledged and isinstance(error, ProtocolError)
    reason: Any = error.reason
    assert reason == ("invalid_acknowledgment", acked)
    assert resolved(effects) == []
    assert len(only(effects, RetireProxy)) == 1
    assert driver.session.registry.entries == {}
    driver.frames(updated(A, stamp=listen_id))
    assert driver.out == {}


def test_events_reach_a_subscription_only_inside_its_acknowledged_filter_without_the_stamp() -> None:
    driver = modern()
    handle, _, listen = driver.subscribe({"toolsListChanged": True, "promptsListChanged": True, **uris(A, B)})
    listen_id = listen["id"]
    driver.frames(acknowledgment(listen_id, {"toolsListChanged": True, **uris(A)}))
    driver.frames(
        updated(A, stamp=listen_id),
        updated(B, stamp=listen_id),  # requested, but not acknowledged
        updated(A + "/child", stamp=listen_id),  # a sub-resource of an acknowledged URI
        notice(TOOLS_CHANGED, stamp=listen_id),
        notice("notifications/prompts/list_changed", stamp=listen_id),
        notice(UPDATED, {"uri": A, "_meta": {"trace": 7}}, stamp=listen_id),
        updated(A, stamp="listen-of-someone-else"),
        updated(A),  # a legacy notification never reaches a subscription
    )
    assert driver.received(handle) == [
        event(handle, UPDATED, {"uri": A}),
        event(handle, UPDATED, {"uri": A + "/child"}),
        event(handle, TOOLS_CHANGED, {}),
        event(handle, UPDATED, {"uri": A, "_meta": {"trace": 7}}),
    ]
    assert len(driver.out) == 1


def test_events_before_the_acknowledgment_are_held_and_released_after_it() -> None:
    driver = modern()
    handle, acknowledged, listen = driver.subscribe(uris(A, B))
    listen_id = listen["id"]
    driver.frames(updated(B, stamp=listen_id), updated(A, stamp=listen_id))
    assert driver.out == {}
    effects = driver.frames(acknowledgment(listen_id, uris(A, B)), updated(B, stamp=listen_id))
    assert resolved(effects) == [Settle(acknowledged, NotificationFilter(uris=(A, B)))]
    assert driver.received(handle) == [
        event(handle, UPDATED, {"uri": B}),
        event(handle, UPDATED, {"uri": A}),
        event(handle, UPDATED, {"uri": B}),
    ]


def test_held_events_outside_a_narrower_acknowledgment_are_dropped() -> None:
    driver = modern()
    handle, _, listen = driver.subscribe(uris(A, B))
    driver.frames(updated(B, stamp=listen["id"]), updated(A, stamp=listen["id"]))
    driver.frames(acknowledgment(listen["id"], uris(A)))
    assert driver.received(handle) == [event(handle, UPDATED, {"uri": A})]


def resyncing(driver: Driver, handle: Handle, old_listen_id: Any) -> Any:
    """Lose a live subscription's connection, reconnect, and acknowledge its new listen:
    returns the new listen id. Checks each step's effects."""
    effects = driver.lose()
    assert driver.received(handle) == [m.SubscriptionResync(m.SUBSCRIPTION_RESYNC, handle, "started")]
    assert len(only(effects, OpenTransport)) == 1
    [listen] = [message for message in sent(driver.reconnect()) if message["method"] == "subscriptions/listen"]
    new_id = listen["id"]
    assert new_id != old_listen_id
    assert isinstance(handle, Subscription) and handle.subscription_id == new_id
    driver.frames(updated(A, stamp=new_id))  # before the new acknowledgment: held
    effects = driver.frames(acknowledgment(new_id, uris(A)))
    assert effects == [FetchSnapshot(handle.id, new_id, NotificationFilter(uris=(A,)))]
    assert driver.out == {}
    driver.frames(updated(A + "/x", stamp=new_id))  # during the snapshot: held
    assert driver.out == {}
    return new_id


def test_a_loss_resyncs_a_subscription_with_a_new_listen_and_a_snapshot_then_releases_held_events() -> None:
    driver = modern()
    handle, old_id = driver.live(uris(A))
    new_id = resyncing(driver, handle, old_id)
    assert driver.feed(ResyncDone(handle.id, old_id, {"stale": True})) == [] and driver.out == {}
    snapshot = {"resources": {A: "contents"}}
    assert driver.feed(ResyncDone(handle.id, new_id, snapshot)) == []
    assert driver.received(handle) == [
        m.SubscriptionResync(m.SUBSCRIPTION_RESYNC, handle, ("complete", snapshot)),
        event(handle, UPDATED, {"uri": A}),
        event(handle, UPDATED, {"uri": A + "/x"}),
    ]
    driver.frames(updated(A, stamp=new_id), updated(A, stamp=old_id))
    assert driver.received(handle) == [event(handle, UPDATED, {"uri": A})]


def test_a_failed_snapshot_is_reported_and_delivery_goes_on() -> None:
    driver = modern()
    handle, old_id = driver.live(uris(A))
    new_id = resyncing(driver, handle, old_id)
    driver.feed(ResyncDone(handle.id, new_id, None, error="timeout"))
    assert [message.tag for message in driver.received(handle)] == [m.SUBSCRIPTION_RESYNC] + [m.SUBSCRIPTION] * 2
    assert driver.received(handle)[0].state == ("failed", "timeout")


def test_a_watch_relisten_reports_reconnected_instead_of_a_snapshot() -> None:
    driver = modern()
    watch, old_id = driver.live(uris(A), kind="watch")
    assert isinstance(watch, Watch)
    driver.lose()
    assert driver.out == {}  # a watch is not told of the resync
    [listen] = [message for message in sent(driver.reconnect()) if message["method"] == "subscriptions/listen"]
    new_id = listen["id"]
    assert new_id != old_id
    driver.frames(updated(A, stamp=new_id))
    assert driver.out == {}
    effects = driver.frames(acknowledgment(new_id, uris(A)))
    assert only(effects, FetchSnapshot) == []
    assert driver.received(watch) == [
        m.Reconnected(m.RECONNECTED, watch, {"resubscribed": [A], "failed": []}),
        m.Notification(m.NOTIFICATION, watch, UPDATED, {"uri": A}),
    ]


def test_a_subscription_still_awaiting_its_ack_fails_with_connection_lost_and_is_not_relistened() -> None:
    driver = modern()
    _, acknowledged, _ = driver.subscribe(uris(A))
    effects = driver.lose()
    [(future, error)] = rejected(effects)
    assert future is acknowledged and type(error) is ConnectionLost
    assert driver.session.registry.entries == {}
    assert [message["method"] for message in sent(driver.reconnect())] == []


def test_cancelling_a_live_subscription_cancels_it_on_the_wire_and_closes_it() -> None:
    driver = modern()
    handle, listen_id = driver.live(uris(A))
    effects = driver.feed(CancelSubscription(handle.id, "cancelled"))
    assert [type(effect) for effect in effects] == [CancelOnWire, RetireProxy]
    assert only(effects, CancelOnWire)[0].request_id == listen_id
    assert driver.received(handle) == [m.SubscriptionClosed(m.SUBSCRIPTION_CLOSED, handle, "cancelled")]
    with pytest.raises(ListenerNotFound):
        driver.feed(CancelSubscription(handle.id, "cancelled"))


def test_close_ends_live_subscriptions_and_fails_unacknowledged_ones() -> None:
    driver = modern()
    live, _ = driver.live(uris(A))
    waiting, acknowledged, _ = driver.subscribe(uris(B))
    driver.session.close(("shutdown", "normal"))
    effects = driver.take()
    assert driver.received(live) == [m.SubscriptionClosed(m.SUBSCRIPTION_CLOSED, live, ("shutdown", "normal"))]
    assert driver.received(waiting) == []
    [(future, error)] = rejected(effects)
    assert future is acknowledged and type(error) is NotConnected
    assert len(only(effects, RetireProxy)) == 2


def initialize_after_a_refused_probe(driver: Driver) -> list[Effect]:
    """Auto mode on a legacy server: the transport opens, server/discover is refused, initialize is answered."""
    [probe] = sent(driver.opened())
    [initialize] = sent(driver.frames(failure(probe["id"], -32601, "Method not found")))
    return driver.frames(result(initialize["id"], INITIALIZE_RESULT))


def test_a_peer_that_turns_modern_closes_listeners_and_carries_watches_on_as_subscriptions() -> None:
    driver = Driver("auto")
    driver.start()
    initialize_after_a_refused_probe(driver)
    assert driver.session.era == "legacy"
    listener = driver.listener(uris(A))
    watch = driver.listener(uris(A), kind="watch")
    driver.lose()
    effects = driver.reconnect()
    assert driver.session.era == "modern"
    assert ToWorker(Reset()) in effects  # the legacy subscriptions died with the old session
    assert driver.received(listener) == [m.Closed(m.CLOSED, listener, ("era_changed", "modern"))]
    assert [effect.slot.key for effect in only(effects, RetireProxy)] == [driver.routes[listener.id].key]
    [listen] = [message for message in sent(effects) if message["method"] == "subscriptions/listen"]
    assert listen["params"]["notifications"] == uris(A)
    assert driver.received(watch) == []
    driver.frames(updated(A))  # a legacy notification no longer reaches the watch
    assert driver.out == {}
    driver.frames(acknowledgment(listen["id"], uris(A)), updated(A, stamp=listen["id"]))
    assert driver.received(watch) == [
        m.Reconnected(m.RECONNECTED, watch, {"resubscribed": [A], "failed": []}),
        m.Notification(m.NOTIFICATION, watch, UPDATED, {"uri": A}),
    ]


def test_a_peer_that_turns_legacy_closes_modern_subscriptions_and_watches() -> None:
    driver = Driver("auto").connect()
    subscription, _ = driver.live(uris(A))
    watch, _ = driver.live(uris(B), kind="watch")
    driver.lose()
    effects = initialize_after_a_refused_probe(driver)
    assert driver.session.era == "legacy"
    assert driver.received(subscription) == [
        m.SubscriptionClosed(m.SUBSCRIPTION_CLOSED, subscription, ("era_changed", "legacy"))
    ]
    assert driver.received(watch) == [m.Closed(m.CLOSED, watch, ("era_changed", "legacy"))]
    assert only(effects, ToWorker) == [ToWorker(Resubscribe(driver.generation, STAGE_TIMEOUT))]
    assert driver.session.registry.entries == {}


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (lambda listen_id: result(listen_id, {"done": True}), ("complete", {"done": True})),
        (lambda listen_id: failure(listen_id, -32603, "gone"), ("error", {"code": -32603, "message": "gone"})),
    ],
    ids=["result", "error"],
)
def test_the_server_answering_a_live_listen_closes_the_subscription(answer: Any, reason: Any) -> None:
    driver = modern()
    handle, listen_id = driver.live(uris(A))
    effects = driver.frames(answer(listen_id))
    assert driver.received(handle) == [m.SubscriptionClosed(m.SUBSCRIPTION_CLOSED, handle, reason)]
    assert len(only(effects, RetireProxy)) == 1
    assert driver.session.registry.entries == {}


def test_the_servers_graceful_answer_to_a_watchs_listen_is_followed_by_a_relisten() -> None:
    driver = modern()
    watch, listen_id = driver.live(uris(A), kind="watch")
    generation = driver.generation
    effects = driver.frames(result(listen_id, {"resultType": "complete"}))
    assert effects == [ArmTimer(BACKOFF.delay(1), Relisten(watch.id, generation))]
    assert driver.received(watch) == []  # not closed: a server shutting down comes back
    [listen] = sent(driver.feed(Relisten(watch.id, generation)))
    assert listen["method"] == "subscriptions/listen" and listen["id"] != listen_id
    driver.frames(acknowledgment(listen["id"], uris(A)))
    assert driver.received(watch) == [m.Reconnected(m.RECONNECTED, watch, {"resubscribed": [A], "failed": []})]


def test_one_dropped_subscription_stream_relistens_after_a_backoff_on_the_same_connection() -> None:
    driver = modern()
    handle, old_id = driver.live(uris(A))
    generation = driver.generation
    assert driver.frames(stream_dropped(old_id)) == [ArmTimer(BACKOFF.delay(1), Relisten(handle.id, generation))]
    assert driver.received(handle) == [m.SubscriptionResync(m.SUBSCRIPTION_RESYNC, handle, "started")]
    assert driver.feed(Relisten(handle.id, generation - 1)) == []  # a timer of an earlier connection
    [listen] = sent(driver.feed(Relisten(handle.id, generation)))
    assert listen["method"] == "subscriptions/listen" and listen["id"] != old_id
    assert driver.generation == generation and driver.session.ready  # the connection itself is fine
    effects = driver.frames(acknowledgment(listen["id"], uris(A)))
    assert effects == [FetchSnapshot(handle.id, listen["id"], NotificationFilter(uris=(A,)))]


def test_a_watch_that_came_back_gets_every_attempt_again_at_its_next_drop() -> None:
    driver = Driver("modern", attempts=1).connect()
    watch, listen_id = driver.live(uris(A), kind="watch")
    for _ in range(3):  # three outages, each over at its first re-listen
        [timer] = driver.frames(stream_dropped(listen_id))
        assert isinstance(timer, ArmTimer) and timer.delay == BACKOFF.delay(1)
        [listen] = sent(driver.feed(timer.event))
        listen_id = listen["id"]
        driver.frames(acknowledgment(listen_id, uris(A)))
        assert driver.received(watch) == [m.Reconnected(m.RECONNECTED, watch, {"resubscribed": [A], "failed": []})]


def test_a_subscription_whose_relistens_keep_dropping_is_closed_as_exhausted() -> None:
    driver = Driver("modern", attempts=3).connect()
    handle, listen_id = driver.live(uris(A))
    for attempt in (1, 2, 3):
        [timer] = driver.frames(stream_dropped(listen_id))
        assert isinstance(timer, ArmTimer) and timer.delay == BACKOFF.delay(attempt)
        [listen] = sent(driver.feed(timer.event))
        listen_id = listen["id"]
    effects = driver.frames(stream_dropped(listen_id))
    term = ("transport_error", None, STREAM_DROPPED)
    assert driver.received(handle) == [
        m.SubscriptionClosed(m.SUBSCRIPTION_CLOSED, handle, ("reconnect_exhausted", term))
    ]
    assert only(effects, ArmTimer) == []
