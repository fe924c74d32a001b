"""Markdown to the HTML subset Telegram accepts, walking markdown-it-py's token stream.

Bold, italic, strikethrough, inline code, fenced/indented code and http(s) links map to
their Telegram tags; headings become bold lines; lists become text bullets; a blockquote
becomes ``<blockquote>`` unless the caller already sits inside one (Telegram refuses
nested quotes). Everything else (images, raw HTML, tables) degrades to text. The output
is always balanced: a tag is only written around non-empty content.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import urlsplit

from markdown_it import MarkdownIt
from markdown_it.token import Token

_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"})
_LANGUAGE = re.compile(r"[A-Za-z0-9_+#.-]{1,32}")
_UNSAFE_URL_CHARS = re.compile(r"[\s\x00-\x1f\x7f]")
_MAX_URL_CHARS = 2048

_PARSER = MarkdownIt("commonmark", {"html": False}).enable("strikethrough")

_INLINE_TAGS = {
    "em_open": ("<i>", "</i>"),
    "strong_open": ("<b>", "</b>"),
    "s_open": ("<s>", "</s>"),
}
_CLOSERS = {"em_close", "strong_close", "s_close", "link_close"}


def http_link(url: str) -> bool:
    """Whether Telegram would accept ``url`` as a link target: http(s) with a dotted host.

    Anything else (``javascript:``, ``mailto:``, relative, bare words) must be shown as
    text, never put in an ``href``.
    """
    if len(url) > _MAX_URL_CHARS or _UNSAFE_URL_CHARS.search(url):
        return False
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return False
    return parts.scheme.lower() in ("http", "https") and host is not None and "." in host


def code_language(info: str) -> str:
    """The ``language-x`` class name for a fence's info string, or ``""``."""
    words = info.split()
    if words and _LANGUAGE.fullmatch(words[0]):
        return words[0].lower()
    return ""


def markdown_to_html(text: str, *, quotes: bool = True) -> str:
    """Convert Markdown to Telegram HTML; ``quotes=False`` when the result will sit inside
    a blockquote already."""
    return _BlockWriter(quotes).write(_PARSER.parse(text))


def _escape(text: str) -> str:
    return text.translate(_ESCAPES)


def _pre(code: str, language: str) -> str:
    if language:
        return '<pre><code class="language-' + language + '">' + _escape(code) + "</code></pre>"
    return "<pre>" + _escape(code) + "</pre>"


class _BlockWriter:
    """Writes block tokens one after another, one line per block."""

    def __init__(self, quotes: bool) -> None:
        self._quotes = quotes
        self._out: list[str] = []
        self._lists: list[list[int]] = []  # per open list: [next number] or [] if bulleted
        self._quote_depth = 0
        self._fresh = True  # nothing written on the current line yet
        self._heading = False

    def write(self, tokens: Sequence[Token]) -> str:
        for token in tokens:
            self._block(token)
        return "".join(self._out)

    def _newline(self) -> None:
        if not self._fresh and self._out:
            self._out.append("\n")
        self._fresh = False

    def _block(self, token: Token) -> None:
        kind = token.type
        if kind == "bullet_list_open":
            self._lists.append([])
        elif kind == "ordered_list_open":
            start = token.attrGet("start")
            self._lists.append([int(start) if isinstance(start, int | str) else 1])
        elif kind in ("bullet_list_close", "ordered_list_close"):
            self._lists.pop()
        elif kind == "list_item_open":
            self._list_item()
        elif kind == "blockquote_open":
            self._quote_depth += 1
            if self._quotes and self._quote_depth == 1:
                self._newline()
                self._out.append("<blockquote>")
                self._fresh = True
        elif kind == "blockquote_close":
            self._quote_depth -= 1
            if self._quotes and self._quote_depth == 0:
                self._out.append("</blockquote>")
        elif kind in ("paragraph_open", "heading_open"):
            self._heading = kind == "heading_open"
            self._newline()
        elif kind == "inline":
            heading = self._heading
            self._out.append(_InlineWriter(formatted=heading).write(token.children or ()))
        elif kind == "heading_close":
            self._wrap_last("<b>", "</b>")
        elif kind in ("fence", "code_block"):
            code = token.content.removesuffix("\n")
            if code:
                self._newline()
                self._out.append(_pre(code, code_language(token.info)))
        elif kind == "hr":
            self._newline()
            self._out.append("———")

    def _wrap_last(self, start: str, end: str) -> None:
        if self._out and self._out[-1]:
            self._out[-1] = start + self._out[-1] + end

    def _list_item(self) -> None:
        self._newline()
        depth = len(self._lists)
        counter = self._lists[-1] if self._lists else []
        if counter:
            marker = str(counter[0]) + ". "
            counter[0] += 1
        else:
            marker = "• " if depth <= 1 else "◦ "
        self._out.append("  " * max(depth - 1, 0) + marker)
        self._fresh = True


class _InlineWriter:
    """Writes inline tokens; a tag wraps its content only when that content is not empty.

    Inline code inside formatting or a link is written as text: Telegram allows no
    formatting around code.
    """

    def __init__(self, *, formatted: bool) -> None:
        self._stack: list[tuple[str, str, list[str]]] = [("", "", [])]
        self._formatted = formatted

    def write(self, tokens: Sequence[Token]) -> str:
        for token in tokens:
            self._inline(token)
        while len(self._stack) > 1:  # an unclosed tag: keep its text, drop the tag
            self._close(keep_tags=False)
        return "".join(self._stack[0][2])

    def _emit(self, html: str) -> None:
        self._stack[-1][2].append(html)

    def _open(self, start: str, end: str) -> None:
        self._stack.append((start, end, []))

    def _close(self, keep_tags: bool = True) -> None:
        start, end, parts = self._stack.pop()
        body = "".join(parts)
        if body and keep_tags:
            self._emit(start + body + end)
        else:
            self._emit(body)

    def _inline(self, token: Token) -> None:
        kind = token.type
        if kind in _INLINE_TAGS:
            self._open(*_INLINE_TAGS[kind])
        elif kind in _CLOSERS:
            if len(self._stack) > 1:
                self._close()
        elif kind == "link_open":
            href = str(token.attrGet("href") or "")
            if http_link(href):
                self._open('<a href="' + _escape(href) + '">', "</a>")
            else:
                self._open("", "")
        elif kind == "code_inline":
            if self._formatted or len(self._stack) > 1 or not token.content:
                self._emit(_escape(token.content))
            else:
                self._emit("<code>" + _escape(token.content) + "</code>")
        elif kind in ("softbreak", "hardbreak"):
            self._emit("\n")
        elif kind == "image":
            self._emit(_escape(token.content))
        else:
            self._emit(_escape(token.content))
