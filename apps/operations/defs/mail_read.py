"""Reading mail: accounts, folders, labels, messages, threads, counts (search is in defs/search.py).
None of it marks anything read."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.utils import timezone
from pydantic import ConfigDict, Field

from apps.core.errors import OakenError
from apps.core.ids import parse_id
from apps.core.pages import cut_page, read_cursor
from apps.mail.html import sanitize
from apps.mail.mediatypes import media_type
from apps.mail.models import Label, MailAccount, Message, OAuthState, Thread
from apps.mail.reads import (
    CONVERSATION_PARTICIPANTS_MAX,
    Listing,
    conversations,
    folder_counts,
    like_pattern,
    message_detail,
    summaries,
)
from apps.mail.reasons import sync_problem
from apps.mail.selectors import account_names, accounts_listed, labels_in_reach
from apps.operations.context import Context
from apps.operations.defs.search import Filters, folder_needs_account, the_view, view_alone, view_filters
from apps.operations.defs.shapes import (
    AddressOut,
    Closed,
    Empty,
    Id,
    MailBody,
    MailText,
    MessageSummary,
    Page,
    cut,
)
from apps.operations.registry import Bound, Ceiling, OpClass, Wait, operation
from apps.operations.targets import (
    FOLDER_NEEDS_ACCOUNT,
    AccountIn,
    MessageIn,
    OptionalAccountIn,
    ThreadIn,
    an_account,
    listing,
    reach,
    the_account,
    the_message,
    the_thread,
)
from apps.rules.selectors import applied_column
from apps.summaries.services import cached_text_column

_PAGE_BOUND = Bound("limit", "PAGE_SIZE_MAX")

# ---------------------------------------------------------------- list_accounts


class AccountOut(Closed):
    id: str
    name: str
    kind: str
    email_address: str
    workspace: str
    last_synced_at: datetime | None = Field(description="connected mailboxes: when the last sync succeeded")
    sync_error: str = Field(description="connected mailboxes: why syncing fails ('' when it does not)")
    sync_problem: str = Field(description="connected mailboxes: why syncing fails, in words ('' when it does not)")
    provider: str = Field(description="the OAuth provider a mailbox is connected with ('' for a password login)")
    needs_reconnect: bool = Field(
        description="the provider withdrew Oaken's access: sync and sending stop until a person reconnects it"
    )
    sender_name: str = Field(description="the From header's display name of mail sent from it ('' for none)")


class AccountsOut(Closed):
    accounts: list[AccountOut]


@operation(
    name="list_accounts",
    summary="List the mail accounts this caller may reach.",
    input=Empty,
    output=AccountsOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.ON,
)
def list_accounts(ctx: Context, data: Empty) -> AccountsOut:
    return AccountsOut.model_validate(
        {
            "accounts": [
                {
                    "id": str(pk),
                    "name": name,
                    "kind": kind,
                    "email_address": address,
                    "workspace": workspace,
                    "last_synced_at": synced,
                    "sync_error": error,
                    "sync_problem": sync_problem(error),
                    "provider": provider,
                    "needs_reconnect": state == OAuthState.NEEDS_RECONNECT,
                    "sender_name": sender_name,
                }
                for pk, name, kind, address, workspace, synced, error, provider, state, sender_name in accounts_listed(
                    reach=reach(ctx)
                )
            ]
        }
    )


# ---------------------------------------------------------------- list_folders


class FolderOut(Closed):
    id: str
    kind: str
    name: MailText  # an IMAP server's folder names are the mailbox's, not the person's
    total: int
    unread: int


class FoldersOut(Closed):
    account_id: str
    folders: list[FolderOut]


@operation(
    name="list_folders",
    summary="List an account's folders with their total and unread counts.",
    input=AccountIn,
    output=FoldersOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.ON,
    targets=the_account,
)
def list_folders(ctx: Context, data: AccountIn) -> FoldersOut:
    account: MailAccount = ctx.targets
    folders = folder_counts(ctx.tenant.pk, [account.pk])
    return FoldersOut(
        account_id=str(account.pk),
        folders=[
            FolderOut(id=str(f["id"]), kind=f["kind"], name=f["name"], total=f["total"], unread=f["unread"])
            for f in folders
        ],
    )


# ---------------------------------------------------------------- list_labels


class LabelOut(Closed):
    id: str
    account_id: str
    name: MailText
    color: str
    description: MailText = Field(description="an AI label's description: new mail that matches it is labelled")
    ai_state: str = Field(description="off (no description), on (labels new mail) or stopped (ai_stopped says why)")
    ai_stopped: str = Field(description="why the AI label stopped labelling; empty while it labels")


class LabelsOut(Closed):
    labels: list[LabelOut]


def label_out(label: Label) -> LabelOut:
    return LabelOut(
        id=str(label.pk),
        account_id=str(label.account_id),
        name=label.name,
        color=label.color,
        description=label.description,
        ai_state=label.ai_state,
        ai_stopped=label.ai_stopped,
    )


@operation(
    name="list_labels",
    summary="List labels, of one account or of every account the caller may reach.",
    input=OptionalAccountIn,
    output=LabelsOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.ON,
    targets=an_account,
)
def list_labels(ctx: Context, data: OptionalAccountIn) -> LabelsOut:
    account: MailAccount | None = ctx.targets
    return LabelsOut(labels=[label_out(label) for label in labels_in_reach(reach=reach(ctx), account=account)])


# ---------------------------------------------------------------- list_messages


class ListMessagesIn(Page):
    model_config = FOLDER_NEEDS_ACCOUNT
    account_id: Id | None = None
    folder: str | None = Field(
        default=None, max_length=500, description="inbox, archive, spam, trash, sent, drafts or a folder name"
    )
    label_id: Id | None = None
    unread_only: bool = False
    snoozed_only: bool = Field(
        default=False, description="only snoozed messages (wherever they wait; with no folder, the snoozed listing)"
    )


class ListMessagesViewIn(ListMessagesIn):
    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [
                folder_needs_account(),
                {"anyOf": view_alone("account_id", "folder", "label_id", "unread_only", "snoozed_only")},
            ]
        }
    )
    view_id: Id | None = Field(
        default=None,
        description="list the messages of a saved view without words (list_views), newest first; the call then "
        "gives none of its own filters, only limit and cursor (a view with words is searched: search's view_id)",
    )


_CACHED_SUMMARY = Field(
    default=None, description="its summary by the current summarizer when one is cached (summarize_messages makes it)"
)


class ListedMessage(MessageSummary):
    summary: MailBody | None = _CACHED_SUMMARY


class MessagesOut(Closed):
    messages: list[ListedMessage]
    next_cursor: str | None


def _after(date_raw: str | None, pk_raw: str) -> tuple[str, Any]:
    """A listing's position read back (what _position gave): the condition of the rows after it."""
    date = datetime.fromisoformat(date_raw) if date_raw else None
    pk = parse_id(pk_raw, "cursor")
    return ("older", (date, pk)) if date is not None else ("older_undated", pk)


def _position(row: dict[str, Any]) -> list[str | None]:
    """Newest first (by when a snooze brought it back, else its date), undated last: (that time, id), as _after
    reads it back."""
    at = row["returned_at"] or row["date"]
    return [at.isoformat() if at else None, row["id"]]


def _listing_filters(
    named: Listing, *, unread_only: bool, pinned_only: bool = False, snoozed_only: bool = False
) -> dict[str, Any]:
    """What a listing (of messages or of conversations) is limited to: the account, folder and label it named,
    and the flags asked for."""
    where: dict[str, Any] = {}
    if named.account is not None:
        where["account"] = named.account
    if named.folder is not None:
        where["folder"] = named.folder
    if named.label is not None:
        where["label"] = named.label
    if unread_only:
        where["unread"] = True
    if pinned_only:
        where["pinned"] = True
    if snoozed_only:
        where["snoozed"] = True
    return where


# the filters of list_messages a call with view_id leaves to the view
_LISTING_FIELDS = ("account_id", "folder", "label_id", "unread_only")


class Listed(NamedTuple):
    named: Listing
    # a saved view's filters beyond what it names (conditions of apps.mail.reads.summaries)
    where: dict[str, Any]


def _view_where(asked: Filters) -> dict[str, Any]:
    where: dict[str, Any] = {}
    if asked.from_:
        where["sender"] = like_pattern(asked.from_)
    if asked.to:
        where["recipient"] = like_pattern(asked.to)
    if asked.unread is not None:
        where["unread" if asked.unread else "read"] = ()
    if asked.has_attachment is not None:
        where["has_attachment"] = asked.has_attachment
    if asked.after is not None:
        where["since"] = asked.after_at()
    if asked.before is not None:
        where["until"] = asked.before_at()
    return where


def _list_targets(ctx: Context, data: ListMessagesViewIn) -> Listed:
    if data.view_id is None:
        return Listed(listing(ctx, data), {})
    asked = view_filters(the_view(ctx, data.view_id, data, _LISTING_FIELDS))
    if asked.query is not None:
        raise OakenError.invalid("view_id", "this view searches for words: use search with view_id")
    return Listed(listing(ctx, asked), _view_where(asked))


def _page(ctx: Context, data: ListMessagesViewIn) -> tuple[list[dict[str, Any]], str | None]:
    """The page and the cursor after it, read after every check and before the call's transaction opens (gather),
    which then holds the call's event alone (apps.gate.dispatch)."""
    size = data.size(ctx.bounds)
    named, more = ctx.targets
    where = _listing_filters(named, unread_only=data.unread_only, snoozed_only=data.snoozed_only) | more
    after = read_cursor(data.cursor, 2, _after)
    if after is not None:
        where[after[0]] = after[1]
    rows = summaries(
        reach(ctx),
        where,
        limit=size + 1,
        extra={"summary": cached_text_column("m.tenant_id", "m.content_hash")},
    )
    return cut_page(rows, size, _position)


@operation(
    name="list_messages",
    summary="List messages newest first (a message a snooze brought back: from its return), by account, folder, "
    "label, unread or snoozed state, or by a saved view, a page at a time.",
    input=ListMessagesViewIn,
    output=MessagesOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.ON,
    targets=_list_targets,
    gather=_page,
    bounds=(_PAGE_BOUND,),
    returns_mail=True,
)
def list_messages(ctx: Context, data: ListMessagesViewIn) -> MessagesOut:
    page, next_cursor = ctx.gathered
    return MessagesOut.model_validate({"messages": page, "next_cursor": next_cursor})


# ---------------------------------------------------------------- list_conversations


class ListConversationsIn(ListMessagesIn):
    pinned_only: bool = Field(default=False, description="only conversations with a pinned message in the listing")


class ConversationOut(Closed):
    thread_id: str
    account_id: str
    subject: MailText
    participants: list[AddressOut] = Field(
        description=f"its first senders, by when they first wrote (at most {CONVERSATION_PARTICIPANTS_MAX})"
    )
    message_count: int = Field(description="messages in the conversation")
    unread_count: int = Field(description="unread messages in the conversation")
    date: datetime | None = Field(description="the date of its newest message in this listing")
    listed_at: datetime | None = Field(
        description="where the listing puts it: its newest date, or later when a snooze brought a message of it back"
    )
    snippet: MailText = Field(description="the start of its newest message in this listing")
    latest_message_id: str | None = Field(description="its newest message in this listing")
    message_ids: list[str] = Field(
        description="its messages in this listing, newest first (at most the thread bound): what a change to the "
        "conversation here changes"
    )
    has_attachments: bool
    pinned: bool = Field(description="one of its messages is pinned")
    label_ids: list[str] = Field(description="the labels of any of its messages")


class ConversationsOut(Closed):
    conversations: list[ConversationOut]
    next_cursor: str | None


def _conversation_position(row: dict[str, Any]) -> list[str | None]:
    """Newest first, undated last: (where it is listed, thread id), as _after reads it back."""
    return [row["listed_at"].isoformat() if row["listed_at"] else None, row["thread_id"]]


def _conversation_page(ctx: Context, data: ListConversationsIn) -> tuple[list[dict[str, Any]], str | None]:
    """The page of conversations and the cursor after it, read before the call's transaction opens, as _page."""
    size = data.size(ctx.bounds)
    where = _listing_filters(
        ctx.targets, unread_only=data.unread_only, pinned_only=data.pinned_only, snoozed_only=data.snoozed_only
    )
    rows = conversations(
        reach(ctx),
        where,
        after=read_cursor(data.cursor, 2, _after),
        limit=size + 1,
        ids_max=ctx.bounds.THREAD_MAX_MESSAGES,
    )
    return cut_page(rows, size, _conversation_position)


@operation(
    name="list_conversations",
    summary="List conversations (one row per thread: participants, counts, the newest message's start) newest "
    "first, by account, folder, label, unread or pinned state, a page at a time.",
    input=ListConversationsIn,
    output=ConversationsOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.ON,
    targets=listing,
    gather=_conversation_page,
    bounds=(_PAGE_BOUND,),
    returns_mail=True,
)
def list_conversations(ctx: Context, data: ListConversationsIn) -> ConversationsOut:
    page, next_cursor = ctx.gathered
    return ConversationsOut.model_validate({"conversations": page, "next_cursor": next_cursor})


# ---------------------------------------------------------------- get_message


class AttachmentOut(Closed):
    id: str
    filename: MailText
    content_type: MailText
    size: int
    inline: bool


class AppliedRule(Closed):
    rule_id: str | None
    rule: str
    version: int
    matched: list[str]
    actions: list[dict[str, str]]
    applied_at: datetime


class MessageDetail(MessageSummary):
    to: list[AddressOut]
    cc: list[AddressOut]
    message_id_header: MailText
    text: MailBody
    truncated: bool
    text_length: int
    has_html: bool = Field(description="the message has an HTML part (get_message_html gives it, made safe)")
    attachments: list[AttachmentOut] = Field(description="the first MESSAGE_ATTACHMENTS_MAX, by file name")
    attachments_truncated: bool = Field(description="the message has more attachments than are listed")
    attachment_count: int = Field(description="how many attachments the message has")
    summary: MailBody | None = _CACHED_SUMMARY
    applied_rules: list[AppliedRule] = Field(
        description="why rules acted on it, oldest first: each rule (null id once deleted), the conditions that "
        "held and each action with its outcome (ok, skipped, or a refusal code)"
    )
    list_unsubscribe: bool = Field(
        description="it carries a List-Unsubscribe header: `unsubscribe` says which kind (one-click, e-mail, a link)"
    )


class MessageOut(Closed):
    message: MessageDetail


def _addresses(items: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{"name": a.get("name", ""), "address": a.get("address", "")} for a in items]


def the_message_detail(ctx: Context, data: MessageIn) -> dict[str, Any]:
    """What get_message shows of the message, its cached summary included, read in one statement within the
    caller's reach."""
    return message_detail(
        data.message_id,
        reach=reach(ctx),
        text_max=ctx.bounds.TEXT_MAX_CHARS,
        attachments_max=ctx.bounds.MESSAGE_ATTACHMENTS_MAX,
        extra=_extra(),
    )


def _extra() -> tuple[str, dict[str, Any]]:
    """The cached summary, the rules' record and whether it offers to unsubscribe, read with the message (one
    statement)."""
    summary, params = cached_text_column("m.tenant_id", "m.content_hash")
    applied = applied_column("m.tenant_id", "m.id")
    return f"json_build_array({summary}, {applied}, m.headers ? 'list-unsubscribe')", params


@operation(
    name="get_message",
    summary="Get one message: headers, text (cut at the text bound, with truncated) and attachment list (cut at its "
    "bound, with attachments_truncated and the count).",
    input=MessageIn,
    output=MessageOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.ON,
    targets=the_message_detail,
    returns_mail=True,
)
def get_message(ctx: Context, data: MessageIn) -> MessageOut:
    row: dict[str, Any] = dict(ctx.targets)
    del row["content_hash"]
    # the cached summary and the rules' record, read with the message (the_message_detail)
    row["summary"], row["applied_rules"], row["list_unsubscribe"] = row.pop("extra")
    row["to"], row["cc"] = _addresses(row["to"]), _addresses(row["cc"])
    row["attachments"] = [
        {"id": str(i), "filename": f, "content_type": media_type(t), "size": s, "inline": n}
        for i, f, t, s, n in row["attachments"]
    ]
    row["attachments_truncated"] = row["attachment_count"] > len(row["attachments"])
    return MessageOut.model_validate({"message": row})


# ---------------------------------------------------------------- get_message_html


class MessageHtmlIn(Closed):
    message_id: Id
    remote_images: bool = Field(default=False, description="keep remote images (fetching them tells the sender)")


class MessageHtmlOut(Closed):
    message_id: str
    html: MailBody = Field(description="the HTML part sanitized (nh3): no script, style sheet, form or frame")
    remote_images: int = Field(description="remote images in the part: held back unless remote_images was asked")
    truncated: bool
    html_length: int


@operation(
    name="get_message_html",
    summary="A message's HTML part, sanitized to show in a sandboxed frame; remote images only when asked for.",
    input=MessageHtmlIn,
    output=MessageHtmlOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
    targets=the_message,
)
def get_message_html(ctx: Context, data: MessageHtmlIn) -> MessageHtmlOut:
    """For a person's eyes (the console): an agent reads the text part with get_message."""
    message: Message = ctx.targets
    source, truncated, length = cut(message.html_body, ctx.bounds.HTML_MAX_CHARS)
    safe = sanitize(source, remote_images=data.remote_images)
    return MessageHtmlOut(
        message_id=str(message.pk),
        html=safe.html,
        remote_images=safe.remote_images,
        truncated=truncated,
        html_length=length,
    )


# ---------------------------------------------------------------- get_thread


class ThreadOut(Closed):
    id: str
    account_id: str
    subject: MailText
    message_count: int


class ThreadMessagesOut(Closed):
    thread: ThreadOut
    messages: list[MessageSummary]
    truncated: bool


def _thread_messages(ctx: Context, data: ThreadIn) -> list[dict[str, Any]]:
    """The thread's messages, one more than the bound (to tell it was cut), read before the call's transaction
    opens (gather), as list_messages reads its page."""
    thread: Thread = ctx.targets
    return summaries(reach(ctx), {"thread": thread.pk}, order="oldest", limit=ctx.bounds.THREAD_MAX_MESSAGES + 1)


@operation(
    name="get_thread",
    summary="Get a thread and its messages, oldest first (at most the thread bound).",
    input=ThreadIn,
    output=ThreadMessagesOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.ON,
    targets=the_thread,
    gather=_thread_messages,
    returns_mail=True,
)
def get_thread(ctx: Context, data: ThreadIn) -> ThreadMessagesOut:
    thread: Thread = ctx.targets
    limit = ctx.bounds.THREAD_MAX_MESSAGES
    messages = ctx.gathered
    return ThreadMessagesOut.model_validate(
        {
            "thread": {
                "id": str(thread.pk),
                "account_id": str(thread.account_id),
                "subject": thread.subject,
                "message_count": thread.message_count,
            },
            "messages": messages[:limit],
            "truncated": len(messages) > limit,
        }
    )


# ---------------------------------------------------------------- mailbox_counts


class FolderCount(Closed):
    folder: str
    total: int
    unread: int


class AccountCounts(Closed):
    account_id: str
    name: str
    folders: list[FolderCount]


class CountsOut(Closed):
    accounts: list[AccountCounts]


@operation(
    name="mailbox_counts",
    summary="Total and unread messages per folder, for one account or every account in reach.",
    input=OptionalAccountIn,
    output=CountsOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.ON,
    targets=an_account,
)
def mailbox_counts(ctx: Context, data: OptionalAccountIn) -> CountsOut:
    named: MailAccount | None = ctx.targets
    listed = account_names(reach=reach(ctx), account=named)
    # every folder of those accounts with its counts, in one statement (not one per account)
    folders: dict[Any, list[dict[str, Any]]] = {pk: [] for pk, _ in listed}
    for f in folder_counts(ctx.tenant.pk, [pk for pk, _ in listed]):
        label = f["kind"] if f["kind"] != "custom" else f["name"]
        folders[f["account_id"]].append({"folder": label, "total": f["total"], "unread": f["unread"]})
    return CountsOut.model_validate(
        {"accounts": [{"account_id": str(pk), "name": name, "folders": folders[pk]} for pk, name in listed]}
    )


# ---------------------------------------------------------------- wait_for_message


class WaitForMessageIn(Closed):
    account_id: Id
    from_: str | None = Field(
        default=None, alias="from", min_length=1, max_length=320, description="part of the sender's address or name"
    )
    subject_contains: str | None = Field(default=None, min_length=1, max_length=500, description="part of the subject")
    arrived_after: datetime | None = Field(
        default=None,
        description="only mail that reached Oaken after this time (ISO 8601, with offset); left out: the call's start",
    )
    timeout_seconds: int | None = Field(
        default=None,
        ge=1,
        le=600,
        description="wait at most this long (left out: WAIT_DEFAULT_SECONDS; at most WAIT_MAX_SECONDS)",
    )


class WaitForMessageOut(Closed):
    matched: bool = Field(description="false: nothing matching came before the deadline")
    message: MessageSummary | None = Field(description="the first matching message to arrive (read it: get_message)")
    account_id: str
    arrived_after: datetime
    deadline: datetime


def _still_waiting(output: dict[str, Any]) -> Wait | None:
    """What an answer that found nothing waits for: new mail of its account, until its deadline."""
    deadline = datetime.fromisoformat(output["deadline"])
    if output["matched"] or deadline <= timezone.now():
        return None
    return Wait(keys=(output["account_id"],), deadline=deadline)


@operation(
    name="wait_for_message",
    summary="Wait (at most timeout_seconds) for a message to arrive in a mailbox, from a sender and with a subject "
    "part when given; returns the first one, or matched false at the deadline.",
    input=WaitForMessageIn,
    output=WaitForMessageOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.ON,
    targets=the_account,
    bounds=(Bound("timeout_seconds", "WAIT_MAX_SECONDS"),),
    waits=_still_waiting,
    returns_mail=True,
)
def wait_for_message(ctx: Context, data: WaitForMessageIn) -> WaitForMessageOut:
    """For a verification code or a reply the assistant expects: it waits for mail that arrives after the call
    began (or after arrived_after), answering as soon as one is stored. Mail reaches Oaken when the mailbox syncs
    (at once with IMAP IDLE). It holds no connection while it waits; each look is a read of the mailbox."""
    account: MailAccount = ctx.targets
    after = data.arrived_after or ctx.started
    deadline = ctx.started + timedelta(seconds=data.timeout_seconds or ctx.bounds.WAIT_DEFAULT_SECONDS)
    where: dict[str, Any] = {"account": account.pk, "incoming": (), "arrived_after": after}
    if data.from_ is not None:
        where["sender"] = like_pattern(data.from_)
    if data.subject_contains is not None:
        where["subject"] = like_pattern(data.subject_contains)
    found = summaries(reach(ctx), where, order="arrived", limit=1)
    return WaitForMessageOut(
        matched=bool(found),
        message=MessageSummary.model_validate(found[0]) if found else None,
        account_id=str(account.pk),
        arrived_after=after,
        deadline=deadline,
    )
