"""Which mail an answer gave an agent (SPEC §23): read off the answer of an operation defined with
`returns_mail=True`, by the shapes that carry a message (apps.operations.defs.shapes), and kept for the agent's
credential (apps.agents.reads). The gate calls `record` for an agent's read, once, after the answer is built."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from apps.agents import reads
from apps.core.callers import Caller


def mail_in(output: Any) -> Iterator[tuple[str, str]]:
    """(message id, sender address or '') of every message an answer carries: a message summary or detail
    (id, thread_id, sender), a conversation's messages (message_ids), a row naming its message_id with its sender
    or subject."""
    if isinstance(output, list):
        for item in output:
            yield from mail_in(item)
        return
    if not isinstance(output, dict):
        return
    if "thread_id" in output and "id" in output and "sender" in output:
        sender = output["sender"]
        yield str(output["id"]), sender.get("address", "") if isinstance(sender, dict) else ""
    elif output.get("message_id") and (isinstance(output.get("sender"), str) or "subject" in output):
        sender = output.get("sender")
        yield str(output["message_id"]), sender if isinstance(sender, str) else ""
    if "thread_id" in output and isinstance(output.get("message_ids"), list):
        for message_id in output["message_ids"]:
            yield str(message_id), ""
    for value in output.values():
        if isinstance(value, dict | list):
            yield from mail_in(value)


def record(caller: Caller, output: dict[str, Any]) -> None:
    """Keep the messages of an agent's answer for its credential (SERVICE_UNAVAILABLE when that cannot be done)."""
    reads.record(caller.tenant.pk, caller.credential_kind, caller.credential_id, mail_in(output))
