"""Reading mail: accounts, folders, labels, messages, threads, search, counts. None of it marks anything read."""

from __future__ import annotations

import base64
from collections import defaultdict
from datetime import datetime
from typing import Any, Literal

from django.contrib.postgres.search import SearchQuery, SearchRank, SearchVector
from django.db.models import Count, F, Q
from pydantic import Field

from apps.core.errors import OakenError
from apps.core.ids import parse_id
from apps.mail.mediatypes import media_type
from apps.mail.models import Attachment, Folder, Label, MailAccount, Message, MessageLabel, RawMessage
from apps.mail.selectors import Reach, access_account, access_folder, access_message, access_messages, access_thread
from apps.operations.context import Context
from apps.operations.defs.shapes import (
    AddressOut,
    Closed,
    Empty,
    Id,
    MailText,
    MessageSummary,
    Page,
    cut,
    decode_cursor,
    encode_cursor,
    summarize,
)
from apps.operations.registry import Bound, Ceiling, OpClass, operation


def reach(ctx: Context) -> Reach:
    return Reach(ctx.tenant, ctx.workspaces)


def message_of(ctx: Context, message_id: str) -> Message:
    """The message, checked once per call (data scope, preview and handler share it)."""
    return ctx.remember(("message", message_id), lambda: access_message(reach(ctx), message_id))


def account_of(ctx: Context, account_id: str) -> MailAccount:
    return ctx.remember(("account", account_id), lambda: access_account(reach(ctx), account_id))


def messages_of(ctx: Context, message_ids: list[str]) -> list[Message]:
    return ctx.remember(("messages", tuple(message_ids)), lambda: access_messages(reach(ctx), message_ids))


def label_ids_of(ctx: Context, messages: list[Message]) -> dict[object, list[str]]:
    labels: dict[object, list[str]] = defaultdict(list)
    rows = MessageLabel.objects.for_tenant(ctx.tenant).filter(message__in=[m.pk for m in messages])
    for message_id, label_id in rows.order_by("label__name").values_list("message_id", "label_id"):
        labels[message_id].append(str(label_id))
    return labels


def summaries(ctx: Context, messages: list[Message]) -> list[MessageSummary]:
    labels = label_ids_of(ctx, messages)
    return [summarize(m, labels[m.pk]) for m in messages]


def _page_size(ctx: Context, limit: int | None) -> int:
    return limit or ctx.bounds["PAGE_SIZE_DEFAULT"]


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
    accounts = reach(ctx).accounts().select_related("workspace").order_by("workspace__name", "name")
    return AccountsOut(
        accounts=[
            AccountOut(
                id=str(a.pk),
                name=a.name,
                kind=a.kind,
                email_address=a.email_address,
                workspace=a.workspace.name,
                last_synced_at=a.synced_at,
                sync_error=a.sync_error,
            )
            for a in accounts
        ]
    )


# ---------------------------------------------------------------- list_folders


class AccountIn(Closed):
    account_id: Id


class FolderOut(Closed):
    id: str
    kind: str
    name: MailText  # an IMAP server's folder names are the mailbox's, not the person's
    total: int
    unread: int


class FoldersOut(Closed):
    account_id: str
    folders: list[FolderOut]


def _account_scope(ctx: Context, data: AccountIn) -> None:
    account_of(ctx, data.account_id)


@operation(
    name="list_folders",
    summary="List an account's folders with their total and unread counts.",
    input=AccountIn,
    output=FoldersOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.ON,
    data_scope=_account_scope,
)
def list_folders(ctx: Context, data: AccountIn) -> FoldersOut:
    account = account_of(ctx, data.account_id)
    folders = folder_counts(ctx, account)
    return FoldersOut(
        account_id=str(account.pk),
        folders=[FolderOut(id=str(f["id"]), kind=f["kind"], name=f["name"], total=f["total"], unread=f["unread"])
                 for f in folders],
    )  # fmt: skip


def folder_counts(ctx: Context, account: Any) -> list[dict[str, Any]]:
    """Each folder of the account with its total and unread counts."""
    return list(
        Folder.objects.for_tenant(ctx.tenant)
        .filter(account=account)
        .annotate(total=Count("messages"), unread=Count("messages", filter=Q(messages__read=False)))
        .order_by("kind", "name")
        .values("id", "kind", "name", "total", "unread")
    )


# ---------------------------------------------------------------- list_labels


class OptionalAccountIn(Closed):
    account_id: Id | None = None


class LabelOut(Closed):
    id: str
    account_id: str
    name: MailText
    color: str


class LabelsOut(Closed):
    labels: list[LabelOut]


def _optional_account_scope(ctx: Context, data: OptionalAccountIn | SearchIn) -> None:
    if data.account_id is not None:
        account_of(ctx, data.account_id)
    else:
        reach(ctx).require_account(None)


def label_out(label: Label) -> LabelOut:
    return LabelOut(id=str(label.pk), account_id=str(label.account_id), name=label.name, color=label.color)


@operation(
    name="list_labels",
    summary="List labels, of one account or of every account the caller may reach.",
    input=OptionalAccountIn,
    output=LabelsOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.ON,
    data_scope=_optional_account_scope,
)
def list_labels(ctx: Context, data: OptionalAccountIn) -> LabelsOut:
    labels = Label.objects.for_tenant(ctx.tenant).filter(account__in=reach(ctx).accounts())
    if data.account_id is not None:
        labels = labels.filter(account_id=parse_id(data.account_id, "account_id"))
    return LabelsOut(labels=[label_out(label) for label in labels.order_by("account_id", "name")])


# ---------------------------------------------------------------- list_messages


class ListMessagesIn(Page):
    account_id: Id | None = None
    folder: str | None = Field(
        default=None, max_length=500, description="inbox, archive, spam, trash, sent, drafts or a folder name"
    )
    label_id: Id | None = None
    unread_only: bool = False


class MessagesOut(Closed):
    messages: list[MessageSummary]
    next_cursor: str | None


def _list_scope(ctx: Context, data: ListMessagesIn) -> None:
    if data.label_id is not None:
        label = Label.objects.for_tenant(ctx.tenant).filter(pk=parse_id(data.label_id, "label_id")).first()
        if label is None:
            raise OakenError.not_found("label_id")
        access_account(reach(ctx), str(label.account_id), "label_id")
    if data.account_id is not None:
        account_of(ctx, data.account_id)
    elif data.label_id is None:
        reach(ctx).require_account(None)
    if data.folder is not None and data.account_id is None:
        raise OakenError.invalid("folder", "needs account_id: folders belong to an account")


def _keyset(messages: list[Message], size: int) -> str | None:
    if len(messages) <= size:
        return None
    last = messages[size - 1]
    return encode_cursor([last.date.isoformat() if last.date else None, str(last.pk)])


def _after(cursor: str | None) -> Q:
    if cursor is None:
        return Q()
    date_raw, pk_raw = decode_cursor(cursor, 2)
    try:
        date = datetime.fromisoformat(date_raw) if date_raw else None
        pk = parse_id(pk_raw, "cursor")
    except (TypeError, ValueError, OakenError):
        raise OakenError.invalid("cursor", "is not a cursor this service gave out") from None
    if date is None:
        return Q(date__isnull=True, pk__lt=pk)
    return Q(date__lt=date) | Q(date=date, pk__lt=pk) | Q(date__isnull=True)


@operation(
    name="list_messages",
    summary="List messages newest first, by account, folder, label or unread state, a page at a time.",
    input=ListMessagesIn,
    output=MessagesOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.ON,
    data_scope=_list_scope,
    bounds=(_PAGE_BOUND,),
)
def list_messages(ctx: Context, data: ListMessagesIn) -> MessagesOut:
    size = _page_size(ctx, data.limit)
    messages = Message.objects.for_tenant(ctx.tenant).filter(account__in=reach(ctx).accounts())
    if data.account_id is not None:
        account = account_of(ctx, data.account_id)
        messages = messages.filter(account=account)
        if data.folder is not None:
            messages = messages.filter(folder=access_folder(account, data.folder))
    if data.label_id is not None:
        messages = messages.filter(labels=parse_id(data.label_id, "label_id"))
    if data.unread_only:
        messages = messages.filter(read=False)
    page = list(
        messages.filter(_after(data.cursor))
        .select_related("folder")
        .defer("text_body", "html_body", "headers")
        .order_by(F("date").desc(nulls_last=True), "-id")[: size + 1]  # undated last, as _after expects
    )
    return MessagesOut(messages=summaries(ctx, page[:size]), next_cursor=_keyset(page, size))


# ---------------------------------------------------------------- get_message


class MessageIn(Closed):
    message_id: Id


class AttachmentOut(Closed):
    id: str
    filename: MailText
    content_type: MailText
    size: int
    inline: bool


class MessageDetail(MessageSummary):
    to: list[AddressOut]
    cc: list[AddressOut]
    message_id_header: MailText
    text: MailText
    truncated: bool
    text_length: int
    attachments: list[AttachmentOut]


class MessageOut(Closed):
    message: MessageDetail


def _message_scope(ctx: Context, data: MessageIn) -> None:
    message_of(ctx, data.message_id)


def _addresses(items: list[dict[str, str]]) -> list[AddressOut]:
    return [AddressOut(name=a.get("name", ""), address=a.get("address", "")) for a in items]


@operation(
    name="get_message",
    summary="Get one message: headers, text (cut at the text bound, with truncated) and attachment list.",
    input=MessageIn,
    output=MessageOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.ON,
    data_scope=_message_scope,
)
def get_message(ctx: Context, data: MessageIn) -> MessageOut:
    message = message_of(ctx, data.message_id)
    text, truncated, length = cut(message.text_body, ctx.bounds["TEXT_MAX_CHARS"])
    attachments = (
        Attachment.objects.for_tenant(ctx.tenant)
        .filter(message=message)
        .order_by("filename")
        .values_list("id", "filename", "content_type", "size", "inline")
    )
    base = summaries(ctx, [message])[0].model_dump()
    return MessageOut(
        message=MessageDetail(
            **base,
            to=_addresses(message.to_addresses),
            cc=_addresses(message.cc_addresses),
            message_id_header=message.message_id,
            text=text,
            truncated=truncated,
            text_length=length,
            attachments=[
                AttachmentOut(id=str(i), filename=f, content_type=media_type(t), size=s, inline=n)
                for i, f, t, s, n in attachments
            ],
        )
    )


# ---------------------------------------------------------------- get_thread


class ThreadIn(Closed):
    thread_id: Id


class ThreadOut(Closed):
    id: str
    account_id: str
    subject: MailText
    message_count: int


class ThreadMessagesOut(Closed):
    thread: ThreadOut
    messages: list[MessageSummary]
    truncated: bool


def _thread_scope(ctx: Context, data: ThreadIn) -> None:
    access_thread(reach(ctx), data.thread_id)


@operation(
    name="get_thread",
    summary="Get a thread and its messages, oldest first (at most the thread bound).",
    input=ThreadIn,
    output=ThreadMessagesOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.ON,
    data_scope=_thread_scope,
)
def get_thread(ctx: Context, data: ThreadIn) -> ThreadMessagesOut:
    thread = access_thread(reach(ctx), data.thread_id)
    limit = ctx.bounds["THREAD_MAX_MESSAGES"]
    messages = list(
        Message.objects.for_tenant(ctx.tenant)
        .filter(thread=thread)
        .select_related("folder")
        .defer("text_body", "html_body", "headers")
        .order_by("date", "id")[: limit + 1]
    )
    return ThreadMessagesOut(
        thread=ThreadOut(id=str(thread.pk), account_id=str(thread.account_id), subject=thread.subject,
                         message_count=thread.message_count),
        messages=summaries(ctx, messages[:limit]),
        truncated=len(messages) > limit,
    )  # fmt: skip


# ---------------------------------------------------------------- search


class SearchIn(Page):
    query: str = Field(min_length=1, description="words to find; quotes for phrases, - to exclude")
    account_id: Id | None = None


def _search_offset(cursor: str | None) -> int:
    if not cursor:
        return 0
    offset = decode_cursor(cursor, 1)[0]
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise OakenError.invalid("cursor", "is not a cursor this service gave out")
    return offset


@operation(
    name="search",
    summary="Full-text search over subjects and message text, best matches first.",
    input=SearchIn,
    output=MessagesOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.ON,
    data_scope=_optional_account_scope,
    bounds=(_PAGE_BOUND, Bound("query", "QUERY_MAX_CHARS")),
)
def search(ctx: Context, data: SearchIn) -> MessagesOut:
    size = _page_size(ctx, data.limit)
    offset = _search_offset(data.cursor)
    vector = SearchVector("subject", weight="A", config="simple") + SearchVector(
        "text_body", weight="B", config="simple"
    )
    query = SearchQuery(data.query, search_type="websearch", config="simple")
    messages = Message.objects.for_tenant(ctx.tenant).filter(account__in=reach(ctx).accounts())
    if data.account_id is not None:
        messages = messages.filter(account_id=parse_id(data.account_id, "account_id"))
    found: list[Any] = list(
        # the match itself (@@): ts_rank is not zero for every miss (it is 1e-20 for some AND queries)
        messages.annotate(document=vector, rank=SearchRank(vector, query))
        .filter(document=query)
        .select_related("folder")
        .defer("html_body", "headers")
        .order_by("-rank", "-date", "-id")[offset : offset + size + 1]
    )
    next_cursor = encode_cursor([offset + size]) if len(found) > size else None
    return MessagesOut(messages=summaries(ctx, found[:size]), next_cursor=next_cursor)


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
    data_scope=_optional_account_scope,
)
def mailbox_counts(ctx: Context, data: OptionalAccountIn) -> CountsOut:
    accounts = reach(ctx).accounts().order_by("name")
    if data.account_id is not None:
        accounts = accounts.filter(pk=parse_id(data.account_id, "account_id"))
    result = []
    for account in accounts:
        folders = folder_counts(ctx, account)
        result.append(
            AccountCounts(
                account_id=str(account.pk),
                name=account.name,
                folders=[
                    FolderCount(folder=f["kind"] if f["kind"] != "custom" else f["name"], total=f["total"],
                                unread=f["unread"])
                    for f in folders
                ],
            )
        )  # fmt: skip
    return CountsOut(accounts=result)


# ---------------------------------------------------------------- get_raw_message


class RawOut(Closed):
    message_id: str
    size: int
    encoding: Literal["base64"]
    data: str


@operation(
    name="get_raw_message",
    summary="The message's bytes exactly as received (base64). Never offered to agents.",
    input=MessageIn,
    output=RawOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
    data_scope=_message_scope,
)
def get_raw_message(ctx: Context, data: MessageIn) -> RawOut:
    message = message_of(ctx, data.message_id)
    raw = RawMessage.objects.for_tenant(ctx.tenant).filter(message=message).values_list("data", flat=True).first()
    content = bytes(raw or b"")
    if len(content) > ctx.bounds["RAW_MESSAGE_MAX_BYTES"]:
        raise OakenError("LIMIT_EXCEEDED", "the raw message is larger than the raw-message bound")
    return RawOut(
        message_id=str(message.pk),
        size=len(content),
        encoding="base64",
        data=base64.b64encode(content).decode(),
    )
