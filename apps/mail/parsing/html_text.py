"""Rendering HTML mail as readable plain text (for bodies without a text part, and for search).

Most mail's markup is read by a fast reader of its own (`_feed_plain_html`); whatever that reader is not sure
of goes to html.parser, and both make the same calls on the same extractor, so the text is the same.
"""

import re
from html import unescape
from html.parser import HTMLParser

from apps.mail.parsing.whitespace import collapse_whitespace, normalize_newlines

_SKIPPED_TAGS = frozenset({"script", "style", "template"})
_HEAD_TAGS = frozenset({"html", "head", "meta", "link", "title", "base", "style", "script", "noscript", "template"})
_PARAGRAPH_TAGS = frozenset({"p", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "hr", "pre", "dl"})
_BLOCK_TAGS = frozenset(
    {
        "address",
        "article",
        "aside",
        "caption",
        "center",
        "dd",
        "details",
        "dialog",
        "div",
        "dt",
        "fieldset",
        "figcaption",
        "figure",
        "footer",
        "form",
        "header",
        "hgroup",
        "legend",
        "main",
        "nav",
        "section",
        "summary",
        "tbody",
        "tfoot",
        "thead",
    }
)
_HTML_SPACE = re.compile(r"[ \t\n\r\f]+")
_IGNORED_LINK_PREFIXES = ("#", "javascript:")


def html_to_text(html: str) -> str:
    """Render HTML as readable plain text, keeping link targets, alt text, lists, tables and <pre>."""
    extractor = _TextExtractor()
    if _feed_plain_html(extractor, html):
        return extractor.text()
    extractor = _TextExtractor()
    extractor.feed(html)
    extractor.close()
    return extractor.text()


class _TextExtractor(HTMLParser):
    """Collects readable text from HTML, tracking just enough structure for line breaks."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self._parts: list[str] = []
        self._last = ""  # last character written, '' at the start
        self._trailing_newlines = 0
        self._pending_space = False
        self._pending_separator = False
        self._skip = 0
        self._in_head = False
        self._in_title = False
        self._pre = 0
        self._pre_started = False
        self._lists = 0
        self._cells: list[int] = []
        self._links: list[tuple[str, int]] = []

    def text(self) -> str:
        """Return the collected text with blank-line runs collapsed."""
        while self._links:
            self._end_link()
        lines: list[str] = []
        for line in "".join(self._parts).replace("\xa0", " ").split("\n"):
            line = line.rstrip()
            if line or (lines and lines[-1]):
                lines.append(line)
        return "\n".join(lines).strip("\n")

    def parse_marked_section(self, i: int, report: bool = True) -> int:
        """Treat unknown <![...]> sections as bogus comments, as browsers do, instead of failing."""
        try:
            return super().parse_marked_section(i, report)
        except AssertionError:
            end = self.rawdata.find(">", i)
            return len(self.rawdata) if end == -1 else end + 1

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        """Open an element."""
        if tag in _SKIPPED_TAGS:
            self._skip += 1
            return
        if tag == "head":
            self._in_head = True
            return
        if tag == "title":
            self._in_head = self._in_title = True
            return
        if tag not in _HEAD_TAGS:
            self._in_head = self._in_title = False
        if self._skip or self._in_head:
            return
        if tag == "br":
            self._write("\n")
        elif tag in _PARAGRAPH_TAGS:
            self._break(2)
            if tag == "pre":
                self._pre += 1
                self._pre_started = True
        elif tag in _BLOCK_TAGS:
            self._break(1)
        elif tag in ("ul", "ol"):
            self._break(1)
            self._lists += 1
        elif tag == "li":
            self._break(1)
            self._write("  " * max(self._lists - 1, 0) + "- ")
        elif tag == "table":
            self._break(1)
            self._cells.append(0)
        elif tag == "tr":
            self._break(1)
            if self._cells:
                self._cells[-1] = 0
        elif tag in ("td", "th"):
            if self._cells:
                self._pending_separator = self._cells[-1] > 0
                self._cells[-1] += 1
        elif tag == "a":
            if self._links:
                self._end_link()
            href = dict(attrs).get("href") or ""
            self._links.append((href.strip(), len(self._parts)))
        elif tag == "img":
            alt = collapse_whitespace(dict(attrs).get("alt") or "")
            if alt:
                self._inline(f" {alt} ")

    def handle_endtag(self, tag: str) -> None:
        """Close an element."""
        if tag in _SKIPPED_TAGS:
            self._skip = max(self._skip - 1, 0)
            return
        if tag in ("head", "title"):
            self._in_title = False
            self._in_head = self._in_head and tag != "head"
            return
        if self._skip or self._in_head:
            return
        if tag in _PARAGRAPH_TAGS:
            if tag == "pre":
                self._pre = max(self._pre - 1, 0)
            self._break(2)
        elif tag in _BLOCK_TAGS or tag in ("li", "tr"):
            self._break(1)
        elif tag in ("ul", "ol"):
            self._lists = max(self._lists - 1, 0)
            self._break(1)
        elif tag == "table":
            if self._cells:
                self._cells.pop()
            self._break(1)
        elif tag == "a" and self._links:
            self._end_link()

    def handle_data(self, data: str) -> None:
        """Add text, collapsing whitespace outside <pre>."""
        if self._skip:
            return
        if self._in_head:
            if self._in_title or data.isspace():
                return
            self._in_head = False
        if self._pre:
            if self._pre_started and data.startswith("\n"):
                data = data[1:]
            self._pre_started = False
            self._inline_raw(normalize_newlines(data))
        else:
            # (most text has single spaces only, which the substitution would leave as they are)
            collapse = "  " in data or "\n" in data or "\t" in data or "\r" in data or "\f" in data
            self._inline(_HTML_SPACE.sub(" ", data) if collapse else data)

    def _end_link(self) -> None:
        href, start = self._links.pop()
        if not href or href.startswith(_IGNORED_LINK_PREFIXES):
            return
        label = collapse_whitespace("".join(self._parts[start:]))
        if not label:
            self._inline(f" {href} ")
        elif not _same_target(label, href):
            self._inline(f" ({href}) ")

    def _inline(self, text: str) -> None:
        """Write collapsed text, where a leading or trailing ' ' only asks for a word break."""
        core = text.strip(" ")
        if not core:
            if text and self._last not in ("", "\n", " "):
                self._pending_space = True
            return
        if self._pending_separator:
            self._pending_separator = False
            if self._last not in ("", "\n"):
                self._write("| " if self._last == " " else " | ")
                self._pending_space = False
        if (self._pending_space or text[0] == " ") and self._last not in ("", "\n", " "):
            core = " " + core
        self._write(core)
        self._pending_space = text[-1] == " "

    def _inline_raw(self, text: str) -> None:
        if not text:
            return
        if self._pending_space and self._last not in ("", "\n", " "):
            self._write(" ")
        self._pending_space = self._pending_separator = False
        self._write(text)

    def _break(self, newlines: int) -> None:
        self._pending_space = self._pending_separator = False
        if self._last and self._trailing_newlines < newlines:
            self._write("\n" * (newlines - self._trailing_newlines))

    def _write(self, text: str) -> None:
        self._parts.append(text)
        stripped = text.rstrip("\n")
        if not stripped:
            self._trailing_newlines += len(text)
        else:
            self._trailing_newlines = len(text) - len(stripped)
        self._last = text[-1]


# Markup that html.parser reads the same way in every Python version: text, comments without "--" in them,
# start tags with plain attributes, end tags, doctypes. Anything else (a lone "<", bogus comments, <? ?>,
# <![ ]]>, unquoted values with quotes or "=", attributes without a blank before them) matches the last
# alternative, and the HTML is left to html.parser itself.
_ATTRIBUTE = (
    r"""[ \t\n\r\f]+([a-zA-Z_:][-a-zA-Z0-9_:.]*)"""
    r"""(?:[ \t\n\r\f]*=[ \t\n\r\f]*("[^"]*"|'[^']*'|[^\s"'=<>`]+))?"""
)
_HTML_TOKEN = re.compile(
    r"([^<]+)"  # 1: text
    r"|<!--(.*?)-->"  # 2: a comment
    r"|<([a-zA-Z][a-zA-Z0-9]*)((?:" + _ATTRIBUTE.replace("(", "(?:").replace("(?:?:", "(?:") + r")*)[ \t\n\r\f]*(/?)>"
    r"|</([a-zA-Z][a-zA-Z0-9]*)[ \t\n\r\f]*>"  # 6: an end tag
    r"|(<![dD][oO][cC][tT][yY][pP][eE][^>]*>)"  # 7: a doctype
    r"|(<)",  # 8: anything else
    re.DOTALL,
)
_PLAIN_ATTR = re.compile(_ATTRIBUTE)
# token.lastindex: the last group that matched (for start tags the always-matching "/?")
_TEXT, _COMMENT, _START, _END, _DOCTYPE, _OTHER = 1, 2, 5, 6, 7, 8
# Elements whose content some versions of html.parser read as raw text (not markup, entities kept): read
# here only when their content is text without markup followed by their end tag, and without entities
# unless the text is not shown anyway.
_RAW_TEXT_TAGS = frozenset(
    {"script", "style", "title", "textarea", "xmp", "iframe", "noembed", "noframes", "noscript", "plaintext"}
)
_UNSHOWN_RAW_TEXT_TAGS = frozenset({"script", "style", "title"})


def _feed_plain_html(extractor: HTMLParser, html: str) -> bool:
    """Make the handler calls html.parser would make for this HTML, reading it faster; False (having made some
    of them) when the HTML has markup left to html.parser."""
    data, start, end = extractor.handle_data, extractor.handle_starttag, extractor.handle_endtag
    find, match = html.find, _HTML_TOKEN.match
    position, length = 0, len(html)
    while position < length:
        bracket = find("<", position)
        if bracket == -1:
            bracket = length
        if bracket > position:
            text = html[position:bracket]
            data(unescape(text) if "&" in text else text)
            if bracket == length:
                break
        # <name> and </name> are most tags: told apart without the regular expression
        close = find(">", bracket)
        inner = html[bracket + 1 : close] if close != -1 else ""
        if inner.isalnum() and inner.isascii() and inner[0].isalpha():
            name = inner.lower()
            start(name, [])
            position = close + 1
        elif inner[:1] == "/" and inner[1:].isalnum() and inner.isascii() and inner[1].isalpha():
            end(inner[1:].lower())
            position = close + 1
            continue
        else:
            token = match(html, bracket)
            assert token is not None  # the last alternative matches any "<"
            kind, position = token.lastindex, token.end()
            if kind == _END:
                end(token.group(6).lower())
                continue
            if kind == _COMMENT:
                # html.parser's idea of where a comment ends changed between versions, except for these
                body = token.group(2)
                if "--" in body or body.startswith((">", "->")):
                    return False
                continue
            if kind != _START:
                if kind == _OTHER:
                    return False
                continue  # a doctype
            name = token.group(3).lower()
            attrs: list[tuple[str, str | None]] = []
            if token.group(4):
                for attribute in _PLAIN_ATTR.finditer(token.group(4)):
                    value: str | None = attribute.group(2)
                    if value is not None and value[:1] in ("'", '"'):
                        value = value[1:-1]
                    if value:
                        value = unescape(value)
                    attrs.append((attribute.group(1).lower(), value))
            start(name, attrs)
            if token.group(5):
                end(name)
                continue
        if name in _RAW_TEXT_TAGS:
            # the element's text, up to its own end tag
            if name == "plaintext":
                return False
            content_end = find("<", position)
            closing = match(html, content_end) if content_end != -1 else None
            if closing is None or closing.lastindex != _END or closing.group(6).lower() != name:
                return False
            content = html[position:content_end]
            if "&" in content and name not in _UNSHOWN_RAW_TEXT_TAGS:
                return False
            if content:
                # html.parser passes script and style content as it is, other text unescaped
                data(content if name in ("script", "style") else unescape(content))
            end(name)
            position = closing.end()
    return True


def _same_target(label: str, href: str) -> bool:
    """Whether showing the href next to the label would only repeat it."""
    target = href
    for prefix in ("mailto:", "tel:", "https://", "http://"):
        if target.lower().startswith(prefix):
            target = target[len(prefix) :]
            break
    return label in (href, target) or label.rstrip("/") in (href.rstrip("/"), target.rstrip("/"))
