"""What a rule says, and how it decides: its conditions and actions as validated shapes (the operations' input and
the stored JSON alike), and the evaluation of a message against them, which explains itself.

An explanation is in the rule's own terms ("from: domain is example.com", "about 'invoices': 0.71"), never the
mail's text: it is stored on the message (RuleApplication.matched) and shown to anyone who reads it.

Matching is case-insensitive (casefold); an address condition compares whole addresses or domains (a domain covers
its subdomains), never substrings of them unless it says `contains`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from apps.mail.models import FolderKind


class Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


# at least one character that is space to neither side: the published pattern (ECMA's \s) and the stripping
# (Python's, which also takes \x1c-\x1f and \x85) agree on what is blank
Text = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200, pattern=r"[^\s\x1c-\x1f\x85]")
]
# the headers Oaken keeps of every message (apps.mail.parsing.message.KEPT_HEADERS), the ones a rule can test
HeaderName = Literal["list-id", "list-unsubscribe", "auto-submitted", "precedence", "x-mailer"]


class AddressCondition(Closed):
    field: Literal["from", "to"] = Field(description="from: the sender; to: any recipient in To or Cc")
    op: Literal["is", "domain", "contains"] = Field(
        description="is: the whole address; domain: its domain or a subdomain of it; contains: part of it or of "
        "the name"
    )
    value: Text


class TextCondition(Closed):
    field: Literal["subject", "body", "list_id"] = Field(description="list_id: the List-Id header")
    op: Literal["contains", "is"] = "contains"
    value: Text


class HeaderCondition(Closed):
    field: Literal["header"]
    name: HeaderName
    op: Literal["contains", "is", "present"] = "contains"
    value: str = Field(default="", max_length=200, description="not used by present")


class AttachmentCondition(Closed):
    field: Literal["attachment"]
    type: Text = Field(
        description="a media type (application/pdf), a family (image/*), an extension (.pdf), or * for any"
    )


class FolderCondition(Closed):
    field: Literal["folder"]
    value: Text = Field(description="inbox, archive, spam, trash or a folder's name")


class AgeCondition(Closed):
    field: Literal["age"]
    op: Literal["older_than", "newer_than"]
    days: int = Field(ge=0, le=3650)


class AboutCondition(Closed):
    field: Literal["about"]
    text: Text = Field(description="a short description of what the mail is about, compared by meaning")
    threshold: float = Field(
        default=0.35, ge=0.0, le=1.0, description="the least similarity (0-1) that counts as about it"
    )


class LabelCondition(Closed):
    field: Literal["label"]
    label_id: str = Field(
        min_length=1,
        max_length=64,
        description="a label of the mailbox (its id: renaming it changes nothing); holds when the message carries "
        "it, put on by its description (an AI label, waited for as for about), by the mail server or by hand",
    )


Condition = Annotated[
    AddressCondition
    | TextCondition
    | HeaderCondition
    | AttachmentCondition
    | FolderCondition
    | AgeCondition
    | AboutCondition
    | LabelCondition,
    Field(discriminator="field"),
]


class LabelAction(Closed):
    action: Literal["add_label", "remove_label"]
    label: Text = Field(description="the label's name, in the message's mailbox (add_label creates it if missing)")


class MoveAction(Closed):
    action: Literal["move"]
    folder: Text = Field(description="archive, spam, trash, inbox or a folder's name")


class FlagAction(Closed):
    action: Literal["mark_read", "pin", "skip_inbox", "stop"] = Field(
        description="skip_inbox: to the archive if it is in the inbox; stop: no later rule acts on the message"
    )


class SnoozeAction(Closed):
    action: Literal["snooze"]
    days: int = Field(ge=1, le=366, description="snoozed for this many days from when the rule acts")


class ForwardAction(Closed):
    action: Literal["forward"]
    to: str = Field(
        min_length=3,
        max_length=320,
        json_schema_extra={"format": "email"},
        description="the address each matching message is forwarded to. A standing send: it needs the send "
        "permission, a rule of one mailbox, and a person's approval (an agent's waits for one on /automations)",
    )


Action = Annotated[LabelAction | MoveAction | FlagAction | SnoozeAction | ForwardAction, Field(discriminator="action")]


class RuleBody(Closed):
    """What a rule does: its match, conditions and actions (the part whose change makes a new version)."""

    match: Literal["all", "any"] = Field(default="all", description="all conditions must hold, or any one")
    conditions: list[Condition] = Field(min_length=1, max_length=20)
    # a rule whose only action is stop is an exception: the mail it matches is left to no later rule
    actions: list[Action] = Field(min_length=1, max_length=10)

    @property
    def forwards(self) -> list[str]:
        """Where the rule forwards what it matches: each destination once, in the order given."""
        return list(dict.fromkeys(a.to for a in self.actions if isinstance(a, ForwardAction)))

    def label_ids(self) -> set[str]:
        return {c.label_id for c in self.conditions if isinstance(c, LabelCondition)}


def stored(body: RuleBody) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return (
        [c.model_dump(mode="json") for c in body.conditions],
        [a.model_dump(mode="json") for a in body.actions],
    )


def loaded(match: str, conditions: Any, actions: Any) -> RuleBody:
    """A stored rule's body, validated again (a row is data like any input)."""
    return RuleBody.model_validate({"match": match, "conditions": conditions, "actions": actions})


# ---------------------------------------------------------------- evaluation


@dataclass
class Facts:
    """What a rule can test of a message, loaded once for every rule."""

    id: Any
    account_id: Any
    workspace_id: Any
    sender_address: str
    sender_name: str
    recipients: list[tuple[str, str]]  # (address, name), To and Cc
    subject: str
    body: str
    headers: dict[str, str]
    folder_kind: str
    folder_name: str
    date: datetime | None
    attachments: list[tuple[str, str]]  # (content type, filename)
    # "about" texts to similarity (absent: not embedded)
    nearness: dict[str, float] = field(default_factory=dict)
    # the labels it carries, of those the rules name: id (as text) to name
    labels: dict[str, str] = field(default_factory=dict)


def _domain_of(address: str) -> str:
    return address.rpartition("@")[2]


def _address_matches(op: str, value: str, address: str, name: str) -> bool:
    address = address.casefold()
    if op == "is":
        return address == value
    if op == "domain":
        domain = _domain_of(address)
        wanted = value.removeprefix("@")
        return domain == wanted or domain.endswith("." + wanted)
    return value in address or value in name.casefold()


def _text_matches(op: str, value: str, text: str) -> bool:
    text = text.casefold()
    return text.strip() == value if op == "is" else value in text


def _attachment_matches(wanted: str, content_type: str, filename: str) -> bool:
    if wanted == "*":
        return True
    if wanted.startswith("."):
        return filename.casefold().endswith(wanted)
    if wanted.endswith("/*"):
        return content_type.casefold().startswith(wanted[:-1])
    return content_type.casefold() == wanted


def _folder_matches(value: str, kind: str, name: str) -> bool:
    if value in FolderKind.values and value != FolderKind.CUSTOM:
        return kind == value
    return name.casefold() == value


def check(condition: Any, facts: Facts, now: datetime) -> str | None:
    """Why `condition` holds for the message, in the rule's words; None when it does not."""
    kind = condition.field
    if isinstance(condition, AddressCondition):
        value = condition.value.casefold()
        people = [(facts.sender_address, facts.sender_name)] if kind == "from" else facts.recipients
        if any(_address_matches(condition.op, value, a, n) for a, n in people):
            return f"{kind}: {condition.op} {condition.value}"
        return None
    if isinstance(condition, TextCondition):
        text = {"subject": facts.subject, "body": facts.body, "list_id": facts.headers.get("list-id", "")}[kind]
        if _text_matches(condition.op, condition.value.casefold(), text):
            return f"{kind}: {condition.op} {condition.value}"
        return None
    if isinstance(condition, HeaderCondition):
        present = condition.name in facts.headers
        header = facts.headers.get(condition.name, "")
        if condition.op == "present":
            return f"header {condition.name}: present" if present else None
        if present and _text_matches(condition.op, condition.value.casefold(), header):
            return f"header {condition.name}: {condition.op} {condition.value}"
        return None
    if isinstance(condition, AttachmentCondition):
        wanted = condition.type.casefold()
        if any(_attachment_matches(wanted, t, f) for t, f in facts.attachments):
            return f"attachment: {condition.type}"
        return None
    if isinstance(condition, FolderCondition):
        if _folder_matches(condition.value.casefold(), facts.folder_kind, facts.folder_name):
            return f"folder: {condition.value}"
        return None
    if isinstance(condition, AgeCondition):
        if facts.date is None:
            return None
        older = facts.date <= now - timedelta(days=condition.days)
        if older == (condition.op == "older_than"):
            return f"age: {condition.op.replace('_', ' ')} {condition.days} days"
        return None
    if isinstance(condition, LabelCondition):
        name = facts.labels.get(condition.label_id)
        return f"label: {name}" if name is not None else None
    assert isinstance(condition, AboutCondition)
    score = facts.nearness.get(condition.text)
    if score is not None and score >= condition.threshold:
        return f"about '{condition.text}': {score:.2f} (at least {condition.threshold:.2f})"
    return None


def decide(body: RuleBody, facts: Facts, now: datetime) -> list[str] | None:
    """Why the rule matches the message (the conditions that held: all of them, or the first that did), or None."""
    reasons: list[str] = []
    for condition in body.conditions:
        why = check(condition, facts, now)
        if why is None and body.match == "all":
            return None
        if why is not None:
            reasons.append(why)
            if body.match == "any":
                return reasons
    return reasons or None


def about_texts(bodies: Sequence[RuleBody]) -> set[str]:
    """The "about" descriptions these rules ask for (each scored once a batch)."""
    return {c.text for b in bodies for c in b.conditions if isinstance(c, AboutCondition)}
