"""The checks on a server's ``sampling/createMessage`` params (sans-IO), tools included.

MCP 2025-11-25 (and 2026-07-28) let a server offer ``tools`` and a ``toolChoice`` to the
host's model; the client MUST refuse them unless it advertised ``sampling.tools``. Each
``tool_result`` the server sends back must answer a ``tool_use`` of the assistant message
just before it, in a user message made of tool results only; every tool use gets its
result before the conversation goes on. A request that breaks this is refused with -32602
before the host's handler sees it.
"""

from __future__ import annotations

from typing import Any, Final

from ._peer_text import peer_text

TOOL_CHOICE_MODES: Final = ("auto", "required", "none")
ROLES: Final = ("user", "assistant")


def blocks_of(content: Any) -> list[Any]:
    """A message's content as a list of blocks: a single block is a list of one."""
    return content if isinstance(content, list) else [content]


def wants_tools(params: dict[str, Any]) -> bool:
    """Whether the request is tool-enabled: it carries ``tools`` or ``toolChoice``."""
    return params.get("tools") is not None or params.get("toolChoice") is not None


def offered_tools(params: dict[str, Any]) -> frozenset[str]:
    """The names of the tools a (checked) request lets the model use: none under ``toolChoice`` none."""
    choice = params.get("toolChoice")
    if isinstance(choice, dict) and choice.get("mode") == "none":
        return frozenset()
    return frozenset(tool["name"] for tool in params.get("tools") or ())


def check_sampling_request(params: dict[str, Any], tools_advertised: bool) -> str | None:
    """Why ``sampling/createMessage`` params are unusable (a sentence), or None when they are fine."""
    messages = params.get("messages")
    if not isinstance(messages, list) or not all(isinstance(item, dict) for item in messages):
        return "sampling/createMessage needs 'messages', a list of message objects"
    tokens = params.get("maxTokens")
    if isinstance(tokens, bool) or not isinstance(tokens, int):
        return "sampling/createMessage needs 'maxTokens', an integer"
    if wants_tools(params) and not tools_advertised:
        return "sampling/createMessage offered tools, but this client did not advertise sampling.tools"
    return _check_tools(params.get("tools")) or _check_choice(params.get("toolChoice")) or _check_turns(messages)


def _check_tools(tools: Any) -> str | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        return "sampling/createMessage 'tools' must be a list of tool objects"
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            return f"sampling/createMessage tools[{index}] must be an object with a 'name' string"
        if not isinstance(tool.get("inputSchema"), dict):
            return f"sampling/createMessage tool {peer_text(tool['name'], quote=True)} needs 'inputSchema', an object"
    return None


def _check_choice(choice: Any) -> str | None:
    if choice is None:
        return None
    if not isinstance(choice, dict):
        return "sampling/createMessage 'toolChoice' must be an object"
    mode = choice.get("mode", "auto")
    if not isinstance(mode, str) or mode not in TOOL_CHOICE_MODES:
        modes = ", ".join(TOOL_CHOICE_MODES)
        return f"sampling/createMessage toolChoice mode must be one of {modes}, got {peer_text(mode, quote=True)}"
    return None


def _check_turns(messages: list[dict[str, Any]]) -> str | None:
    """Each message a user's or the assistant's; every tool use (the assistant's) answered by
    the next message, which holds tool results and nothing else."""
    pending: set[str] = set()  # the tool_use ids of the message before, still unanswered
    for index, message in enumerate(messages):
        if message.get("role") not in ROLES:
            return f"sampling/createMessage messages[{index}] needs role 'user' or 'assistant'"
        blocks = blocks_of(message.get("content"))
        if not all(isinstance(block, dict) for block in blocks):
            return f"sampling/createMessage messages[{index}] content must be a content block or a list of them"
        results = [block for block in blocks if block.get("type") == "tool_result"]
        if results:
            why = _check_results(index, message, blocks, results, pending)
            if why is not None:
                return why
        elif pending:
            return f"sampling/createMessage messages[{index}] must carry the tool results of the tool uses before it"
        uses = [block for block in blocks if block.get("type") == "tool_use"]
        if uses and message["role"] != "assistant":
            return f"sampling/createMessage messages[{index}]: tool uses come only in an assistant message"
        if any(not isinstance(block.get("id"), str) for block in uses):
            return f"sampling/createMessage messages[{index}] has a tool_use without an 'id' string"
        pending = {block["id"] for block in uses}
    if pending:
        return "sampling/createMessage ends with tool uses whose results are missing"
    return None


def _check_results(
    index: int, message: dict[str, Any], blocks: list[dict[str, Any]], results: list[dict[str, Any]], pending: set[str]
) -> str | None:
    where = f"sampling/createMessage messages[{index}]"
    if message.get("role") != "user" or len(results) != len(blocks):
        return f"{where}: tool results must come alone in a user message"
    answered = set()
    for block in results:
        use_id = block.get("toolUseId")
        if not isinstance(use_id, str):
            return f"{where} has a tool_result without a 'toolUseId' string"
        if use_id not in pending:
            return f"{where} has a tool_result for {peer_text(use_id, quote=True)}, no tool use of the message before"
        answered.add(use_id)
    if answered != pending:
        missing = ", ".join(peer_text(use_id, quote=True) for use_id in sorted(pending - answered)[:5])
        return f"{where} lacks the tool results of {missing}"
    return None
