"""OpenAI's two wire formats as :class:`~phasegate.testing.fake_openai.FakeOpenAI` sends
them: chat completions (a ``chat.completion`` object, or ``chat.completion.chunk``
events ending in ``[DONE]``) and the Responses API (a ``response`` object, or the
typed events from ``response.created`` to ``response.completed``)."""

from __future__ import annotations

from typing import Any

from phasegate.testing._fake_server import Event, FakeReply, pieces

__all__ = ["chat_completion", "chat_events", "response_events", "response_object"]

_CREATED = 1_700_000_000


def _usage_chat(reply: FakeReply) -> dict[str, int]:
    return {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
    }


def chat_completion(reply: FakeReply, tool: str, model: str, number: int) -> dict[str, Any]:
    """A whole ``chat.completion`` answering with ``reply`` (tool call or text)."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    finish = "stop"
    if reply.kind in ("tool_call", "malformed"):
        call = {"name": tool, "arguments": reply.arguments}
        message["tool_calls"] = [{"id": f"call_{number}", "type": "function", "function": call}]
        finish = "tool_calls"
    return {
        "id": f"chatcmpl-fake-{number}",
        "object": "chat.completion",
        "created": _CREATED + number,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": _usage_chat(reply),
    }


def chat_events(
    reply: FakeReply, tool: str, model: str, number: int, include_usage: bool
) -> list[Event]:
    """The ``chat.completion.chunk`` events of a streamed answer: the role first, then
    content or tool-call argument deltas, the finish reason, usage (when the request's
    ``stream_options.include_usage`` asks) and ``[DONE]``."""
    head = {
        "id": f"chatcmpl-fake-{number}",
        "object": "chat.completion.chunk",
        "created": _CREATED + number,
        "model": model,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> Event:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return None, {**head, "choices": [choice]}

    events = [chunk({"role": "assistant", "content": ""})]
    if reply.kind in ("tool_call", "malformed"):
        start = {"index": 0, "id": f"call_{number}", "type": "function"}
        events.append(
            chunk({"tool_calls": [{**start, "function": {"name": tool, "arguments": ""}}]})
        )
        for part in pieces(reply.arguments or ""):
            events.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": part}}]}))
        events.append(chunk({}, "tool_calls"))
    else:
        events += [chunk({"content": part}) for part in pieces(reply.content or "")]
        events.append(chunk({}, "stop"))
    if include_usage:
        events.append((None, {**head, "choices": [], "usage": _usage_chat(reply)}))
    events.append((None, "[DONE]"))
    return events


def _namespaced(request: dict[str, Any]) -> set[str]:
    """``NAMESPACE__NAME`` of every tool the request groups in a ``namespace`` tool."""
    found: set[str] = set()
    for group in request.get("tools") or []:
        if isinstance(group, dict) and group.get("type") == "namespace":
            inner = [t.get("name") for t in group.get("tools", []) if isinstance(t, dict)]
            found |= {f"{group.get('name')}__{name}" for name in inner}
    return found


def _output_item(
    reply: FakeReply, tool: str, number: int, done: bool, namespaced: set[str]
) -> dict[str, Any]:
    """The one output item; a call of a namespaced tool names its namespace apart."""
    status = "completed" if done else "in_progress"
    if reply.kind in ("tool_call", "malformed"):
        namespace, _, inner = tool.rpartition("__") if tool in namespaced else ("", "", tool)
        return {
            "type": "function_call",
            "id": f"fc_fake{number:06d}",
            "call_id": f"call_fake{number:06d}",
            **({"namespace": namespace} if namespace else {}),
            "name": inner,
            "arguments": (reply.arguments or "") if done else "",
            "status": status,
        }
    content = [_text_part(reply.content or "")] if done else []
    return {
        "type": "message",
        "id": f"msg_fake{number:06d}",
        "status": status,
        "role": "assistant",
        "content": content,
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def response_object(
    reply: FakeReply | None, tool: str, request: dict[str, Any], number: int
) -> dict[str, Any]:
    """A ``response`` object: completed with ``reply``'s one output item, or (``reply``
    None) just created, in progress, with no output yet."""
    done = reply is not None
    usage = None
    if reply is not None:
        usage = {
            "input_tokens": reply.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": reply.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        }
    return {
        "id": f"resp_fake{number:06d}",
        "object": "response",
        "created_at": _CREATED + number,
        "status": "completed" if done else "in_progress",
        "error": None,
        "incomplete_details": None,
        "instructions": request.get("instructions"),
        "model": str(request.get("model", "fake")),
        "output": [_output_item(reply, tool, number, True, _namespaced(request))]
        if reply is not None
        else [],
        "parallel_tool_calls": bool(request.get("parallel_tool_calls", True)),
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": request.get("tools", []),
        "temperature": 1.0,
        "top_p": 1.0,
        "text": {"format": {"type": "text"}},
        "metadata": {},
        "usage": usage,
    }


def response_events(
    reply: FakeReply, tool: str, request: dict[str, Any], number: int
) -> list[Event]:
    """The typed events of a streamed Responses API answer, each with its
    ``sequence_number``: created, in_progress, the output item added, its deltas
    (``output_text`` or ``function_call_arguments``) and done events, the item done,
    completed."""
    sequence: list[Event] = []

    def emit(kind: str, **data: Any) -> None:
        sequence.append((kind, {"type": kind, "sequence_number": len(sequence), **data}))

    emit("response.created", response=response_object(None, tool, request, number))
    emit("response.in_progress", response=response_object(None, tool, request, number))
    namespaced = _namespaced(request)
    item = _output_item(reply, tool, number, True, namespaced)
    where = {"item_id": item["id"], "output_index": 0}
    emit(
        "response.output_item.added",
        output_index=0,
        item=_output_item(reply, tool, number, False, namespaced),
    )
    if item["type"] == "function_call":
        for part in pieces(item["arguments"]):
            emit("response.function_call_arguments.delta", **where, delta=part)
        emit("response.function_call_arguments.done", **where, arguments=item["arguments"])
    else:
        text = reply.content or ""
        at = {**where, "content_index": 0}
        emit("response.content_part.added", **at, part=_text_part(""))
        for part in pieces(text):
            emit("response.output_text.delta", **at, delta=part, logprobs=[])
        emit("response.output_text.done", **at, text=text, logprobs=[])
        emit("response.content_part.done", **at, part=_text_part(text))
    emit("response.output_item.done", output_index=0, item=item)
    emit("response.completed", response=response_object(reply, tool, request, number))
    return sequence
