"""The check on the host's answer to ``sampling/createMessage`` before it is sent (sans-IO).

The handler is the host's code (often a model's output passed on): a result of the wrong
shape would reach the server as if the client vouched for it, and a server's tool loop
acts on ``tool_use`` blocks. So every answer, tools or not, is checked against the
request it answers; a bad one becomes an error to the host and -32603 to the server.
"""

from __future__ import annotations

from typing import Any, Final

from ._peer_text import peer_text
from ._sampling_request import blocks_of, offered_tools
from ._versions import LEGACY_VERSIONS

#: The content block types a sampled message may carry.
RESULT_BLOCK_TYPES: Final = ("text", "image", "audio", "tool_use")
TOOL_USE_STOP: Final = "toolUse"
#: The revisions whose sampled message holds one content block, never a list (lists, and
#: tool use with them, came in 2025-11-25).
ONE_BLOCK_VERSIONS: Final = LEGACY_VERSIONS[: LEGACY_VERSIONS.index("2025-11-25")]


def fit_version(result: dict[str, Any], version: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """A checked ``result`` as the negotiated ``version`` takes it: before 2025-11-25 a list of
    one block is sent as that block, a longer list is unusable: ``(result, None)`` or ``(None, why)``."""
    content = result.get("content")
    if version not in ONE_BLOCK_VERSIONS or not isinstance(content, list):
        return result, None
    if len(content) != 1:
        return (
            None,
            f"the sampling handler's result has {len(content)} content blocks; MCP {version} takes one content block",
        )
    return {**result, "content": content[0]}, None


def check_sampling_result(params: dict[str, Any], result: dict[str, Any]) -> str | None:
    """Why ``result`` is no answer to the ``sampling/createMessage`` with ``params`` (a sentence), or None."""
    if result.get("role") != "assistant":
        return f"the sampling handler's result needs role 'assistant', got {peer_text(result.get('role'), quote=True)}"
    if not isinstance(result.get("model"), str):
        return "the sampling handler's result needs 'model', a string naming the model"
    stop = result.get("stopReason")
    if stop is not None and not isinstance(stop, str):
        return f"the sampling handler's result 'stopReason' must be a string, got {type(stop).__name__}"
    content = result.get("content")
    blocks = blocks_of(content)
    if not blocks or not all(isinstance(block, dict) for block in blocks):
        return "the sampling handler's result 'content' must be a content block or a non-empty list of them"
    tools, uses = offered_tools(params), 0
    for index, block in enumerate(blocks):
        why = _check_block(block, tools)
        if why is not None:
            return f"the sampling handler's result content[{index}] {why}"
        uses += block["type"] == "tool_use"
    if stop == TOOL_USE_STOP and not uses:
        return "the sampling handler's result has stopReason 'toolUse' but no tool_use block"
    if uses and stop != TOOL_USE_STOP:
        shown = peer_text(stop, quote=True)
        return f"the sampling handler's result has tool_use blocks, so its stopReason must be 'toolUse', got {shown}"
    return None


def _check_block(block: dict[str, Any], tools: frozenset[str]) -> str | None:
    kind = block.get("type")
    if not isinstance(kind, str) or kind not in RESULT_BLOCK_TYPES:
        return f"has type {peer_text(kind, quote=True)}; a sampled message may hold {', '.join(RESULT_BLOCK_TYPES)}"
    if kind == "text":
        return None if isinstance(block.get("text"), str) else "is text without a 'text' string"
    if kind in ("image", "audio"):
        if isinstance(block.get("data"), str) and isinstance(block.get("mimeType"), str):
            return None
        return f"is {kind} without 'data' and 'mimeType' strings"
    if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
        return "is tool_use without 'id' and 'name' strings"
    if not isinstance(block.get("input"), dict):
        return "is tool_use without 'input', an object"
    if block["name"] not in tools:
        offered = peer_text(", ".join(sorted(tools))) if tools else "none (no tools, or toolChoice none)"
        return f"uses tool {peer_text(block['name'], quote=True)}, which the request did not offer (offered: {offered})"
    return None
