"""Coding agents and MCP clients reach the bot through the agent host: their approval hooks
(Claude Code, Codex, Gemini CLI, Cursor), an MCP server for asking a person, and an MCP
gateway that puts any MCP server behind an approval.

Every module here is a client of the agent host's local API (through ``skald_telegram``):
none imports the bot application or the agent host itself.
"""
