"""Makes ``httpx2`` and ``httpcore2`` unimportable, as on a machine without the MCP SDK
(authlib then falls back to httpx), from the moment it is imported.

As a pytest plugin: ``python -m pytest -p tests.hide_httpx2 tests/test_auth_hostile_as.py``
(``-p`` loads it before any test module imports anything). The SDK's own peers need
``httpx2``: tests run this way use peers that do not (``tests/hostile_as.py``), or run the
client in a child process that imports this module first.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Final

HIDDEN: Final = ("httpx2", "httpcore2")


class _Hide(MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname.split(".", maxsplit=1)[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {fullname!r} (hidden by tests.hide_httpx2)", name=fullname)
        return None


_already = sorted(name for name in sys.modules if name.split(".", maxsplit=1)[0] in HIDDEN)
if _already:
    raise RuntimeError(f"tests.hide_httpx2 came too late: {', '.join(_already)} already imported")
if not any(isinstance(finder, _Hide) for finder in sys.meta_path):
    sys.meta_path.insert(0, _Hide())
