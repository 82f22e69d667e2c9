"""The handshake and era negotiation state machine, sans-IO."""

from __future__ import annotations

from typing import Any

import pytest

from exmcp_actors._protocol._handshake import (
    ArmProbeTimer,
    Failed,
    Handshake,
    Negotiated,
    SendFrame,
)
from exmcp_actors._protocol._jsonrpc import ErrorResponse, RequestBuilder, Response
from exmcp_actors._protocol._state import Phase

INFO = {"name": "t", "version": "1"}


def sent(actions: list[Any]) -> list[dict[str, Any]]:
    return [a.message for a in actions if isinstance(a, SendFrame)]


def outcome(actions: list[Any]) -> Any:
    return next((a for a in actions if isinstance(a, (Negotiated, Failed))), None)


def started(mode: str) -> tuple[Handshake, list[Any]]:
    machine = Handshake(mode, INFO, RequestBuilder())  # type: ignore[arg-type]
    return machine, machine.start()


def test_legacy_mode_sends_initialize_offering_the_latest_legacy_revision() -> None:
    machine, actions = started("legacy")
    [message] = sent(actions)
    assert message["method"] == "initialize"
    assert message["params"] == {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": INFO}
    assert machine.state is Phase.INITIALIZING


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"])
def test_any_legacy_answer_is_accepted_and_followed_by_initialized(version: str) -> None:
    machine, actions = started("legacy")
    request_id = sent(actions)[0]["id"]
    result = machine.on_answer(
        Response(request_id, {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": {"name": "s"}})
    )
    assert sent(result) == [{"jsonrpc": "2.0", "method": "notifications/initialized"}]
    done = outcome(result)
    assert isinstance(done, Negotiated)
    assert (done.era, done.protocol_version, done.server_info) == ("legacy", version, {"name": "s"})


@pytest.mark.parametrize("version", ["2026-07-28", "2099-01-01", None, 5])
def test_an_initialize_answer_in_a_revision_we_do_not_speak_fails_clearly(version: Any) -> None:
    machine, actions = started("legacy")
    result = machine.on_answer(Response(sent(actions)[0]["id"], {"protocolVersion": version}))
    failure = outcome(result)
    assert isinstance(failure, Failed)
    assert repr(version) in str(failure.error)
    assert sent(result) == []


def test_auto_probes_with_server_discover_and_arms_its_own_timer() -> None:
    _, actions = started("auto")
    [message] = sent(actions)
    assert message["method"] == "server/discover"
    meta = message["params"]["_meta"]
    assert meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
    assert meta["io.modelcontextprotocol/clientInfo"] == INFO
    assert [a.request_id for a in actions if isinstance(a, ArmProbeTimer)] == [message["id"]]


def test_a_discover_result_naming_2026_07_28_lands_modern() -> None:
    machine, actions = started("auto")
    result = machine.on_answer(
        Response(
            sent(actions)[0]["id"],
            {
                "supportedVersions": ["2026-07-28"],
                "capabilities": {"tools": {}},
                "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "m"}},
            },
        )
    )
    done = outcome(result)
    assert isinstance(done, Negotiated) and done.era == "modern" and done.server_info == {"name": "m"}


@pytest.mark.parametrize(
    "answer",
    [
        lambda i: ErrorResponse(i, -32601, "Method not found"),
        lambda i: ErrorResponse(i, -32600, "Invalid request"),
        lambda i: ErrorResponse(i, -32000, "HTTP 405", {"httpStatus": 405}),
        lambda i: ErrorResponse(i, -32022, "unsupported", {"supported": ["2025-11-25"], "requested": "2026-07-28"}),
        lambda i: Response(i, {"supportedVersions": ["2025-06-18"]}),
        lambda i: Response(i, "garbage"),
    ],
    ids=["method-not-found", "invalid-request", "http-405", "version-error-legacy", "legacy-versions", "garbage"],
)
def test_auto_falls_back_to_initialize_on_any_evidence_of_a_legacy_server(answer: Any) -> None:
    machine, actions = started("auto")
    result = machine.on_answer(answer(sent(actions)[0]["id"]))
    assert [m["method"] for m in sent(result)] == ["initialize"]
    assert machine.state is Phase.INITIALIZING


def test_auto_falls_back_when_the_probe_times_out() -> None:
    machine, actions = started("auto")
    probe_id = sent(actions)[0]["id"]
    assert machine.probe_timed_out("some-other-id") == []
    result = machine.probe_timed_out(probe_id)
    assert [m["method"] for m in sent(result)] == ["initialize"]
    # A late answer to the probe is no longer the handshake's.
    assert not machine.owns(probe_id)


def test_a_version_error_naming_only_modern_versions_is_a_clear_connect_error() -> None:
    machine, actions = started("auto")
    failure = outcome(
        machine.on_answer(
            ErrorResponse(
                sent(actions)[0]["id"], -32022, "unsupported", {"supported": ["2027-01-01"], "requested": "2026-07-28"}
            )
        )
    )
    assert isinstance(failure, Failed)
    assert "2027-01-01" in str(failure.error)


def test_modern_mode_refuses_a_legacy_server_instead_of_falling_back() -> None:
    machine, actions = started("modern")
    failure = outcome(machine.on_answer(ErrorResponse(sent(actions)[0]["id"], -32601, "Method not found")))
    assert isinstance(failure, Failed)
    machine, actions = started("modern")
    failure = outcome(
        machine.on_answer(ErrorResponse(sent(actions)[0]["id"], -32022, "unsupported", {"supported": ["2025-11-25"]}))
    )
    assert isinstance(failure, Failed) and "2025-11-25" in str(failure.error)
    machine, actions = started("modern")
    assert isinstance(outcome(machine.probe_timed_out(sent(actions)[0]["id"])), Failed)


def test_a_late_probe_that_locked_the_peer_modern_triggers_one_reprobe() -> None:
    machine, actions = started("auto")
    initialize = sent(machine.probe_timed_out(sent(actions)[0]["id"]))[0]
    reprobe = machine.on_answer(ErrorResponse(initialize["id"], -32022, "locked modern", {"supported": ["2026-07-28"]}))
    assert [m["method"] for m in sent(reprobe)] == ["server/discover"]
    second_initialize = sent(machine.probe_timed_out(sent(reprobe)[0]["id"]))[0]
    failure = outcome(
        machine.on_answer(ErrorResponse(second_initialize["id"], -32022, "again", {"supported": ["2026-07-28"]}))
    )
    assert isinstance(failure, Failed)


def test_answers_to_unknown_ids_are_ignored() -> None:
    machine, _ = started("legacy")
    assert machine.on_answer(Response("stranger", {})) == []
    assert machine.state is Phase.INITIALIZING


def test_an_unknown_mode_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="protocol must be one of"):
        Handshake("future", INFO, RequestBuilder())  # type: ignore[arg-type]
