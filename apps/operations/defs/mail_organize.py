"""Organizing mail: read state, pins, labels, folders, trash, summaries. Each change is previewed first."""

from __future__ import annotations

from typing import Any, NamedTuple

from pydantic import Field

from apps.core import words
from apps.core.changes import Change
from apps.core.errors import OakenError
from apps.mail import readstate, services
from apps.mail.models import Folder, FolderKind, Label, MailAccount, Message
from apps.mail.selectors import (
    access_account_by_id,
    access_folder_by_name,
    access_labels_by_ids,
    folder_by_id,
    labelled_count,
    labelled_pairs,
)
from apps.operations import forwarding
from apps.operations.context import Context
from apps.operations.defs.mail_read import LabelOut, label_out
from apps.operations.defs.shapes import Closed, Id, MessageIds, Name, folder_label
from apps.operations.defs.summaries import SummarizerOut, SummaryState, gather_jobs, state_fields, summarizer_out
from apps.operations.registry import ALWAYS, NEVER, Bound, Ceiling, OpClass, Preview, above, operation, when
from apps.operations.targets import reach, the_messages
from apps.summaries.services import Outcome, message_job

_BATCH = Bound("message_ids", "BATCH_MAX")


def _small(data: MessageIds) -> int:
    return len(set(data.message_ids))


SMALL_CHANGE = above("CONFIRM_FREE_MAX", _small)


class ChangedOut(Closed):
    changed: int
    message_ids: list[str]


def _folder_words(folder: Folder) -> str:
    """A folder as a person reads it: Inbox, Archive, or a folder's own name in quotes."""
    return folder.kind.capitalize() if folder.kind != FolderKind.CUSTOM else words.named(folder.name)


def _messages(n: int) -> str:
    return words.count(n, "message")


# ---------------------------------------------------------------- read state


def _read_preview(value: bool):
    def preview(ctx: Context, data: MessageIds) -> Preview:
        messages: list[Message] = ctx.targets
        changes = tuple(Change(str(m.pk), {"read": m.read}, {"read": value}) for m in messages if m.read != value)
        state = "read" if value else "unread"
        return Preview(
            changes,
            summary=f"Mark {_messages(len(changes))} as {state}.",
            title=f"Mark these messages {state}?",
            verb=f"Mark {state}",
        )

    return preview


def _set_read(ctx: Context, value: bool) -> ChangedOut:
    messages: list[Message] = ctx.targets
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
    targets=the_messages,
    bounds=(_BATCH,),
    changes_read_state=True,
)
def mark_read(ctx: Context, data: MessageIds) -> ChangedOut:
    return _set_read(ctx, True)


@operation(
    name="mark_unread",
    summary="Mark messages unread.",
    input=MessageIds,
    output=ChangedOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_read_preview(False),
    confirm=SMALL_CHANGE,
    targets=the_messages,
    bounds=(_BATCH,),
    changes_read_state=True,
)
def mark_unread(ctx: Context, data: MessageIds) -> ChangedOut:
    return _set_read(ctx, False)


# ---------------------------------------------------------------- pins


class PinIn(MessageIds):
    pinned: bool


def _pin_preview(ctx: Context, data: PinIn) -> Preview:
    messages: list[Message] = ctx.targets
    changes = tuple(
        Change(str(m.pk), {"pinned": m.pinned}, {"pinned": data.pinned}) for m in messages if m.pinned != data.pinned
    )
    return Preview(
        changes,
        summary=f"{'Pin' if data.pinned else 'Unpin'} {_messages(len(changes))}.",
        title=f"{'Pin' if data.pinned else 'Unpin'} these messages?",
        verb="Pin" if data.pinned else "Unpin",
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
    targets=the_messages,
    bounds=(_BATCH,),
)
def set_pinned(ctx: Context, data: PinIn) -> ChangedOut:
    ids = services.set_pinned(act=ctx, changes=_pin_preview(ctx, data).changes, pinned=data.pinned)
    return ChangedOut(changed=len(ids), message_ids=ids)


# ---------------------------------------------------------------- labels on messages


class LabelMessagesIn(MessageIds):
    label_ids: list[Id] = Field(min_length=1)


class Labelling(NamedTuple):
    messages: list[Message]
    labels: list[Label]


def _labelling(ctx: Context, data: LabelMessagesIn) -> Labelling:
    messages = the_messages(ctx, data)
    labels = access_labels_by_ids(data.label_ids, reach=reach(ctx))
    accounts = {m.account_id for m in messages}
    if any(label.account_id not in accounts or len(accounts) > 1 for label in labels):
        raise OakenError.invalid("label_ids", "labels belong to an account: use labels of the messages' own account")
    if not forwarding.may_send(ctx):  # (a person, a rule and an AI label may: no query for them)
        # what is labelled by hand is what an AI label learns from
        forwarding.guard_labels(ctx, labels, "labelling by hand")
    return Labelling(messages, labels)


def _labels_preview(add: bool):
    def preview(ctx: Context, data: LabelMessagesIn) -> Preview:
        messages, labels = ctx.targets
        present = labelled_pairs(tenant=ctx.tenant, messages=messages, labels=labels)
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
        names = words.listed(words.named(label.name) for label in labels)
        touched = _messages(len({c.id for c in changes}))
        return Preview(
            tuple(changes),
            summary=f"Add the label {names} to {touched}." if add else f"Remove the label {names} from {touched}.",
            title="Label these messages?" if add else "Remove this label?",
            verb="Add label" if add else "Remove label",
        )

    return preview


class LabelChangeOut(Closed):
    changed: int


def _label_handler(add: bool):
    preview = _labels_preview(add)

    def handler(ctx: Context, data: LabelMessagesIn) -> LabelChangeOut:
        changes = preview(ctx, data).changes
        change = services.add_labels if add else services.remove_labels
        return LabelChangeOut(changed=change(act=ctx, changes=changes))

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
    targets=_labelling,
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
    targets=_labelling,
    bounds=_LABEL_BOUNDS,
)(_label_handler(False))


# ---------------------------------------------------------------- labels themselves


class CreateLabelIn(Closed):
    account_id: Id
    name: Name
    color: str = Field(default="", pattern=r"^(#[0-9a-fA-F]{6})?$")


class LabelResult(Closed):
    label: LabelOut


def _label_account(ctx: Context, data: CreateLabelIn) -> MailAccount:
    return access_account_by_id(data.account_id, reach=reach(ctx))


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
    targets=_label_account,
)
def create_label(ctx: Context, data: CreateLabelIn) -> LabelResult:
    label = services.create_label(act=ctx, account=ctx.targets, name=data.name, color=data.color)
    return LabelResult(label=label_out(label))


class RenameLabelIn(Closed):
    label_id: Id
    name: Name


def _the_label(ctx: Context, data: RenameLabelIn | LabelIn) -> Label:
    return access_labels_by_ids([data.label_id], reach=reach(ctx), field="label_id")[0]


def _renaming(ctx: Context, data: RenameLabelIn) -> Label:
    label = _the_label(ctx, data)
    # a rule names the label by id: a new name changes nothing it sends, but the label stays the send's to change
    forwarding.guard_labels(ctx, [label], "renaming this label")
    return label


def _deleting_label(ctx: Context, data: LabelIn) -> Label:
    label = _the_label(ctx, data)
    forwarding.guard_labels(ctx, [label], "deleting this label")
    return label


def _rename_preview(ctx: Context, data: RenameLabelIn) -> Preview:
    label: Label = ctx.targets
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
    targets=_renaming,
)
def rename_label(ctx: Context, data: RenameLabelIn) -> LabelResult:
    return LabelResult(label=label_out(services.rename_label(act=ctx, label=ctx.targets, name=data.name)))


class LabelIn(Closed):
    label_id: Id


class DeletedOut(Closed):
    deleted: str
    messages_unlabelled: int


def _delete_label_preview(ctx: Context, data: LabelIn) -> Preview:
    label: Label = ctx.targets
    count = labelled_count(tenant=ctx.tenant, label=label)
    return Preview(
        (Change(str(label.pk), {"name": label.name, "messages": count}, None),),
        summary=(
            f"Delete the label {words.named(label.name)} and take it off {_messages(count)}. The messages "
            "stay where they are."
            if count
            else f"Delete the label {words.named(label.name)}. No message carries it."
        )
        + forwarding.changes(forwarding.using_labels(ctx.tenant, [label])),
        title="Delete this label?",
        verb="Delete label",
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
    targets=_deleting_label,
)
def delete_label(ctx: Context, data: LabelIn) -> DeletedOut:
    label: Label = ctx.targets
    naming = forwarding.using_labels(ctx.tenant, [label])
    count = services.delete_label(act=ctx, label=label)
    for rule in naming:  # their terms changed: a label condition of a label gone holds for no message
        forwarding.bind(ctx, rule)
    return DeletedOut(deleted=str(label.pk), messages_unlabelled=count)


# ---------------------------------------------------------------- folders and trash


class MoveIn(MessageIds):
    folder: str = Field(min_length=1, max_length=500, description="inbox, archive, spam, sent, drafts or a folder name")


class Moves(NamedTuple):
    messages: list[Message]
    # the destination folder in each message's own account
    to: dict[object, Folder]


def _moves(messages: list[Message], folder: str) -> Moves:
    accounts = {m.account_id: m.account for m in messages}
    return Moves(messages, {pk: access_folder_by_name(folder, account=account) for pk, account in accounts.items()})


def _move_changes(moves: Moves) -> tuple[Change, ...]:
    return tuple(
        _move_change(m, moves.to[m.account_id]) for m in moves.messages if m.folder_id != moves.to[m.account_id].pk
    )


def _move_change(m: Message, to: Folder) -> Change:
    """The message's folder before and after; a snoozed message's snooze too, when the move ends it."""
    before: dict[str, Any] = {"folder": folder_label(m.folder)}
    after: dict[str, Any] = {"folder": folder_label(to)}
    if m.snoozed_until is not None and to.kind in services.SNOOZE_ENDING_FOLDERS:
        before["snoozed_until"], after["snoozed_until"] = m.snoozed_until.isoformat(), None
    return Change(str(m.pk), before, after)


def _moving(ctx: Context, data: MoveIn) -> Moves:
    moves = _moves(the_messages(ctx, data), data.folder)
    if any(t.kind == FolderKind.TRASH for t in moves.to.values()):
        raise OakenError.invalid("folder", "use trash_messages to move mail to the trash")
    return moves


def _trashing(ctx: Context, data: MessageIds) -> Moves:
    return _moves(the_messages(ctx, data), "trash")


def _move_preview(ctx: Context, data: MoveIn) -> Preview:
    moves: Moves = ctx.targets
    changes = _move_changes(moves)
    where = words.listed(sorted({_folder_words(f) for f in moves.to.values()}))
    return Preview(
        changes, summary=f"Move {_messages(len(changes))} to {where}.", title="Move these messages?", verb="Move"
    )


def _apply_moves(ctx: Context, moves: Moves, trashing: bool) -> ChangedOut:
    changes = _move_changes(moves)
    moved = {c.id for c in changes}
    each = [(m, moves.to[m.account_id]) for m in moves.messages if str(m.pk) in moved]
    ids = services.move_messages(act=ctx, moves=each, changes=changes, trashing=trashing)
    return ChangedOut(changed=len(ids), message_ids=ids)


@operation(
    name="move_messages",
    summary="Move messages to another folder of their account (not to the trash: see trash_messages).",
    input=MoveIn,
    output=ChangedOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_move_preview,
    confirm=SMALL_CHANGE,
    targets=_moving,
    bounds=(_BATCH,),
)
def move_messages(ctx: Context, data: MoveIn) -> ChangedOut:
    return _apply_moves(ctx, ctx.targets, trashing=False)


def _trash_preview(ctx: Context, data: MessageIds) -> Preview:
    changes = _move_changes(ctx.targets)
    return Preview(
        changes,
        summary=f"Move {_messages(len(changes))} to the Trash. You can restore them from there.",
        title="Move these messages to the Trash?",
        verb="Move to Trash",
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
    targets=_trashing,
    bounds=(_BATCH,),
)
def trash_messages(ctx: Context, data: MessageIds) -> ChangedOut:
    return _apply_moves(ctx, ctx.targets, trashing=True)


def _restoring(ctx: Context, data: MessageIds) -> dict[str, Folder]:
    """Where each trashed message named goes back to (messages not in the trash stay where they are)."""
    inboxes: dict[object, Folder] = {}
    result = {}
    for m in the_messages(ctx, data):
        if m.folder.kind != FolderKind.TRASH:
            continue
        if m.trashed_from_id is not None:
            result[str(m.pk)] = folder_by_id(tenant=ctx.tenant, folder_id=m.trashed_from_id)
        else:
            if m.account_id not in inboxes:
                inboxes[m.account_id] = access_folder_by_name("inbox", account=m.account)
            result[str(m.pk)] = inboxes[m.account_id]
    return result


def _restore_changes(folders: dict[str, Folder]) -> tuple[Change, ...]:
    return tuple(Change(pk, {"folder": "trash"}, {"folder": folder_label(f)}) for pk, f in folders.items())


def _restore_preview(ctx: Context, data: MessageIds) -> Preview:
    folders: dict[str, Folder] = ctx.targets
    where = words.listed(sorted({_folder_words(f) for f in folders.values()}))
    return Preview(
        _restore_changes(folders),
        summary=f"Bring {_messages(len(folders))} back from the Trash to {where}.",
        title="Restore these messages?",
        verb="Restore",
    )


@operation(
    name="restore_messages",
    summary="Bring trashed messages back to the folder they came from.",
    input=MessageIds,
    output=ChangedOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_restore_preview,
    confirm=SMALL_CHANGE,
    targets=_restoring,
    bounds=(_BATCH,),
)
def restore_messages(ctx: Context, data: MessageIds) -> ChangedOut:
    folders: dict[str, Folder] = ctx.targets
    ids = services.restore_messages(act=ctx, folders=folders, changes=_restore_changes(folders))
    return ChangedOut(changed=len(ids), message_ids=ids)


# ---------------------------------------------------------------- summaries


class SummarizeIn(MessageIds):
    mark_read: bool = Field(
        default=False, description="mark the summarized messages read once their summaries are back (confirmed)"
    )


class SummaryOut(SummaryState):
    message_id: str


class SummariesOut(Closed):
    summaries: list[SummaryOut]
    marked_read: list[str]
    summarizer: SummarizerOut


def _summarize_preview(ctx: Context, data: SummarizeIn) -> Preview:
    messages: list[Message] = ctx.targets
    changes = tuple(
        Change(str(m.pk), {"read": m.read}, {"read": True}) for m in messages if data.mark_read and not m.read
    )
    them = "them" if len(changes) == len(messages) else _messages(len(changes))
    marked = f", then mark {them} as read" if data.mark_read else ""
    return Preview(
        changes,
        summary=f"Summarize {_messages(len(messages))}{marked}.",
        title="Summarize and mark read?" if data.mark_read else "Summarize these messages?",
        verb="Summarize",
    )


def _gather_summaries(ctx: Context, data: SummarizeIn) -> dict[tuple[str, str], Outcome]:
    messages: list[Message] = ctx.targets
    return gather_jobs(ctx, [message_job(m) for m in messages])


@operation(
    name="summarize_messages",
    summary="Summarize up to the summarize bound of messages; optionally mark them read afterwards (confirmed).",
    input=SummarizeIn,
    output=SummariesOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_summarize_preview,
    confirm=when(lambda d: d.mark_read),
    targets=the_messages,
    gather=_gather_summaries,
    bounds=(Bound("message_ids", "SUMMARIZE_MAX"),),
    changes_read_state=True,
)
def summarize_messages(ctx: Context, data: SummarizeIn) -> SummariesOut:
    """The summaries are written on Celery workers, in parallel, and cached per content and summarizer; the call
    waits up to SUMMARY_WAIT_SECONDS, and a summary not done by then is `pending` (the next call returns it from
    the cache). Summarizing marks nothing read; with mark_read (confirmed), the messages whose summaries came back
    are marked read after they did."""
    messages: list[Message] = ctx.targets
    outcomes: dict[tuple[str, str], Outcome] = ctx.gathered
    out = [
        SummaryOut(message_id=str(m.pk), **state_fields(outcomes[message_job(m).key]))  # type: ignore[arg-type]
        for m in messages
    ]
    marked: list[str] = []
    if data.mark_read:
        done = [m.pk for m in messages if outcomes[message_job(m).key].state == "done"]
        changed = readstate.set_read(tenant=ctx.tenant, message_ids=done, read=True)
        for pk, before in changed:
            ctx.touch(pk, {"read": before}, {"read": True})
        marked = [str(pk) for pk, _ in changed]
    return SummariesOut(summaries=out, marked_read=marked, summarizer=summarizer_out())
