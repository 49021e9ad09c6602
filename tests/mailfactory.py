"""Raw RFC 5322 messages and mail sources (mbox, Maildir, .eml folders) built for tests and benchmarks."""

from __future__ import annotations

import mailbox
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

BASE_DATE = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def raw_message(
    *,
    subject: str = "Hello",
    body: str = "Hi there.\n",
    sender: str = "Sender <sender@example.test>",
    to: str = "alice@example.test",
    message_id: str | None = "<m1@example.test>",
    in_reply_to: str | None = None,
    references: Iterable[str] = (),
    date: datetime | None = None,
    extra_headers: Iterable[tuple[str, str]] = (),
) -> bytes:
    """A plain-text UTF-8 message; None leaves a header out."""
    lines = [f"From: {sender}", f"To: {to}", f"Subject: {subject}"]
    lines.append(f"Date: {format_datetime(date or BASE_DATE)}")
    if message_id is not None:
        lines.append(f"Message-ID: {message_id}")
    if in_reply_to is not None:
        lines.append(f"In-Reply-To: {in_reply_to}")
    refs = list(references)
    if refs:
        lines.append("References: " + " ".join(refs))
    lines.extend(f"{name}: {value}" for name, value in extra_headers)
    lines += [
        "MIME-Version: 1.0",
        "Content-Type: text/plain; charset=utf-8",
        "Content-Transfer-Encoding: 8bit",
        "",
    ]
    return ("\n".join(lines) + "\n" + body).encode()


def conversation(n: int, *, prefix: str = "conv", subject: str = "Plans") -> list[bytes]:
    """n messages, each replying to the one before (References grow along the chain)."""
    messages: list[bytes] = []
    ids: list[str] = []
    for i in range(n):
        mid = f"<{prefix}-{i}@example.test>"
        messages.append(
            raw_message(
                subject=subject if i == 0 else f"Re: {subject}",
                body=f"Message {i} of {prefix}.\n",
                message_id=mid,
                in_reply_to=ids[-1] if ids else None,
                references=list(ids),
                date=BASE_DATE + timedelta(minutes=i),
            )
        )
        ids.append(mid)
    return messages


def write_mbox(path: Path, messages: Iterable[bytes]) -> Path:
    """An mbox file written by the standard library."""
    box = mailbox.mbox(str(path), create=True)
    box.lock()
    try:
        for raw in messages:
            box.add(raw)
        box.flush()
    finally:
        box.unlock()
        box.close()
    return path


def write_maildir(path: Path, messages: Iterable[bytes]) -> Path:
    box = mailbox.Maildir(str(path), create=True)
    for raw in messages:
        box.add(raw)
    box.close()
    return path


def write_eml_folder(path: Path, messages: Iterable[bytes]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for i, raw in enumerate(messages):
        sub = path / ("nested" if i % 2 else "")
        sub.mkdir(exist_ok=True)
        (sub / f"message-{i:04d}.eml").write_bytes(raw)
    return path
