"""Organizing mail: read state, pins, labels, folders, trash, summaries. Each change is previewed first."""

from __future__ import annotations

import re
from typing import Literal

from django.db import IntegrityError, transaction
from pydantic import Field

from apps.core.changes import Change
from apps.core.errors import OakenError
from apps.mail import readstate
from apps.mail.mirror import mirror_flags, mirror_moves
from apps.mail.models import FLAG_FLAGGED, Folder, FolderKind, Label, Message, MessageLabel
from apps.mail.selectors import access_account, access_folder, access_labels
from apps.operations.context import Context
from apps.operations.defs.mail_read import LabelOut, label_out, messages_of, reach
from apps.operations.defs.shapes import Closed, Id, MailText, MessageIds, Name, folder_label
from apps.operations.registry import ALWAYS, NEVER, Bound, Ceiling, OpClass, Preview, above, operation, when

_BATCH = Bound("message_ids", "BATCH_MAX")


def _small(data: MessageIds) -> int:
    return len(set(data.message_ids))


SMALL_CHANGE = above("CONFIRM_FREE_MAX", _small)


def _messages_scope(ctx: Context, data: MessageIds) -> None:
    messages_of(ctx, data.message_ids)


class ChangedOut(Closed):
    changed: int
    message_ids: list[str]


# ---------------------------------------------------------------- read state


def _read_preview(value: bool):
    def preview(ctx: Context, data: MessageIds) -> Preview:
        messages = messages_of(ctx, data.message_ids)
        return Preview(
            tuple(Change(str(m.pk), {"read": m.read}, {"read": value}) for m in messages if m.read != value),
            summary=f"mark {'read' if value else 'unread'}",
        )

    return preview


def _set_read(ctx: Context, data: MessageIds, value: bool) -> ChangedOut:
    messages = messages_of(ctx, data.message_ids)
    changed = readstate.set_read(tenant=ctx.tenant, message_ids=[m.pk for m in messages], read=value)
    for pk, before in changed:
        ctx.touch(pk, {"read": before}, {"read": value})
    return ChangedOut(changed=len(changed), message_ids=[str(pk) for pk, _ in changed])


@operation(
    name="mark_read",
    summary="Mark messages read (the only way mail becomes read).",
    input=MessageIds,
    output=ChangedOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_read_preview(True),
    confirm=SMALL_CHANGE,
    data_scope=_messages_scope,
    bounds=(_BATCH,),
    changes_read_state=True,
)
def mark_read(ctx: Context, data: MessageIds) -> ChangedOut:
    return _set_read(ctx, data, True)


@operation(
    name="mark_unread",
    summary="Mark messages unread.",
    input=MessageIds,
    output=ChangedOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_read_preview(False),
    confirm=SMALL_CHANGE,
    data_scope=_messages_scope,
    bounds=(_BATCH,),
    changes_read_state=True,
)
def mark_unread(ctx: Context, data: MessageIds) -> ChangedOut:
    return _set_read(ctx, data, False)


# ---------------------------------------------------------------- pins


class PinIn(MessageIds):
    pinned: bool


def _pin_preview(ctx: Context, data: PinIn) -> Preview:
    messages = messages_of(ctx, data.message_ids)
    return Preview(
        tuple(
            Change(str(m.pk), {"pinned": m.pinned}, {"pinned": data.pinned})
            for m in messages
            if m.pinned != data.pinned
        )
    )


@operation(
    name="set_pinned",
    summary="Pin or unpin messages (on a connected mailbox, pinned is the server's \\Flagged).",
    input=PinIn,
    output=ChangedOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_pin_preview,
    confirm=SMALL_CHANGE,
    data_scope=_messages_scope,
    bounds=(_BATCH,),
)
def set_pinned(ctx: Context, data: PinIn) -> ChangedOut:
    changes = _pin_preview(ctx, data).changes
    ids = [c.id for c in changes]
    locked = Message.objects.for_tenant(ctx.tenant).filter(pk__in=ids).select_for_update().order_by("pk")
    Message.objects.for_tenant(ctx.tenant).filter(pk__in=list(locked.values_list("pk", flat=True))).update(
        pinned=data.pinned
    )
    mirror_flags(tenant=ctx.tenant, message_ids=ids, flags=FLAG_FLAGGED)
    for c in changes:
        ctx.touch(c.id, c.before, c.after)
    return ChangedOut(changed=len(ids), message_ids=ids)


# ---------------------------------------------------------------- labels on messages


class LabelMessagesIn(MessageIds):
    label_ids: list[Id] = Field(min_length=1)


def _label_scope(ctx: Context, data: LabelMessagesIn) -> None:
    messages = messages_of(ctx, data.message_ids)
    labels = access_labels(reach(ctx), data.label_ids)
    accounts = {m.account_id for m in messages}
    if any(label.account_id not in accounts or len(accounts) > 1 for label in labels):
        raise OakenError.invalid("label_ids", "labels belong to an account: use labels of the messages' own account")


def _labels_preview(add: bool):
    def preview(ctx: Context, data: LabelMessagesIn) -> Preview:
        messages = messages_of(ctx, data.message_ids)
        labels = access_labels(reach(ctx), data.label_ids)
        present = set(
            MessageLabel.objects.for_tenant(ctx.tenant)
            .filter(message__in=[m.pk for m in messages], label__in=[x.pk for x in labels])
            .values_list("message_id", "label_id")
        )
        changes = []
        for m in messages:
            for label in labels:
                has = (m.pk, label.pk) in present
                if has != add:
                    changes.append(
                        Change(
                            f"{m.pk}",
                            {"label_id": str(label.pk), "on": has},
                            {"label_id": str(label.pk), "on": add},
                        )
                    )
        return Preview(tuple(changes), summary="add labels" if add else "remove labels")

    return preview


class LabelChangeOut(Closed):
    changed: int


def _label_handler(add: bool):
    preview = _labels_preview(add)

    def handler(ctx: Context, data: LabelMessagesIn) -> LabelChangeOut:
        changes = preview(ctx, data).changes
        pairs = [(c.id, c.after["label_id"]) for c in changes]
        if add:
            MessageLabel.objects.bulk_create(
                [MessageLabel(tenant=ctx.tenant, message_id=m, label_id=lab) for m, lab in pairs],
                ignore_conflicts=True,
            )
        else:
            for m, lab in pairs:
                MessageLabel.objects.for_tenant(ctx.tenant).filter(message_id=m, label_id=lab).delete()
        for c in changes:
            ctx.touch(c.id, c.before, c.after)
        return LabelChangeOut(changed=len(pairs))

    return handler


_LABEL_BOUNDS = (_BATCH, Bound("label_ids", "LABELS_PER_CALL_MAX"))
_LABEL_CHANGE = above("CONFIRM_FREE_MAX", lambda d: len(set(d.message_ids)))

operation(
    name="add_labels",
    summary="Add labels to messages (labels of the messages' own account).",
    input=LabelMessagesIn,
    output=LabelChangeOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_labels_preview(True),
    confirm=_LABEL_CHANGE,
    data_scope=_label_scope,
    bounds=_LABEL_BOUNDS,
)(_label_handler(True))

operation(
    name="remove_labels",
    summary="Remove labels from messages.",
    input=LabelMessagesIn,
    output=LabelChangeOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_labels_preview(False),
    confirm=_LABEL_CHANGE,
    data_scope=_label_scope,
    bounds=_LABEL_BOUNDS,
)(_label_handler(False))


# ---------------------------------------------------------------- labels themselves


class CreateLabelIn(Closed):
    account_id: Id
    name: Name
    color: str = Field(default="", pattern=r"^(#[0-9a-fA-F]{6})?$")


class LabelResult(Closed):
    label: LabelOut


def _create_label_scope(ctx: Context, data: CreateLabelIn) -> None:
    access_account(reach(ctx), data.account_id)


def _create_label_preview(ctx: Context, data: CreateLabelIn) -> Preview:
    return Preview((Change(f"new label in {data.account_id}", None, {"name": data.name, "color": data.color}),))


@operation(
    name="create_label",
    summary="Create a label in an account.",
    input=CreateLabelIn,
    output=LabelResult,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_create_label_preview,
    confirm=NEVER,
    data_scope=_create_label_scope,
)
def create_label(ctx: Context, data: CreateLabelIn) -> LabelResult:
    account = access_account(reach(ctx), data.account_id)
    if Label.objects.for_tenant(ctx.tenant).filter(account=account, name=data.name).exists():
        raise OakenError("CONFLICT", "name: this account already has a label with this name", field="name")
    try:
        with transaction.atomic():
            label = Label.objects.create(tenant=ctx.tenant, account=account, name=data.name, color=data.color)
    except IntegrityError:  # a concurrent call took the name between the check and the insert
        raise OakenError("CONFLICT", "name: this account already has a label with this name", field="name") from None
    ctx.touch(label.pk, None, {"name": label.name, "color": label.color})
    return LabelResult(label=label_out(label))


class RenameLabelIn(Closed):
    label_id: Id
    name: Name


def _one_label_scope(ctx: Context, data: RenameLabelIn | LabelIn) -> None:
    access_labels(reach(ctx), [data.label_id], "label_id")


def _rename_preview(ctx: Context, data: RenameLabelIn) -> Preview:
    label = access_labels(reach(ctx), [data.label_id], "label_id")[0]
    return Preview((Change(str(label.pk), {"name": label.name}, {"name": data.name}),))


@operation(
    name="rename_label",
    summary="Rename a label.",
    input=RenameLabelIn,
    output=LabelResult,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_rename_preview,
    confirm=NEVER,
    data_scope=_one_label_scope,
)
def rename_label(ctx: Context, data: RenameLabelIn) -> LabelResult:
    label = access_labels(reach(ctx), [data.label_id], "label_id")[0]
    if (
        Label.objects.for_tenant(ctx.tenant)
        .filter(account_id=label.account_id, name=data.name)
        .exclude(pk=label.pk)
        .exists()
    ):
        raise OakenError("CONFLICT", "name: this account already has a label with this name", field="name")
    ctx.touch(label.pk, {"name": label.name}, {"name": data.name})
    label.name = data.name
    try:
        with transaction.atomic():
            label.save(update_fields=["name"])
    except IntegrityError:
        raise OakenError("CONFLICT", "name: this account already has a label with this name", field="name") from None
    return LabelResult(label=label_out(label))


class LabelIn(Closed):
    label_id: Id


class DeletedOut(Closed):
    deleted: str
    messages_unlabelled: int


def _delete_label_preview(ctx: Context, data: LabelIn) -> Preview:
    label = access_labels(reach(ctx), [data.label_id], "label_id")[0]
    count = MessageLabel.objects.for_tenant(ctx.tenant).filter(label=label).count()
    return Preview(
        (Change(str(label.pk), {"name": label.name, "messages": count}, None),),
        summary=f"delete the label and remove it from {count} messages (the messages stay)",
    )


@operation(
    name="delete_label",
    summary="Delete a label (messages keep existing; they only lose the label). Always confirmed.",
    input=LabelIn,
    output=DeletedOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_delete_label_preview,
    confirm=ALWAYS,
    data_scope=_one_label_scope,
)
def delete_label(ctx: Context, data: LabelIn) -> DeletedOut:
    label = access_labels(reach(ctx), [data.label_id], "label_id")[0]
    links = MessageLabel.objects.for_tenant(ctx.tenant).filter(label=label)
    count = links.count()
    links.delete()
    ctx.touch(label.pk, {"name": label.name, "messages": count}, None)
    Label.objects.for_tenant(ctx.tenant).filter(pk=label.pk).delete()
    return DeletedOut(deleted=str(label.pk), messages_unlabelled=count)


# ---------------------------------------------------------------- folders and trash


class MoveIn(MessageIds):
    folder: str = Field(min_length=1, max_length=500, description="inbox, archive, spam, sent, drafts or a folder name")


def _targets(ctx: Context, messages: list[Message], folder: str) -> dict[object, Folder]:
    """The destination folder in each message's own account."""
    accounts = {m.account_id: m.account for m in messages}
    return {account_id: access_folder(account, folder) for account_id, account in accounts.items()}


def _move_changes(ctx: Context, messages: list[Message], targets: dict[object, Folder]) -> tuple[Change, ...]:
    return tuple(
        Change(str(m.pk), {"folder": folder_label(m.folder)}, {"folder": folder_label(targets[m.account_id])})
        for m in messages
        if m.folder_id != targets[m.account_id].pk
    )


def _move_scope(ctx: Context, data: MoveIn) -> None:
    messages = messages_of(ctx, data.message_ids)
    targets = _targets(ctx, messages, data.folder)
    if any(t.kind == FolderKind.TRASH for t in targets.values()):
        raise OakenError.invalid("folder", "use trash_messages to move mail to the trash")


def _move_preview(ctx: Context, data: MoveIn) -> Preview:
    messages = messages_of(ctx, data.message_ids)
    return Preview(_move_changes(ctx, messages, _targets(ctx, messages, data.folder)), summary=f"move to {data.folder}")


def _apply_moves(ctx: Context, messages: list[Message], targets: dict[object, Folder], trashing: bool) -> ChangedOut:
    changes = _move_changes(ctx, messages, targets)
    moved = {c.id for c in changes}
    for m in messages:
        if str(m.pk) not in moved:
            continue
        target = targets[m.account_id]
        update: dict[str, object] = {"folder": target}
        if trashing:
            update["trashed_from"] = m.folder
        elif m.folder.kind == FolderKind.TRASH:
            update["trashed_from"] = None
        Message.objects.for_tenant(ctx.tenant).filter(pk=m.pk).update(**update)
    for c in changes:
        ctx.touch(c.id, c.before, c.after)
    mirror_moves(tenant=ctx.tenant, message_ids=[c.id for c in changes])
    return ChangedOut(changed=len(changes), message_ids=[c.id for c in changes])


@operation(
    name="move_messages",
    summary="Move messages to another folder of their account (not to the trash: see trash_messages).",
    input=MoveIn,
    output=ChangedOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_move_preview,
    confirm=SMALL_CHANGE,
    data_scope=_move_scope,
    bounds=(_BATCH,),
)
def move_messages(ctx: Context, data: MoveIn) -> ChangedOut:
    messages = messages_of(ctx, data.message_ids)
    return _apply_moves(ctx, messages, _targets(ctx, messages, data.folder), trashing=False)


def _trash_preview(ctx: Context, data: MessageIds) -> Preview:
    messages = messages_of(ctx, data.message_ids)
    return Preview(
        _move_changes(ctx, messages, _targets(ctx, messages, "trash")), summary="move to trash (recoverable)"
    )


@operation(
    name="trash_messages",
    summary="Move messages to the trash, where restore_messages can bring them back.",
    input=MessageIds,
    output=ChangedOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_trash_preview,
    confirm=SMALL_CHANGE,
    data_scope=_messages_scope,
    bounds=(_BATCH,),
)
def trash_messages(ctx: Context, data: MessageIds) -> ChangedOut:
    messages = messages_of(ctx, data.message_ids)
    return _apply_moves(ctx, messages, _targets(ctx, messages, "trash"), trashing=True)


def _restore_targets(ctx: Context, messages: list[Message]) -> dict[str, Folder]:
    inboxes: dict[object, Folder] = {}
    result = {}
    for m in messages:
        if m.folder.kind != FolderKind.TRASH:
            continue
        if m.trashed_from_id is not None:
            result[str(m.pk)] = Folder.objects.for_tenant(ctx.tenant).get(pk=m.trashed_from_id)
        else:
            if m.account_id not in inboxes:
                inboxes[m.account_id] = access_folder(m.account, "inbox")
            result[str(m.pk)] = inboxes[m.account_id]
    return result


def _restore_preview(ctx: Context, data: MessageIds) -> Preview:
    messages = messages_of(ctx, data.message_ids)
    targets = _restore_targets(ctx, messages)
    return Preview(tuple(Change(pk, {"folder": "trash"}, {"folder": folder_label(f)}) for pk, f in targets.items()))


@operation(
    name="restore_messages",
    summary="Bring trashed messages back to the folder they came from.",
    input=MessageIds,
    output=ChangedOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_restore_preview,
    confirm=SMALL_CHANGE,
    data_scope=_messages_scope,
    bounds=(_BATCH,),
)
def restore_messages(ctx: Context, data: MessageIds) -> ChangedOut:
    messages = messages_of(ctx, data.message_ids)
    targets = _restore_targets(ctx, messages)
    for pk, folder in targets.items():
        Message.objects.for_tenant(ctx.tenant).filter(pk=pk).update(folder=folder, trashed_from=None)
        ctx.touch(pk, {"folder": "trash"}, {"folder": folder_label(folder)})
    mirror_moves(tenant=ctx.tenant, message_ids=list(targets))
    return ChangedOut(changed=len(targets), message_ids=list(targets))


# ---------------------------------------------------------------- summaries


class SummarizeIn(MessageIds):
    mark_read: bool = Field(default=False, description="mark the summarized messages read afterwards (confirmed)")


class SummaryOut(Closed):
    message_id: str
    summary: MailText
    truncated: bool


class SummariesOut(Closed):
    summaries: list[SummaryOut]
    marked_read: list[str]
    method: Literal["extractive"]


_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def extractive_summary(text: str, limit: int) -> tuple[str, bool]:
    """The opening sentences of the text, without quoted replies, up to `limit` characters."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith(">")]
    flat = " ".join(" ".join(lines).split())
    summary = ""
    for sentence in _SENTENCE.split(flat):
        if len(summary) + len(sentence) + 1 > limit:
            break
        summary = f"{summary} {sentence}".strip()
    if not summary:
        summary = flat[:limit]
    return summary, len(summary) < len(flat)


def _summarize_preview(ctx: Context, data: SummarizeIn) -> Preview:
    messages = messages_of(ctx, data.message_ids)
    return Preview(
        tuple(Change(str(m.pk), {"read": m.read}, {"read": True}) for m in messages if data.mark_read and not m.read),
        summary="summarize" + (" and mark read" if data.mark_read else ""),
    )


@operation(
    name="summarize_messages",
    summary="Summarize up to the summarize bound of messages; optionally mark them read afterwards (confirmed).",
    input=SummarizeIn,
    output=SummariesOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_summarize_preview,
    confirm=when(lambda d: d.mark_read),
    data_scope=_messages_scope,
    bounds=(Bound("message_ids", "SUMMARIZE_MAX"),),
    changes_read_state=True,
)
def summarize_messages(ctx: Context, data: SummarizeIn) -> SummariesOut:
    messages = messages_of(ctx, data.message_ids)
    bodies = dict(
        Message.objects.for_tenant(ctx.tenant).filter(pk__in=[m.pk for m in messages]).values_list("pk", "text_body")
    )
    out = []
    for m in messages:
        summary, truncated = extractive_summary(bodies[m.pk], ctx.bounds["SUMMARY_MAX_CHARS"])
        out.append(SummaryOut(message_id=str(m.pk), summary=summary, truncated=truncated))
    marked: list[str] = []
    if data.mark_read:
        changed = readstate.set_read(tenant=ctx.tenant, message_ids=[m.pk for m in messages], read=True)
        for pk, before in changed:
            ctx.touch(pk, {"read": before}, {"read": True})
        marked = [str(pk) for pk, _ in changed]
    return SummariesOut(summaries=out, marked_read=marked, method="extractive")
