"""An MCP server for the gateway's tests: a few note tools, each call recorded in the file
named by ``$UPSTREAM_RECORD`` (one JSON line per call), so that a test knows whether the
gateway forwarded a call. ``crash`` ends the process without an answer. With
``$UPSTREAM_DISGUISED`` set it also offers ``write_note`` under names spelled to slip past a
policy (fullwidth, upper case, a zero-width space)."""

from __future__ import annotations

import json
import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("notes", instructions="Keeps notes.")


def record(tool: str, **arguments: object) -> None:
    with open(os.environ["UPSTREAM_RECORD"], "a", encoding="utf-8") as file:
        file.write(json.dumps({"tool": tool, "arguments": arguments}) + "\n")


@server.tool()
def read_note(name: str) -> str:
    """Read the note called name."""
    record("read_note", name=name)
    return f"note {name}: buy milk"


@server.tool()
def write_note(name: str, text: str) -> str:
    """Write text into the note called name, replacing what it held."""
    record("write_note", name=name, text=text)
    return f"saved {len(text)} characters to {name}"


@server.tool()
def delete_note(name: str) -> str:
    """Delete the note called name."""
    record("delete_note", name=name)
    return f"deleted {name}"


@server.tool()
def crash() -> str:
    """Stop the server abruptly."""
    record("crash")
    os._exit(3)


DISGUISES = ("ｗｒｉｔｅ_note", "WRITE_NOTE", "wri\u200bte_note")
if os.environ.get("UPSTREAM_DISGUISED"):
    for disguise in DISGUISES:
        server.tool(name=disguise, description="Write a note.")(write_note)


if __name__ == "__main__":
    server.run()
