"""Snippets: a person's reusable texts for compose, with placeholders (apps.outbound.snippets).

A snippet belongs to its tenant and its person: an agent works with its person's snippets, and nobody else's is
ever found (NOT_FOUND). create_draft, reply_to_message and forward_message take a snippet_id: its text, filled
from the message replied to or forwarded and from the account written from, goes where the body goes, before any
body given with it (the console gives a signature there). fill_snippet gives the same text without writing a
draft (the console puts it where the person is typing). Agents read snippets as MailText (fenced as data at the
MCP door, like mail and signatures). Bounds: SNIPPETS_MAX per person and tenant, SNIPPET_MAX_CHARS each.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, NamedTuple

from pydantic import Field, StringConstraints

from apps.accounts.models import User
from apps.core import words
from apps.core.changes import Change
from apps.core.errors import OakenError
from apps.mail.models import MailAccount, Message
from apps.mail.selectors import access_message_by_id
from apps.operations.context import Context
from apps.operations.defs.shapes import Closed, Empty, Id, MailBody, MailText
from apps.operations.registry import ALWAYS, NEVER, Bound, Ceiling, OpClass, Preview, operation
from apps.operations.targets import account_of, reach
from apps.outbound import snippets
from apps.outbound.models import Snippet

SnippetName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=100)]
_TEXT = "the text; placeholders in braces: " + ", ".join("{" + p + "}" for p in snippets.PLACEHOLDERS)
TEXT_BOUND = Bound("text", "SNIPPET_MAX_CHARS", "{field}: at most {maximum} characters")


class SnippetOut(Closed):
    id: str
    name: MailText
    text: MailBody
    created_at: datetime
    updated_at: datetime


class SnippetsOut(Closed):
    snippets: list[SnippetOut]
    placeholders: list[str] = Field(description="the placeholders a snippet may use, without braces")


def _out(snippet: Snippet) -> SnippetOut:
    return SnippetOut(
        id=str(snippet.pk),
        name=snippet.name,
        text=snippet.text,
        created_at=snippet.created_at,
        updated_at=snippet.updated_at,
    )


def _person(ctx: Context) -> User:
    if ctx.caller.user is None:
        raise OakenError.not_found("snippet_id")
    return ctx.caller.user


def snippet_of(ctx: Context, snippet_id: str) -> Snippet:
    """The caller's own snippet (an agent's: its person's); anyone else's is NOT_FOUND."""
    return snippets.access_snippet_by_id(snippet_id, tenant=ctx.tenant, user=_person(ctx))


def filled(ctx: Context, snippet: Snippet, *, account: MailAccount, message: Message | None, subject: str) -> str:
    values = snippets.values_for(
        account=account, message=message, subject=subject, now=ctx.now, person_name=ctx.person_name
    )
    return snippets.fill(snippet.text, values)


def with_snippet(text: str, body: str) -> str:
    """Where a snippet goes in a draft: its text, then the body given with it (a signature, say)."""
    return f"{text}{body}" if body.startswith("\n") or not body else f"{text}\n\n{body}"


def _check_text(ctx: Context, text: str) -> None:
    limit = ctx.bounds.SNIPPET_MAX_CHARS
    if len(text) > limit:
        raise OakenError("LIMIT_EXCEEDED", f"text: at most {limit} characters", field="text")
    snippets.check_text(text)


# ---------------------------------------------------------------- list_snippets


@operation(
    name="list_snippets",
    summary="Your snippets (reusable texts with placeholders for compose), by name.",
    input=Empty,
    output=SnippetsOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.ON,
)
def list_snippets(ctx: Context, data: Empty) -> SnippetsOut:
    rows = snippets.snippets_of(tenant=ctx.tenant, user=ctx.caller.user) if ctx.caller.user else []
    return SnippetsOut(snippets=[_out(s) for s in rows], placeholders=list(snippets.PLACEHOLDERS))


# ---------------------------------------------------------------- create_snippet


class CreateSnippetIn(Closed):
    name: SnippetName
    text: str = Field(min_length=1, description=_TEXT, json_schema_extra={"pattern": snippets.TEXT_PATTERN})


def _create_targets(ctx: Context, data: CreateSnippetIn) -> None:
    _check_text(ctx, data.text)


def _create_preview(ctx: Context, data: CreateSnippetIn) -> Preview:
    return Preview((Change("new snippet", None, {"name": data.name, "chars": len(data.text)}),))


@operation(
    name="create_snippet",
    summary="Save a reusable text for compose; placeholders in braces ({first_name}, {my_name}, …) are filled "
    "when a draft is written from it.",
    input=CreateSnippetIn,
    output=SnippetOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_create_preview,
    confirm=NEVER,
    targets=_create_targets,
    bounds=(TEXT_BOUND,),
)
def create_snippet(ctx: Context, data: CreateSnippetIn) -> SnippetOut:
    """Changes no mail; taken back with delete_snippet: no confirmation asked."""
    made = snippets.create_snippet(
        act=ctx, user=_person(ctx), name=data.name, text=data.text, limit=ctx.bounds.SNIPPETS_MAX
    )
    return _out(made)


# ---------------------------------------------------------------- update_snippet


class UpdateSnippetIn(Closed):
    snippet_id: Id
    name: SnippetName | None = Field(default=None, description="left out: as it is")
    text: str | None = Field(
        default=None,
        min_length=1,
        description=f"{_TEXT}; left out: as it is",
        json_schema_extra={"pattern": snippets.TEXT_PATTERN},
    )


class SnippetIn(Closed):
    snippet_id: Id


def _the_snippet(ctx: Context, data: SnippetIn | UpdateSnippetIn) -> Snippet:
    return snippet_of(ctx, data.snippet_id)


def _update_targets(ctx: Context, data: UpdateSnippetIn) -> Snippet:
    found = _the_snippet(ctx, data)
    if data.text is not None:
        _check_text(ctx, data.text)
    return found


def _update_preview(ctx: Context, data: UpdateSnippetIn) -> Preview:
    snippet: Snippet = ctx.targets
    after = {"name": data.name or snippet.name, "chars": len(data.text if data.text is not None else snippet.text)}
    return Preview((Change(str(snippet.pk), snippets.snippet_state(snippet), after),))


@operation(
    name="update_snippet",
    summary="Change a snippet's name or text (what you leave out stays as it is).",
    input=UpdateSnippetIn,
    output=SnippetOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_update_preview,
    confirm=NEVER,
    targets=_update_targets,
    bounds=(TEXT_BOUND,),
)
def update_snippet(ctx: Context, data: UpdateSnippetIn) -> SnippetOut:
    return _out(snippets.update_snippet(act=ctx, snippet=ctx.targets, name=data.name, text=data.text))


# ---------------------------------------------------------------- delete_snippet


class SnippetDeletedOut(Closed):
    snippet_id: str
    deleted: bool


def _delete_preview(ctx: Context, data: SnippetIn) -> Preview:
    snippet: Snippet = ctx.targets
    return Preview(
        (Change(str(snippet.pk), snippets.snippet_state(snippet), None),),
        summary=f"Delete the snippet {words.named(snippet.name)}. Drafts already written from it keep their text.",
        title="Delete this snippet?",
        verb="Delete snippet",
    )


@operation(
    name="delete_snippet",
    summary="Delete a snippet (drafts written from it keep their text). Always confirmed.",
    input=SnippetIn,
    output=SnippetDeletedOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_delete_preview,
    confirm=ALWAYS,
    targets=_the_snippet,
)
def delete_snippet(ctx: Context, data: SnippetIn) -> SnippetDeletedOut:
    snippet: Snippet = ctx.targets
    snippets.delete_snippet(act=ctx, snippet=snippet)
    return SnippetDeletedOut(snippet_id=str(snippet.pk), deleted=True)


# ---------------------------------------------------------------- fill_snippet


class FillSnippetIn(Closed):
    snippet_id: Id
    account_id: Id = Field(description="the account written from ({my_name}, {my_address})")
    message_id: Id | None = Field(default=None, description="the message replied to or forwarded, if any")
    subject: str = Field(default="", max_length=2000, description="{subject} when no message is named")


class FilledOut(Closed):
    text: MailBody


class Filling(NamedTuple):
    snippet: Snippet
    account: MailAccount
    message: Message | None


def _filling(ctx: Context, data: FillSnippetIn) -> Filling:
    found = snippet_of(ctx, data.snippet_id)
    account = account_of(ctx, data.account_id)
    message = access_message_by_id(data.message_id, reach=reach(ctx)) if data.message_id else None
    return Filling(found, account, message)


@operation(
    name="fill_snippet",
    summary="A snippet's text with its placeholders filled for a message (or a new one), without writing a draft.",
    input=FillSnippetIn,
    output=FilledOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.ON,
    targets=_filling,
)
def fill_snippet(ctx: Context, data: FillSnippetIn) -> FilledOut:
    found, account, message = ctx.targets
    return FilledOut(text=filled(ctx, found, account=account, message=message, subject=data.subject))
