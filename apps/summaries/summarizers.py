"""The summarizer the settings name, and its identity (kind, model, prompt version), which keys the cache."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Protocol

from django.conf import settings

from apps.core.bounds import bounds
from apps.search.chunks import own_text
from apps.summaries import llm, textrank


@dataclass(frozen=True)
class Identity:
    kind: str
    model: str
    prompt_version: str


@dataclass(frozen=True)
class Mail:
    """What a summarizer is given of one message."""

    subject: str
    sender: str
    date: datetime | None
    body: str


@dataclass(frozen=True)
class Written:
    text: str
    truncated: bool  # cut at the summary bound


class Summarizer(Protocol):
    def identity(self, limit: int) -> Identity: ...

    def summarize(self, mails: list[Mail], limit: int) -> Written:
        """One summary of the mails (a message, or a thread oldest first) in at most `limit` characters."""
        ...


def cut(text: str, limit: int) -> Written:
    if len(text) <= limit:
        return Written(text, False)
    return Written(text[: limit - 1].rstrip() + textrank.ELLIPSIS, True)


class LocalSummarizer:
    def identity(self, limit: int) -> Identity:
        # the bound is part of what the summary is: a new bound makes new summaries
        return Identity("local", textrank.version(), f"{limit}")

    def summarize(self, mails: list[Mail], limit: int) -> Written:
        text = "\n\n".join(own_text(m.body) for m in mails)
        extract = textrank.summarize_own_text(text, limit)
        return Written(extract.text, extract.truncated)


class LlmSummarizer:
    def __init__(self, chat: llm.ChatSummarizer, input_max_chars: int) -> None:
        self._chat = chat
        self._input_max_chars = input_max_chars

    def identity(self, limit: int) -> Identity:
        return Identity("llm", self._chat.model, f"{llm.PROMPT_VERSION}/{limit}")

    def summarize(self, mails: list[Mail], limit: int) -> Written:
        blocks = []
        for m in mails:
            when = m.date.isoformat() if m.date else "unknown"
            blocks.append(f"Subject: {m.subject}\nFrom: {m.sender}\nDate: {when}\n\n{own_text(m.body)}")
        mail = "\n\n-----\n\n".join(blocks)[: self._input_max_chars]
        return cut(self._chat.summarize(mail, limit), limit)


_lock = threading.Lock()


def current_summarizer() -> Summarizer:
    """The summarizer the settings name, built once per process (and again when the settings change)."""
    with _lock:
        return _build(tuple(sorted(settings.SUMMARIES.items())), bounds.TEXT_MAX_CHARS)


@lru_cache(maxsize=4)
def _build(config: tuple[tuple[str, object], ...], input_max_chars: int) -> Summarizer:
    options = dict(config)
    if options["SUMMARIZER"] == "llm":
        chat = llm.ChatSummarizer(
            base_url=str(options["LLM_BASE_URL"]),
            api_key=str(options["LLM_API_KEY"]),
            model=str(options["LLM_MODEL"]),
            timeout=float(str(options["LLM_TIMEOUT_SECONDS"])),
            max_concurrency=int(str(options["LLM_MAX_CONCURRENCY"])),
            attempts=int(str(options["LLM_ATTEMPTS"])),
        )
        return LlmSummarizer(chat, input_max_chars)
    return LocalSummarizer()
