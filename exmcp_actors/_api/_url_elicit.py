"""A request the server answered with -32042 (URL elicitation required, MCP 2025-11-25).

The error's ``data.elicitations`` are URL-mode elicitations the user must go through first.
With a handler that takes ``url`` mode, each is checked as an ``elicitation/create`` would be
and handed to it, in the calling thread (as the 2026-07-28 embedded requests are); when every
one was accepted the request is retried once, else the host gets
:class:`~exmcp_actors.UrlElicitationRequired` carrying them.
"""

from __future__ import annotations

from typing import Any

from .._protocol._elicit import URL_ELICITATION_REQUIRED
from .._protocol._errors import RequestError, UrlElicitationRequired
from .._protocol._host_checks import ELICITATION
from .._protocol._peer_text import peer_text
from .._runtime._host_pool import HostRuntime

#: Elicitations one -32042 may carry: each may put a question to a person.
MAX_ELICITATIONS = 10


def needs_url_elicitation(error: RequestError, host: HostRuntime) -> bool:
    """Whether ``error`` is a -32042 this client answers (its handler takes url mode)."""
    return error.code == URL_ELICITATION_REQUIRED and host.abilities.url_elicitation


def elicitations_of(error: RequestError) -> list[Any]:
    data = error.data
    found = data.get("elicitations") if isinstance(data, dict) else None
    return found if isinstance(found, list) else []


def go_through(error: RequestError, host: HostRuntime) -> None:
    """Hand the error's elicitations to the handler; return if all were accepted (retry the
    request), else raise :class:`UrlElicitationRequired`."""
    elicitations = elicitations_of(error)
    if not elicitations:
        raise UrlElicitationRequired(error, elicitations, "the error lists no elicitations")
    if len(elicitations) > MAX_ELICITATIONS:
        raise UrlElicitationRequired(error, elicitations, f"the error lists more than {MAX_ELICITATIONS} elicitations")
    for index, elicitation in enumerate(elicitations):
        if not isinstance(elicitation, dict) or elicitation.get("mode") != "url":
            raise UrlElicitationRequired(error, elicitations, f"elicitation {index} is not in url mode")
        if not isinstance(elicitation.get("elicitationId"), str) or not elicitation["elicitationId"]:
            raise UrlElicitationRequired(error, elicitations, f"elicitation {index} has no elicitationId")
        answer, why = host.answer_now(ELICITATION, elicitation)
        if why is not None:
            raise UrlElicitationRequired(error, elicitations, f"elicitation {index} was not answered: {why}")
        assert answer is not None
        if answer.get("action") != "accept":
            action = peer_text(answer.get("action"), quote=True)
            raise UrlElicitationRequired(error, elicitations, f"the user answered elicitation {index} with {action}")


def retry_failed(error: RequestError) -> UrlElicitationRequired:
    """The error for a retry that met -32042 again: the request is retried only once."""
    return UrlElicitationRequired(error, elicitations_of(error), "the retry after the elicitations needs them again")
