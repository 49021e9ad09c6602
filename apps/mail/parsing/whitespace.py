"""Whitespace normalizations that header values, bodies and HTML text share."""


def collapse_whitespace(text: str) -> str:
    """The text's words joined by single spaces."""
    return " ".join(text.split())


def normalize_newlines(text: str) -> str:
    """The text with CRLF and lone CR line endings as LF."""
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text
