"""MCP authorization (OAuth 2.1): discovery, client registration, the
grants, token storage, and the hook the transports call.

Where each part lives: ``_oauth.py`` the :class:`OAuth` flow; ``_discovery.py``
the metadata; ``_binding.py`` what binds credentials to their issuer;
``_callback.py`` the checks of the authorization response; ``_tokens.py``
token requests (through authlib); ``_storage.py`` the stores; ``_browser.py``
the default ``on_authorize``; ``_hook.py`` the transports' side.
"""

from __future__ import annotations

from ._discovery import AuthError
from ._hook import BearerAuth
from ._oauth import OAuth
from ._storage import FileTokenStorage, MemoryTokenStorage, TokenStorage

__all__ = ["AuthError", "BearerAuth", "FileTokenStorage", "MemoryTokenStorage", "OAuth", "TokenStorage"]
