"""Markdown to the HTML subset Telegram accepts, walking markdown-it-py's token stream.

Bold, italic, strikethrough, inline code, fenced/indented code and http(s) links map to
their Telegram tags; headings become bold lines; lists become text bullets; a blockquote
becomes ``<blockquote>`` unless the caller already sits inside one (Telegram refuses
nested quotes). Everything else (images, raw HTML, tables) degrades to text. The output
is always balanced: a tag is only written around content that is not just whitespace
(Telegram drops such entities).

Tokens carry decoded text (backslash escapes and character references resolved), so each
token's text is cleaned, masked and its hidden characters marked again here:
``sk\\_live`` or ``sk&#95;live`` must not bring back a secret, nor ``&#x2067;`` or
``&rlm;`` a direction control (see :mod:`bot.hidden`).
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from urllib.parse import unquote, urlsplit

from markdown_it import MarkdownIt
from markdown_it.token import Token

from bot import hidden
from bot.render.hosts import honest_hosts
from bot.render.masking import MASK, NO_SECRETS, Masker, clean

_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"})
_LANGUAGE = re.compile(r"[A-Za-z0-9_+#.-]{1,32}")
_UNSAFE_URL_CHARS = re.compile(r"[\s\x00-\x1f\x7f]")
_MAX_URL_CHARS = 2048
_HOST = re.compile(r"[^\W_]+(?:-+[^\W_]+)*(?:\.[^\W_]+(?:-+[^\W_]+)*)+")
"""Labels of letters and digits (any script) with inner hyphens, joined by dots."""
_ASCII_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
"""One label of a host name in its ASCII (IDNA) form."""
_TAG = re.compile(r"<[^>]*>")

_PARSER = MarkdownIt("commonmark", {"html": False}).enable("strikethrough")

_INLINE_TAGS = {
    "em_open": ("<i>", "</i>"),
    "strong_open": ("<b>", "</b>"),
    "s_open": ("<s>", "</s>"),
}
_CLOSERS = {"em_close", "strong_close", "s_close", "link_close"}
_TEXTLESS = frozenset(_INLINE_TAGS) | _CLOSERS | {"link_open"}
_BREAKS = frozenset(("softbreak", "hardbreak"))


def escape(text: str) -> str:
    """Escape text for Telegram HTML: ``&``, ``<``, ``>`` and ``"``, nothing else."""
    return text.translate(_ESCAPES)


def http_link(url: str) -> bool:
    """Whether Telegram would accept ``url`` as a link target: http(s) with a host name
    of at least two labels, each of letters (any script), digits and inner hyphens.

    Anything else (``javascript:``, ``mailto:``, relative, bare words, ``a..b``,
    ``ex.com<b>``) must be shown as text, never put in an ``href``.
    """
    if len(url) > _MAX_URL_CHARS or _UNSAFE_URL_CHARS.search(url):
        return False
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port  # a bad port raises ValueError
    except ValueError:
        return False
    return (
        parts.scheme.lower() in ("http", "https")
        and host is not None
        and _is_host(host)
        and port != 0
    )


def _is_host(host: str) -> bool:
    if not _HOST.fullmatch(host):
        return False
    try:
        ascii_host = host.encode("idna").decode("ascii")
    except UnicodeError:  # a label too long, or letters IDNA cannot map
        return False
    return all(_ASCII_LABEL.fullmatch(label) for label in ascii_host.split("."))


def code_language(info: str) -> str:
    """The ``language-x`` class name for a fence's info string, or ``""``."""
    words = info.split()
    if words and _LANGUAGE.fullmatch(words[0]):
        return words[0].lower()
    return ""


def markdown_to_html(text: str, *, quotes: bool = True, mask: Masker = NO_SECRETS) -> str:
    """Convert Markdown to Telegram HTML; ``quotes=False`` when the result will sit inside
    a blockquote already.

    ``mask`` hides secrets in what the Markdown decodes to, also where formatting splits
    one. Should a secret still read across paragraphs, the result is the masked text
    without formatting.
    """
    rendered = _BlockWriter(quotes, mask).write(_PARSER.parse(text))
    if mask and mask.spans(shown := _visible(rendered)):
        return escape(mask(shown))
    return rendered


def markdown_reveals(text: str, mask: Masker) -> bool:
    """Whether what ``text`` reads as, once rendered, holds a secret: spelled with escapes
    or character references, in a link target, or split over several paragraphs."""
    if not mask:
        return False
    writer = _BlockWriter(True, mask)
    rendered = writer.write(_PARSER.parse(text))
    return writer.masked or bool(mask.spans(_visible(rendered)))


def markdown_to_text(text: str, mask: Masker) -> str:
    """The text ``text`` reads as once rendered, without formatting, secrets masked."""
    return mask(_visible(markdown_to_html(text, quotes=False, mask=mask)))


def _visible(rendered: str) -> str:
    return html.unescape(_TAG.sub("", rendered))


def _pre(code: str, language: str) -> str:
    if language:
        return '<pre><code class="language-' + language + '">' + escape(code) + "</code></pre>"
    return "<pre>" + escape(code) + "</pre>"


def _token_text(token: Token) -> str:
    """The text a token shows, decoded and cleaned: an image shows its description."""
    if token.type in _TEXTLESS:
        return ""
    if token.type in _BREAKS:
        return "\n"
    if token.type == "image":
        return "".join(_token_text(child) for child in token.children or ())
    # An autolink's text is its target with the host decoded from xn--: encode it again.
    return hidden.strip(honest_hosts(clean(token.content))[0])


def _masked_texts(texts: list[str], mask: Masker) -> tuple[list[str], bool]:
    """``texts`` with every secret masked, also one spread over several texts (formatting
    in the middle of it): the first text it touches shows the mask, the others lose
    their part of it."""
    joined = "".join(texts)
    spans = mask.spans(joined) if mask else []
    if not spans:
        return texts, False
    masked: list[str] = []
    offset = index = 0
    for text in texts:
        begin, finish = offset, offset + len(text)
        parts: list[str] = []
        position = begin
        while index < len(spans) and spans[index][0] < finish:
            start, stop = spans[index]
            if start >= begin:
                parts += (joined[position:start], MASK)
            position = min(stop, finish)
            if stop > finish:
                break  # the secret goes on in the next text
            index += 1
        parts.append(joined[position:finish])
        masked.append("".join(parts))
        offset = finish
    return masked, True


class _BlockWriter:
    """Writes block tokens one after another, one line per block; ``masked`` tells
    afterwards whether a secret was masked in what the tokens decoded to."""

    def __init__(self, quotes: bool, mask: Masker) -> None:
        self._quotes = quotes
        self._mask = mask
        self._out: list[str] = []
        self._lists: list[list[int]] = []  # per open list: [next number] or [] if bulleted
        self._quote_depth = 0
        self._quote_start = (0, True)  # where the open quote began, and self._fresh then
        self._fresh = True  # nothing written on the current line yet
        self._heading = False
        self.masked = False

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
                self._open_quote()
        elif kind == "blockquote_close":
            self._quote_depth -= 1
            if self._quotes and self._quote_depth == 0:
                self._close_quote()
        elif kind in ("paragraph_open", "heading_open"):
            self._heading = kind == "heading_open"
            self._newline()
        elif kind == "inline":
            writer = _InlineWriter(formatted=self._heading, mask=self._mask)
            self._out.append(writer.write(token.children or ()))
            self.masked |= writer.masked
        elif kind == "heading_close":
            self._wrap_last("<b>", "</b>")
        elif kind in ("fence", "code_block"):
            self._code(token)
        elif kind == "hr":
            self._newline()
            self._out.append("———")

    def _open_quote(self) -> None:
        self._quote_start = (len(self._out), self._fresh)
        self._newline()
        self._out.append("<blockquote>")
        self._fresh = True

    def _close_quote(self) -> None:
        start, fresh = self._quote_start
        if "".join(self._out[start:]).removeprefix("\n").removeprefix("<blockquote>").strip():
            self._out.append("</blockquote>")
        else:  # nothing to see: no quote at all
            del self._out[start:]
            self._fresh = fresh

    def _code(self, token: Token) -> None:
        code = clean(token.content).removesuffix("\n")
        shown = self._mask(code)
        language = code_language(clean(token.info))
        if language and self._mask(language) != language:
            language = ""
            self.masked = True
        self.masked |= shown != code
        if shown.strip():
            self._newline()
            self._out.append(_pre(shown, language))

    def _wrap_last(self, start: str, end: str) -> None:
        if self._out and self._out[-1].strip():
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
    """Writes inline tokens; a tag wraps its content only when that content is more than
    whitespace.

    Inline code inside formatting or a link is written as text: Telegram allows no
    formatting around code. A link whose target holds a secret is written as its text.
    """

    def __init__(self, *, formatted: bool, mask: Masker) -> None:
        self._stack: list[tuple[str, str, list[str]]] = [("", "", [])]
        self._formatted = formatted
        self._mask = mask
        self.masked = False

    def write(self, tokens: Sequence[Token]) -> str:
        texts, self.masked = _masked_texts([_token_text(token) for token in tokens], self._mask)
        for token, text in zip(tokens, texts, strict=True):
            self._inline(token, text)
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
        if body.strip() and keep_tags:
            self._emit(start + body + end)
        else:
            self._emit(body)

    def _inline(self, token: Token, text: str) -> None:
        kind = token.type
        if kind in _INLINE_TAGS:
            self._open(*_INLINE_TAGS[kind])
        elif kind in _CLOSERS:
            if len(self._stack) > 1:
                self._close()
        elif kind == "link_open":
            href = str(token.attrGet("href") or "")
            if http_link(href) and not self._holds_secret(href):
                self._open('<a href="' + escape(href) + '">', "</a>")
            else:
                self._open("", "")
        elif kind == "code_inline" and not self._formatted and len(self._stack) == 1:
            self._emit("<code>" + escape(text) + "</code>" if text.strip() else escape(text))
        else:
            self._emit(escape(text))

    def _holds_secret(self, href: str) -> bool:
        if not self._mask:
            return False
        holds = bool(self._mask.spans(href) or self._mask.spans(clean(unquote(href))))
        self.masked |= holds
        return holds
