"""A scripted model API on 127.0.0.1 for the real coding agents: Anthropic's Messages API
(what Claude Code calls at ``ANTHROPIC_BASE_URL``), Gemini's generateContent API (what
Gemini CLI calls at ``GOOGLE_GEMINI_BASE_URL``) and OpenAI's Responses API (what Codex
calls at a model provider's ``base_url``), each streamed as server-sent events.

The model asks for the scripted tool calls one after the other, the next one each time the
conversation carries one more tool result; after the last result it answers with plain
text. Every request body is kept, so a test can read what the agent told the model (a
deny's reason, say)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

FINAL_TEXT = "All done."
"""What the model says once it has the tool's result."""


@dataclass(frozen=True)
class ToolCall:
    """A call the model asks for: a tool name and its arguments."""

    name: str
    arguments: dict[str, Any]


@dataclass
class FakeModel:
    """The server: ``url`` once started; ``requests`` holds each request's path and body."""

    calls: tuple[ToolCall, ...]
    url: str = ""
    requests: list[tuple[str, Any]] = field(default_factory=list)

    def bodies(self, path_part: str) -> Iterator[Any]:
        return (body for path, body in self.requests if path_part in path)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._one_request(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _one_request(self, reader: asyncio.StreamReader,
                           writer: asyncio.StreamWriter) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        headers = {k.strip().lower(): v.strip()
                   for k, v in (line.split(":", 1) for line in lines[1:] if ":" in line)}
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        parsed = json.loads(body) if body.strip() else None
        self.requests.append((f"{method} {target}", parsed))
        status, content_type, payload = self._answer(target, parsed)
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: keep-alive\r\n\r\n".encode()
            + payload)
        await writer.drain()
        return True

    def _answer(self, target: str, body: Any) -> tuple[str, str, bytes]:
        if target.startswith("/v1/messages") and "count_tokens" not in target:
            return self._anthropic(body)
        if ":streamGenerateContent" in target or ":generateContent" in target:
            return self._gemini(body, streamed=":stream" in target)
        if target.startswith("/v1/responses"):
            return self._responses(body)
        if "count_tokens" in target or ":countTokens" in target:
            return "200 OK", "application/json", json.dumps(
                {"input_tokens": 10, "totalTokens": 10}).encode()
        return "404 Not Found", "application/json", b'{"error": "not here"}'

    def _next(self, results: int, offered: set[Any]) -> ToolCall | None:
        """The call to ask for after ``results`` tool results, if the request offers it."""
        if results < len(self.calls) and self.calls[results].name in offered:
            return self.calls[results]
        return None

    def _anthropic(self, body: Any) -> tuple[str, str, bytes]:
        messages = body.get("messages", []) if isinstance(body, dict) else []
        offered = {tool.get("name") for tool in body.get("tools") or []}
        results = sum(1 for message in messages if isinstance(message.get("content"), list)
                      for part in message["content"]
                      if isinstance(part, dict) and part.get("type") == "tool_result")
        call = self._next(results, offered)
        blocks: list[dict[str, Any]]
        if call is not None:
            blocks = [{"type": "tool_use", "id": f"toolu_fake{results}", "name": call.name,
                       "input": call.arguments}]
            stop = "tool_use"
        else:
            blocks = [{"type": "text", "text": FINAL_TEXT}]
            stop = "end_turn"
        message = {"id": "msg_fake", "type": "message", "role": "assistant",
                   "model": body.get("model", "claude"), "content": [], "stop_reason": None,
                   "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1}}
        if not body.get("stream"):
            whole = {**message, "content": blocks, "stop_reason": stop}
            return "200 OK", "application/json", json.dumps(whole).encode()
        events: list[tuple[str, dict[str, Any]]] = [
            ("message_start", {"type": "message_start", "message": message})]
        for index, block in enumerate(blocks):
            if block["type"] == "tool_use":
                start = {**block, "input": {}}
                delta = {"type": "input_json_delta",
                         "partial_json": json.dumps(block["input"])}
            else:
                start = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": block["text"]}
            events += [
                ("content_block_start", {"type": "content_block_start", "index": index,
                                         "content_block": start}),
                ("content_block_delta", {"type": "content_block_delta", "index": index,
                                         "delta": delta}),
                ("content_block_stop", {"type": "content_block_stop", "index": index}),
            ]
        events += [
            ("message_delta", {"type": "message_delta",
                               "delta": {"stop_reason": stop, "stop_sequence": None},
                               "usage": {"output_tokens": 5}}),
            ("message_stop", {"type": "message_stop"}),
        ]
        stream = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)
        return "200 OK", "text/event-stream", stream.encode()

    def _responses(self, body: Any) -> tuple[str, str, bytes]:
        items = body.get("input", []) if isinstance(body, dict) else []
        offered = {tool.get("name") for tool in body.get("tools") or []}
        results = sum(1 for item in items
                      if isinstance(item, dict) and item.get("type") == "function_call_output")
        call = self._next(results, offered)
        output: dict[str, Any]
        if call is not None:
            output = {"type": "function_call", "id": f"fc_fake{results}", "name": call.name,
                      "arguments": json.dumps(call.arguments), "call_id": f"call_{results}"}
        else:
            output = {"type": "message", "id": "msg_fake", "role": "assistant",
                      "content": [{"type": "output_text", "text": FINAL_TEXT}]}
        usage = {"input_tokens": 10, "input_tokens_details": None, "output_tokens": 1,
                 "output_tokens_details": None, "total_tokens": 11}
        events = [
            ("response.created", {"type": "response.created", "response": {"id": "resp_fake"}}),
            ("response.output_item.done", {"type": "response.output_item.done",
                                           "output_index": 0, "item": output}),
            ("response.completed", {"type": "response.completed",
                                    "response": {"id": "resp_fake", "usage": usage}}),
        ]
        stream = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)
        return "200 OK", "text/event-stream", stream.encode()

    def _gemini(self, body: Any, streamed: bool) -> tuple[str, str, bytes]:
        contents = body.get("contents", []) if isinstance(body, dict) else []
        offered = {declaration.get("name")
                   for tool in (body.get("tools") or []) if isinstance(tool, dict)
                   for declaration in tool.get("functionDeclarations") or []}
        results = sum(1 for content in contents for part in content.get("parts") or []
                      if isinstance(part, dict) and "functionResponse" in part)
        call = self._next(results, offered)
        if call is not None:
            part: dict[str, Any] = {"functionCall": {"name": call.name,
                                                     "args": call.arguments}}
        else:
            part = {"text": FINAL_TEXT}
        answer = {"candidates": [{"content": {"role": "model", "parts": [part]},
                                  "finishReason": "STOP", "index": 0}],
                  "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 1,
                                    "totalTokenCount": 11}}
        if streamed:
            return "200 OK", "text/event-stream", f"data: {json.dumps(answer)}\n\n".encode()
        return "200 OK", "application/json", json.dumps(answer).encode()


@contextlib.asynccontextmanager
async def fake_model(*calls: ToolCall) -> AsyncIterator[FakeModel]:
    model = FakeModel(calls)
    server = await asyncio.start_server(model._serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    model.url = f"http://127.0.0.1:{port}"
    try:
        yield model
    finally:
        server.close()
