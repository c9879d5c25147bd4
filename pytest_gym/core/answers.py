"""The text of a Gym answer: the prompt of its request, the steps of its Responses object, the final answer.

One reader for every place that shows what a model said: the failure message, the HTML report (its task
table and its Changes section), the terminal's top flips and the pull-request comment. Nothing here masks or
bounds: the caller does, for where the text goes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def content_text(content: Any) -> str:
    """The text of a message's content: a string, or a list of parts (input_text, output_text, ...)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping):
                text = part.get("text")
                if isinstance(text, str):
                    parts.append(text)
                elif part.get("type"):
                    parts.append(f"[{part.get('type')}]")
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return "" if content is None else json.dumps(content, ensure_ascii=False, default=str)


def step_text(item: Mapping[str, Any]) -> tuple[str, str]:
    """(kind, text) of one Responses-API output item: ``assistant``, ``call``, ``result``, ``reasoning``, ..."""
    kind = str(item.get("type") or "item")
    if kind == "message":
        return (str(item.get("role") or "assistant"), content_text(item.get("content")))
    if kind == "function_call":
        arguments = item.get("arguments")
        shown = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False, default=str)
        return ("call", f"{item.get('name') or '?'}({shown})")
    if kind == "function_call_output":
        output = item.get("output")
        return ("result", output if isinstance(output, str) else json.dumps(output, ensure_ascii=False))
    if kind == "reasoning":
        summary = item.get("summary")
        text = content_text(summary) if summary else content_text(item.get("content"))
        return ("reasoning", text)
    rest = {k: v for k, v in item.items() if k not in ("id", "status")}
    return (kind, json.dumps(rest, ensure_ascii=False, default=str))


def prompt_text(params: Any) -> str:
    """The prompt of ``responses_create_params``: instructions and input messages, roles shown when several."""
    if not isinstance(params, Mapping):
        return ""
    messages: list[tuple[str, str]] = []
    instructions = params.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append(("instructions", instructions))
    given = params.get("input")
    if isinstance(given, str):
        messages.append(("user", given))
    elif isinstance(given, list):
        for item in given:
            if not isinstance(item, Mapping):
                continue
            if "content" in item:
                messages.append((str(item.get("role") or item.get("type") or "message"), content_text(item["content"])))
            else:
                messages.append(step_text(item))
    if len(messages) == 1 and messages[0][0] == "user":
        return messages[0][1]
    return "\n\n".join(f"[{role}] {text}" for role, text in messages)


def steps(answer: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """Every output item of the answer's Responses object as (kind, text), in order."""
    response = (answer or {}).get("response")
    output = response.get("output") if isinstance(response, Mapping) else None
    if not isinstance(output, list):
        return []
    return [step_text(item) for item in output if isinstance(item, Mapping)]


def final_text(answer: Mapping[str, Any] | None) -> str:
    """What the model answered last: its last assistant message's text, else its last step's (a tool call)."""
    found = steps(answer)
    text = next((text for kind, text in reversed(found) if kind == "assistant"), "")
    if not text and found:
        text = found[-1][1]
    return text


def has_tool_calls(answer: Mapping[str, Any] | None) -> bool:
    return any(kind == "call" for kind, _ in steps(answer))
