"""URL-mode elicitation and form-answer checks against the FakeServer: the capability the
modes advertise, hostile URLs refused before the handler, answers that do not fit the
schema never sent, -32042 retried once, and ``notifications/elicitation/complete`` only
for ids the client has seen. (End to end against real servers: test_elicit_peers.)"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest

import exmcp_actors as mcp
from exmcp_actors._protocol._elicit import SeenElicitations
from exmcp_actors._protocol._elicit_schema import check_form_content
from exmcp_actors._protocol._elicit_url import check_elicit_url
from exmcp_actors.testing import FakeError, FakeServer
from tests.sdk_helpers import ClientPool
from tests.test_host_faults import error_of

TIMEOUT = 5.0
URL = "https://auth.example.com/connect?id=1"


def url_request(url: str = URL, elicitation_id: str = "e1") -> dict[str, Any]:
    return {"mode": "url", "url": url, "elicitationId": elicitation_id, "message": "Connect your account"}


class Recorder:
    """An elicitation handler that answers ``action`` and records what it saw and completed."""

    def __init__(self, action: str = "accept", content: Any = None) -> None:
        self.action, self.content = action, content
        self.asked: list[dict[str, Any]] = []
        self.completed: list[dict[str, Any]] = []
        self.completion = threading.Event()

    def __call__(self, params: dict[str, Any]) -> dict[str, Any]:
        self.asked.append(params)
        answer: dict[str, Any] = {"action": self.action}
        if self.content is not None:
            answer["content"] = self.content
        return answer

    def on_complete(self, params: dict[str, Any]) -> None:
        self.completed.append(params)
        self.completion.set()


@pytest.fixture
def server(legacy_server: FakeServer) -> FakeServer:
    return legacy_server


@pytest.fixture
def connect(server: FakeServer, client_pool: ClientPool) -> Callable[..., mcp.Client]:
    def make(**kwargs: Any) -> mcp.Client:
        return client_pool.connect(server.transport(), reconnect=False, **kwargs)

    return make


# -- modes and capabilities -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("modes", "advertised"),
    [(("form",), {"form": {}}), (("form", "url"), {"form": {}, "url": {}}), (("url",), {"url": {}})],
)
def test_the_modes_given_are_the_modes_advertised(
    server: FakeServer, connect: Callable[..., mcp.Client], modes: tuple[str, ...], advertised: dict[str, Any]
) -> None:
    connect(elicitation=Recorder(), elicitation_modes=modes)
    assert server.messages("initialize")[-1]["params"]["capabilities"]["elicitation"] == advertised


@pytest.mark.parametrize(
    ("modes", "error", "match"),
    [
        ("url", TypeError, "elicitation_modes"),
        ((), ValueError, "elicitation_modes"),
        (("form", "form"), ValueError, "elicitation_modes"),
        (("browser",), ValueError, "elicitation_modes"),
    ],
)
def test_bad_elicitation_modes_are_refused_naming_the_argument(
    server: FakeServer, modes: Any, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        mcp.connect(server.transport(), elicitation=Recorder(), elicitation_modes=modes)


def test_url_modes_without_a_handler_are_refused(server: FakeServer) -> None:
    with pytest.raises(ValueError, match="elicitation_modes needs an elicitation handler"):
        mcp.connect(server.transport(), elicitation_modes=("form", "url"))


def test_a_mode_the_client_did_not_advertise_gets_invalid_params(
    server: FakeServer, connect: Callable[..., mcp.Client]
) -> None:
    form_only = Recorder()
    connect(elicitation=form_only)
    error = error_of(server, server.request("elicitation/create", url_request()))
    assert error["code"] == -32602 and "url mode" in error["message"]
    url_only = Recorder()
    connect(elicitation=url_only, elicitation_modes=("url",))
    schema = {"type": "object", "properties": {}}
    error = error_of(server, server.request("elicitation/create", {"message": "who?", "requestedSchema": schema}))
    assert error["code"] == -32602 and "form mode" in error["message"]
    assert form_only.asked == [] and url_only.asked == []


# -- URL requests ---------------------------------------------------------------------------


def test_a_url_request_reaches_the_handler_and_its_answer_is_action_only(
    server: FakeServer, connect: Callable[..., mcp.Client]
) -> None:
    handler = Recorder(content={"leaked": "secret"})
    connect(elicitation=handler, elicitation_modes=("form", "url"))
    answer = server.wait_response(server.request("elicitation/create", url_request()), TIMEOUT)
    assert answer["result"] == {"action": "accept"}
    assert handler.asked == [url_request()]


HOSTILE_URLS = [
    "http://auth.example.com/x",  # plain http off this machine
    "javascript:alert(1)",
    "file:///etc/passwd",
    "https://bank.example.com@evil.example/",  # userinfo disguising the host
    "https://user:pw@auth.example.com/",
    "https:///no-host",
    "https://auth.example.com\\@evil.example/",  # backslash
    "https://auth.example.com/\u202egnp.exe",  # bidi override
    "https://auth\u200b.example.com/",  # zero-width space
    "https://auth.example.com/\U000e0041",  # tag character
    "https://auth.example.com/\u034f",  # combining grapheme joiner
    "https://auth.example.com/\ufe0f",  # variation selector
    "https://auth.example.com/\x07",  # control
    "https://auth.example.com/a b",  # space
    "https://[::1/",  # malformed
    "https://auth.example.com:99999/",  # port out of range
    "https://bank.example.com%2Eevil.example/",  # a browser decodes the host: bank.example.com.evil.example
    "https://bank.example.com%40evil.example/",
    "https://bank.example.com\u2044evil.example/",  # fraction slash: reads as a path, is the host
    "https://bank.example.com\u2024evil.example/",  # one dot leader
    "https://bank.example\u3002com/",  # ideographic full stop
    "",
]


@pytest.mark.parametrize("url", HOSTILE_URLS)
def test_a_hostile_url_never_reaches_the_handler(
    server: FakeServer, connect: Callable[..., mcp.Client], url: str
) -> None:
    handler = Recorder()
    connect(elicitation=handler, elicitation_modes=("url",))
    error = error_of(server, server.request("elicitation/create", url_request(url)))
    assert error["code"] == -32602 and "url" in error["message"]
    assert handler.asked == []
    assert all(ord(char) >= 0x20 and not 0x7F <= ord(char) <= 0x9F for char in error["message"])


@pytest.mark.parametrize(
    "url",
    ["http://localhost:8080/cb", "http://127.0.0.1/x", "http://[::1]:9/x", URL, "https://m\u00fcller.example/a%20b"],
)
def test_https_and_loopback_http_urls_pass(url: str) -> None:
    assert check_elicit_url(url) is None


def test_a_url_request_without_an_elicitation_id_is_refused(
    server: FakeServer, connect: Callable[..., mcp.Client]
) -> None:
    handler = Recorder()
    connect(elicitation=handler, elicitation_modes=("url",))
    params = {key: value for key, value in url_request().items() if key != "elicitationId"}
    assert error_of(server, server.request("elicitation/create", params))["code"] == -32602
    assert handler.asked == []


# -- form answers ---------------------------------------------------------------------------

FORM = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 2, "maxLength": 10},
        "email": {"type": "string", "format": "email"},
        "born": {"type": "string", "format": "date"},
        "seen": {"type": "string", "format": "date-time"},
        "home": {"type": "string", "format": "uri"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "score": {"type": "number", "maximum": 1.5},
        "ok": {"type": "boolean"},
        "color": {"type": "string", "enum": ["red", "green"]},
        "hex": {"type": "string", "oneOf": [{"const": "#f00", "title": "Red"}]},
        "tags": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "string", "enum": ["a", "b", "c"]}},
        "picks": {"type": "array", "items": {"anyOf": [{"const": "x", "title": "X"}]}},
        "level": {"type": "integer", "default": 3},
    },
    "required": ["name"],
}
GOOD = {
    "name": "Ann",
    "email": "ann@example.com",
    "born": "1990-02-28",
    "seen": "2025-11-25T10:00:00Z",
    "home": "https://ann.example",
    "age": 35,
    "score": 1.5,
    "ok": True,
    "color": "red",
    "hex": "#f00",
    "tags": ["a", "b"],
    "picks": ["x"],
}
BAD = [
    ({"email": "a@b.co"}, "required field 'name'"),
    ({**GOOD, "name": "A"}, "minLength"),
    ({**GOOD, "name": "A" * 11}, "maxLength"),
    ({**GOOD, "email": "not-an-email"}, "email"),
    ({**GOOD, "born": "1990-02-30"}, "date"),
    ({**GOOD, "seen": "yesterday"}, "date-time"),
    ({**GOOD, "home": "no scheme"}, "uri"),
    ({**GOOD, "age": 35.5}, "integer"),
    ({**GOOD, "age": True}, "integer"),
    ({**GOOD, "age": 151}, "maximum"),
    ({**GOOD, "score": "1"}, "number"),
    ({**GOOD, "ok": "yes"}, "boolean"),
    ({**GOOD, "color": "blue"}, "one of"),
    ({**GOOD, "hex": "#0f0"}, "one of"),
    ({**GOOD, "tags": []}, "minItems"),
    ({**GOOD, "tags": ["a", "b", "c"]}, "maxItems"),
    ({**GOOD, "tags": ["z"]}, "outside the options"),
    ({**GOOD, "picks": ["y"]}, "outside the options"),
    ({**GOOD, "extra": 1}, "a field the requested schema does not list"),
    ("Ann", "content must be an object"),
]


def test_content_that_fits_the_schema_passes() -> None:
    assert check_form_content(FORM, GOOD) is None


@pytest.mark.parametrize(("content", "why"), BAD)
def test_content_that_does_not_fit_the_schema_says_which_field(content: Any, why: str) -> None:
    found = check_form_content(FORM, content)
    assert found is not None and why in found


def test_an_accepted_answer_that_does_not_fit_is_never_sent(
    server: FakeServer, connect: Callable[..., mcp.Client], caplog: pytest.LogCaptureFixture
) -> None:
    connect(elicitation=Recorder(content={**GOOD, "email": "SECRET-VALUE"}))
    with caplog.at_level(logging.ERROR, logger="exmcp_actors"):
        first = server.request("elicitation/create", {"message": "who?", "requestedSchema": FORM})
        second = server.request("elicitation/create", {"message": "who?", "requestedSchema": FORM})
        errors = [error_of(server, first), error_of(server, second)]
    assert [error["code"] for error in errors] == [-32603, -32603]
    assert "'email' is not a valid email" in errors[0]["message"]
    assert all("SECRET" not in str(message) for _, message in server.received)  # the bad content is never sent
    answers = [m for _, m in server.received if isinstance(m, dict) and m.get("id") in (first, second)]
    assert len(answers) == 2 and all("result" not in answer for answer in answers)
    logged = [r.getMessage() for r in caplog.records if "does not fit the requested schema" in r.getMessage()]
    assert len(logged) == 1  # rate-limited: the second bad answer adds no record


def test_an_accepted_answer_that_fits_is_sent_with_the_defaults(
    server: FakeServer, connect: Callable[..., mcp.Client]
) -> None:
    connect(elicitation=Recorder(content=GOOD))
    answer = server.wait_response(server.request("elicitation/create", {"message": "who?", "requestedSchema": FORM}))
    assert answer["result"] == {"action": "accept", "content": {**GOOD, "level": 3}}


def test_an_answer_with_an_unknown_action_is_internal_error(
    server: FakeServer, connect: Callable[..., mcp.Client]
) -> None:
    connect(elicitation=Recorder(action="maybe"), elicitation_modes=("url",))
    error = error_of(server, server.request("elicitation/create", url_request()))
    assert error["code"] == -32603 and "maybe" in error["message"]


# -- -32042 URL elicitation required --------------------------------------------------------


def required(*elicitations: dict[str, Any]) -> FakeError:
    return FakeError(-32042, "This request requires more information.", {"elicitations": list(elicitations)})


def failing_then(server: FakeServer, errors: int, *elicitations: dict[str, Any]) -> list[dict[str, Any]]:
    """tools/call answers -32042 ``errors`` times, then a result; returns the calls seen."""
    calls: list[dict[str, Any]] = []

    @server.on("tools/call")
    def call(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
        calls.append(params)
        if len(calls) <= errors:
            raise required(*elicitations)
        return {"content": [{"type": "text", "text": "done"}]}

    return calls


def test_a_32042_whose_elicitations_are_accepted_is_retried_once(
    server: FakeServer, connect: Callable[..., mcp.Client]
) -> None:
    calls = failing_then(server, 1, url_request(elicitation_id="a"), url_request(elicitation_id="b"))
    handler = Recorder()
    client = connect(elicitation=handler, elicitation_modes=("form", "url"))
    result = client.call_tool("pay", {"amount": 1}, timeout=TIMEOUT)
    assert result["content"][0]["text"] == "done"
    assert [params["arguments"] for params in calls] == [{"amount": 1}, {"amount": 1}]
    assert [params["elicitationId"] for params in handler.asked] == ["a", "b"]


def test_a_32042_met_again_on_the_retry_goes_to_the_host(
    server: FakeServer, connect: Callable[..., mcp.Client]
) -> None:
    calls = failing_then(server, 5, url_request())
    client = connect(elicitation=Recorder(), elicitation_modes=("url",))
    with pytest.raises(mcp.UrlElicitationRequired) as raised:
        client.call_tool("pay", {}, timeout=TIMEOUT)
    assert len(calls) == 2 and raised.value.code == -32042
    assert raised.value.elicitations == [url_request()] and "retry" in raised.value.why


@pytest.mark.parametrize("action", ["decline", "cancel"])
def test_a_declined_32042_elicitation_is_not_retried(
    server: FakeServer, connect: Callable[..., mcp.Client], action: str
) -> None:
    calls = failing_then(server, 1, url_request())
    client = connect(elicitation=Recorder(action=action), elicitation_modes=("url",))
    with pytest.raises(mcp.UrlElicitationRequired, match=action) as raised:
        client.call_tool("pay", {}, timeout=TIMEOUT)
    assert len(calls) == 1 and raised.value.elicitations == [url_request()]
    assert raised.value.reason[0] == "url_elicitation_required"


def test_a_32042_with_a_hostile_url_never_reaches_the_handler(
    server: FakeServer, connect: Callable[..., mcp.Client]
) -> None:
    calls = failing_then(server, 1, url_request("https://bank.example@evil.example/"))
    handler = Recorder()
    client = connect(elicitation=handler, elicitation_modes=("url",))
    with pytest.raises(mcp.UrlElicitationRequired, match="userinfo"):
        client.call_tool("pay", {}, timeout=TIMEOUT)
    assert handler.asked == [] and len(calls) == 1


def test_without_a_url_handler_a_32042_goes_to_the_host_as_is(
    server: FakeServer, connect: Callable[..., mcp.Client]
) -> None:
    failing_then(server, 1, url_request())
    client = connect(elicitation=Recorder())
    with pytest.raises(mcp.RequestError) as raised:
        client.call_tool("pay", {}, timeout=TIMEOUT)
    assert type(raised.value) is mcp.RequestError and raised.value.code == -32042
    assert raised.value.data == {"elicitations": [url_request()]}


# -- notifications/elicitation/complete -----------------------------------------------------


def test_a_completion_reaches_the_hook_and_listeners_once_and_unknown_ids_are_ignored(
    server: FakeServer, connect: Callable[..., mcp.Client], caplog: pytest.LogCaptureFixture
) -> None:
    handler = Recorder()
    client = connect(elicitation=handler, elicitation_modes=("url",))
    listener = client.subscribe_notifications({"elicitationComplete": True, "toolsListChanged": True}, timeout=TIMEOUT)
    server.wait_response(server.request("elicitation/create", url_request(elicitation_id="e1")), TIMEOUT)
    with caplog.at_level(logging.INFO, logger="exmcp_actors"):
        server.notify("notifications/elicitation/complete", {"elicitationId": "never-asked"})
        server.notify("notifications/elicitation/complete", {"elicitationId": "e1"})
        server.notify("notifications/elicitation/complete", {"elicitationId": "e1"})  # already completed
        server.notify("notifications/elicitation/complete", {"elicitationId": ["not", "a", "string"]})
        server.list_changed("tools")  # the marker: once it arrives, everything before it was handled
        messages = [listener.get(timeout=TIMEOUT)]
        while not isinstance(messages[-1], mcp.Notification):
            messages.append(listener.get(timeout=TIMEOUT))
    assert handler.completion.wait(TIMEOUT)
    assert len(messages) == 2
    message = messages[0]
    assert isinstance(message, mcp.ElicitationComplete)
    assert message.tag == "ex_mcp_elicitation_complete" and message.listener is listener
    assert message.elicitation_id == "e1" and message.params == {"elicitationId": "e1"}
    assert handler.completed == [{"elicitationId": "e1"}]
    ignored = [r.getMessage() for r in caplog.records if "unknown elicitation" in r.getMessage()]
    assert len(ignored) == 1  # rate-limited


def test_a_32042_elicitation_id_may_be_completed(server: FakeServer, connect: Callable[..., mcp.Client]) -> None:
    failing_then(server, 1, url_request(elicitation_id="paid"))
    handler = Recorder()
    client = connect(elicitation=handler, elicitation_modes=("url",))
    with client.watch({"elicitationComplete": True}, timeout=TIMEOUT) as watch:
        client.call_tool("pay", {}, timeout=TIMEOUT)
        server.notify("notifications/elicitation/complete", {"elicitationId": "paid"})
        message = watch.get(timeout=TIMEOUT)
    assert isinstance(message, mcp.ElicitationComplete) and message.elicitation_id == "paid"
    assert handler.completion.wait(TIMEOUT)


# -- 2026-07-28: embedded in input_required -------------------------------------------------


def input_required_once(server: FakeServer, request: dict[str, Any]) -> None:
    @server.on("tools/call")
    def call(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
        if "inputResponses" not in params:
            return {"resultType": "input_required", "inputRequests": {"go": request}, "requestState": "s"}
        return {"content": [{"type": "text", "text": repr(params["inputResponses"])}]}


def test_a_modern_url_input_request_is_answered_action_only() -> None:
    url_params = {"mode": "url", "url": URL, "message": "Connect"}  # 2026-07-28: no elicitationId
    handler = Recorder(content={"dropped": True})
    with FakeServer(era="modern") as server:
        input_required_once(server, {"method": "elicitation/create", "params": url_params})
        with mcp.connect(server.transport(), elicitation=handler, elicitation_modes=("form", "url")) as client:
            result = client.call_tool("go", {}, timeout=TIMEOUT)
        caps = server.messages("tools/call")[0]["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
    assert caps["elicitation"] == {"form": {}, "url": {}}
    assert result["content"][0]["text"] == repr({"go": {"action": "accept"}})
    assert handler.asked == [url_params]


def test_a_modern_hostile_url_or_misfit_answer_fails_the_call() -> None:
    handler = Recorder(content={"age": "old"})
    hostile = {"mode": "url", "url": "https://a.example\u202e/", "message": "Connect"}
    with FakeServer(era="modern") as server:
        input_required_once(server, {"method": "elicitation/create", "params": hostile})
        with mcp.connect(server.transport(), elicitation=handler, elicitation_modes=("form", "url")) as client:
            with pytest.raises(mcp.Error, match="invisible") as raised:
                client.call_tool("go", {}, timeout=TIMEOUT)
            assert raised.value.reason[0] == "input_required_failed" and handler.asked == []
            form = {
                "message": "Age?",
                "requestedSchema": {"type": "object", "properties": {"age": {"type": "integer"}}},
            }
            input_required_once(server, {"method": "elicitation/create", "params": form})
            with pytest.raises(mcp.Error, match="'age' must be an integer"):
                client.call_tool("go", {}, timeout=TIMEOUT)
        assert server.count("tools/call") == 2  # neither was retried with what the host could not answer


def test_seen_elicitation_ids_are_bounded_and_complete_once() -> None:
    seen = SeenElicitations(limit=2)
    for elicitation_id in ("a", "b", "c", "b"):
        seen.note(elicitation_id)
    seen.note(["unhashable"])  # a server's odd id is never kept
    assert [seen.take(i) for i in ("a", "c", "b", "b", ["unhashable"])] == [False, True, True, False, False]


@pytest.mark.parametrize(
    "url", ["https://" + "a" * 6000 + "\uff0fx.example/", "https://auth.example.com:" + "x" * 6000 + "/"]
)
def test_the_reason_for_a_malformed_url_quotes_a_bounded_part_of_it(url: str) -> None:
    why = check_elicit_url(url)
    assert why is not None and "malformed" in why and len(why) < 400
