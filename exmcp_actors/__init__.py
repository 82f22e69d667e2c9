"""exmcp_actors: an MCP client for thread-based programs, on pykka actors.

It receives what MCP servers push (tool, prompt and resource list changes,
updates of subscribed resources) in both MCP eras, over stdio, WebSocket and
Streamable HTTP, and survives reconnects without losing a listener::

    import exmcp_actors as mcp

    with mcp.connect(["python", "my_server.py"]) as client:
        listener = client.subscribe_notifications({"resourceSubscriptions": ["file:///a.txt"]})
        print(listener.get(timeout=10))
"""

from __future__ import annotations

import logging

from ._api._call import Call
from ._api._catalog import Catalog, CatalogChanged
from ._api._catalog_fresh import CatalogStale
from ._api._client import Client
from ._api._config import ConfigError
from ._api._connect import connect
from ._api._hub import Hub, HubCatalog, HubWatch
from ._api._hub_collisions import HubCollision
from ._api._hub_routing import AmbiguousTool, UnknownTool
from ._api._listener import Listener
from ._api._resource_watch import ResourceChanged, ResourceReadFailed, ResourceWatch
from ._api._subscription import Subscription, Watch
from ._api._task import Task
from ._auth import FileTokenStorage, MemoryTokenStorage, OAuth, TokenStorage
from ._protocol._backoff import Backoff
from ._protocol._errors import (
    ConnectError,
    ConnectionLost,
    Error,
    ExchangeFailed,
    FilterError,
    InvalidToolResult,
    ListenerNotFound,
    ListenRequiresModern,
    NotConnected,
    OutcomeUnknown,
    ProtocolError,
    RequestError,
    RequestTimeout,
    SubscribeFailed,
    SubscriberNotAlive,
    TransportError,
    UrlElicitationRequired,
    UseListen,
)
from ._protocol._messages import (
    Closed,
    ElicitationComplete,
    Notification,
    RawNotification,
    Reconnected,
    Status,
    SubscriptionClosed,
    SubscriptionEvent,
    SubscriptionResync,
)
from ._protocol._versions import LEGACY_VERSIONS, MODERN_VERSIONS
from ._transport._base import Transport
from ._transport.http import HttpTransport
from ._transport.stdio._process import StdioTransport
from ._transport.websocket._connection import WebSocketTransport
from ._util import _redact
from ._version import __version__

logging.getLogger("exmcp_actors").addHandler(logging.NullHandler())
_redact.install()  # secrets out of our records and our dependencies' (httpx logs request URLs)

__all__ = [
    "LEGACY_VERSIONS",
    "MODERN_VERSIONS",
    "AmbiguousTool",
    "Backoff",
    "Call",
    "Catalog",
    "CatalogChanged",
    "CatalogStale",
    "Client",
    "Closed",
    "ConfigError",
    "ConnectError",
    "ConnectionLost",
    "ElicitationComplete",
    "Error",
    "ExchangeFailed",
    "FileTokenStorage",
    "FilterError",
    "HttpTransport",
    "Hub",
    "HubCatalog",
    "HubCollision",
    "HubWatch",
    "InvalidToolResult",
    "ListenRequiresModern",
    "Listener",
    "ListenerNotFound",
    "MemoryTokenStorage",
    "NotConnected",
    "Notification",
    "OAuth",
    "OutcomeUnknown",
    "ProtocolError",
    "RawNotification",
    "Reconnected",
    "RequestError",
    "RequestTimeout",
    "ResourceChanged",
    "ResourceReadFailed",
    "ResourceWatch",
    "Status",
    "StdioTransport",
    "SubscribeFailed",
    "SubscriberNotAlive",
    "Subscription",
    "SubscriptionClosed",
    "SubscriptionEvent",
    "SubscriptionResync",
    "Task",
    "TokenStorage",
    "Transport",
    "TransportError",
    "UnknownTool",
    "UrlElicitationRequired",
    "UseListen",
    "Watch",
    "WebSocketTransport",
    "__version__",
    "connect",
]
