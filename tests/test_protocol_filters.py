"""Filter validation and normalization (BEHAVIOUR.md: Filter), sans-IO."""

from __future__ import annotations

import pytest

from exmcp_actors import FilterError
from exmcp_actors._protocol._filters import (
    NotificationFilter,
    filter_from_wire,
    normalize_filter,
    uri_within,
)


def reason_of(raw: object, **kwargs: bool) -> object:
    with pytest.raises(FilterError) as info:
        normalize_filter(raw, **kwargs)
    return info.value.reason


@pytest.mark.parametrize("raw", [None, [], "toolsListChanged", 1, ("toolsListChanged", True)])
def test_a_filter_that_is_not_a_dict_is_required(raw: object) -> None:
    assert reason_of(raw) == "subscription_filter_required"


def test_an_unknown_key_is_rejected_even_beside_valid_ones() -> None:
    assert reason_of({"toolsListChanged": True, "tools": True}) == "unknown_subscription_filter"


@pytest.mark.parametrize("value", [None, "yes", 1, 0, [], {}])
@pytest.mark.parametrize("key", ["toolsListChanged", "promptsListChanged", "resourcesListChanged"])
def test_a_category_must_be_a_boolean(key: str, value: object) -> None:
    assert reason_of({key: value}) == "invalid_subscription_filter"


@pytest.mark.parametrize("value", ["file:///a", {"file:///a": True}, None, 3, ("file:///a",)])
def test_resource_subscriptions_must_be_a_list(value: object) -> None:
    assert reason_of({"resourceSubscriptions": value}) == "invalid_subscription_filter"


@pytest.mark.parametrize("element", ["", None, 1, ["file:///a"], {"uri": "x"}])
def test_each_resource_subscription_must_be_a_non_empty_string(element: object) -> None:
    assert reason_of({"resourceSubscriptions": ["file:///ok", element]}) == "invalid_resource_subscription"


def test_malformed_task_ids_are_rejected_by_shape() -> None:
    assert reason_of({"taskIds": "t1"}) == "invalid_subscription_filter"
    assert reason_of({"taskIds": ["t1", ""]}) == "invalid_task_subscription"
    assert reason_of({"taskIds": [7]}) == "invalid_task_subscription"


@pytest.mark.parametrize("tasks", [[], ["t1"], ["t1", "t1"]])
def test_well_formed_task_ids_need_a_modern_peer(tasks: list[str]) -> None:
    assert reason_of({"toolsListChanged": True, "taskIds": tasks}) == "task_subscriptions_require_mcp_2026_07_28"


def test_task_ids_are_accepted_for_modern_peers() -> None:
    flt = normalize_filter({"taskIds": ["t1", "t2", "t1"]}, allow_tasks=True)
    assert flt.as_dict() == {"taskIds": ["t1", "t2"]}


@pytest.mark.parametrize(
    "raw",
    [
        {},
        {"toolsListChanged": False},
        {"toolsListChanged": False, "promptsListChanged": False, "resourcesListChanged": False},
        {"resourceSubscriptions": []},
    ],
)
def test_a_filter_that_enables_nothing_is_empty(raw: dict[str, object]) -> None:
    assert reason_of(raw) == "empty_subscription_filter"


def test_normalization_drops_false_categories_and_dedupes_uris_in_first_seen_order() -> None:
    flt = normalize_filter(
        {"toolsListChanged": True, "promptsListChanged": False, "resourceSubscriptions": ["b", "a", "b", "c", "a"]}
    )
    assert flt.as_dict() == {"toolsListChanged": True, "resourceSubscriptions": ["b", "a", "c"]}


def test_the_legacy_filter_is_authoritative_for_uris_and_categories() -> None:
    flt = normalize_filter({"toolsListChanged": True, "resourceSubscriptions": ["file:///a"]})
    assert flt.enables("notifications/tools/list_changed", {})
    assert not flt.enables("notifications/prompts/list_changed", {})
    assert flt.enables("notifications/resources/updated", {"uri": "file:///a"})
    assert not flt.enables("notifications/resources/updated", {"uri": "file:///b"})
    assert not flt.enables("notifications/resources/updated", {"uri": "file:///a/child"})
    assert not flt.enables("notifications/resources/updated", {})
    assert not flt.enables("notifications/resources/updated", {"uri": 5})


def test_an_acknowledgment_is_within_the_request_only_when_no_wider() -> None:
    requested = normalize_filter({"toolsListChanged": True, "resourceSubscriptions": ["a", "b"]})
    assert filter_from_wire({"toolsListChanged": True, "resourceSubscriptions": ["a"]}).is_within(requested)  # type: ignore[union-attr]
    assert filter_from_wire({}).is_within(requested)  # type: ignore[union-attr]
    assert not filter_from_wire({"promptsListChanged": True}).is_within(requested)  # type: ignore[union-attr]
    assert not filter_from_wire({"resourceSubscriptions": ["c"]}).is_within(requested)  # type: ignore[union-attr]
    assert filter_from_wire({"resourceSubscriptions": "a"}) is None
    assert filter_from_wire(None) is None


def test_modern_uris_may_name_sub_resources() -> None:
    assert uri_within("file:///dir/x.txt", ("file:///dir",))
    assert uri_within("file:///dir/x.txt", ("file:///dir/",))
    assert uri_within("file:///dir", ("file:///dir",))
    assert not uri_within("file:///dirty", ("file:///dir",))


def test_the_empty_filter_object_is_inert() -> None:
    assert NotificationFilter().as_dict() == {}


def test_an_acknowledged_filter_also_enables_sub_resources_of_its_uris() -> None:
    ack = filter_from_wire({"resourceSubscriptions": ["file:///dir"], "toolsListChanged": True})
    assert ack is not None
    assert ack.enables("notifications/resources/updated", {"uri": "file:///dir/x"}, sub_resources=True)
    assert not ack.enables("notifications/resources/updated", {"uri": "file:///dir/x"})
    assert not ack.enables("notifications/resources/updated", {"uri": "file:///dirty"}, sub_resources=True)
    assert ack.enables("notifications/tools/list_changed", {}, sub_resources=True)
    assert not ack.enables("notifications/prompts/list_changed", {}, sub_resources=True)
