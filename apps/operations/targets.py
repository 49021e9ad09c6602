"""What an operation's input names, resolved in the caller's reach: the `targets` of many definitions
(apps.operations.registry says when the gate calls them), and the small inputs that name one thing.

Every resolver raises the one domain error of the selectors it calls (apps.mail.selectors): another tenant's id
is NOT_FOUND like one that does not exist, another workspace's OUT_OF_SCOPE.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict

from apps.mail.models import MailAccount, Message, Thread
from apps.mail.reads import Listing, listing_of
from apps.mail.selectors import (
    Reach,
    access_account_by_id,
    access_message_by_id,
    access_messages_by_ids,
    access_thread_by_id,
)
from apps.operations.context import Context
from apps.operations.defs.shapes import Closed, Id, MessageIds

__all__ = [
    "FOLDER_NEEDS_ACCOUNT",
    "AccountIn",
    "Listing",
    "MessageIn",
    "OptionalAccountIn",
    "ThreadIn",
    "account_of",
    "an_account",
    "listing",
    "reach",
    "the_account",
    "the_message",
    "the_messages",
    "the_thread",
]


class AccountIn(Closed):
    account_id: Id


class OptionalAccountIn(Closed):
    account_id: Id | None = None


class MessageIn(Closed):
    message_id: Id


class ThreadIn(Closed):
    thread_id: Id


# a folder belongs to an account: naming one needs account_id (apps.mail.reads), published with the input
FOLDER_NEEDS_ACCOUNT = ConfigDict(
    json_schema_extra={
        "anyOf": [
            {"not": {"required": ["folder"], "properties": {"folder": {"type": "string"}}}},
            {"required": ["account_id"], "properties": {"account_id": {"type": "string"}}},
        ]
    }
)


def reach(ctx: Context) -> Reach:
    return Reach.of(ctx.caller)


def account_of(ctx: Context, account_id: str) -> MailAccount:
    return access_account_by_id(account_id, reach=reach(ctx))


def the_account(ctx: Context, data: AccountIn) -> MailAccount:
    return account_of(ctx, data.account_id)


def an_account(ctx: Context, data: OptionalAccountIn) -> MailAccount | None:
    """The account named, or None for every account in reach (refused when the reach is restricted)."""
    if data.account_id is not None:
        return account_of(ctx, data.account_id)
    reach(ctx).require_account(None)
    return None


def the_message(ctx: Context, data: MessageIn) -> Message:
    return access_message_by_id(data.message_id, reach=reach(ctx))


def the_messages(ctx: Context, data: MessageIds) -> list[Message]:
    return access_messages_by_ids(data.message_ids, reach=reach(ctx))


def the_thread(ctx: Context, data: ThreadIn) -> Thread:
    return access_thread_by_id(data.thread_id, reach=reach(ctx))


def listing(ctx: Context, data: Any) -> Listing:
    """The account, folder and label a listing (or a search) names, each in the caller's reach."""
    return listing_of(reach(ctx), account_id=data.account_id, label_id=data.label_id, folder=data.folder)
