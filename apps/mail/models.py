"""The mail store: accounts, folders, threads, messages, labels, attachments, imports."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import BrinIndex, GinIndex
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.core.encryption import EncryptedJSONField
from apps.core.tenancy import TenantOwned


class AccountKind(models.TextChoices):
    LOCAL = "local", "Local (imported)"
    IMAP = "imap", "IMAP/SMTP"


class OAuthState(models.TextChoices):
    OK = "ok", "Connected"
    NEEDS_RECONNECT = "needs_reconnect", "Needs reconnecting"


class MailAccount(TenantOwned):
    workspace = models.ForeignKey("workspaces.Workspace", on_delete=models.PROTECT, related_name="accounts")
    name = models.CharField(max_length=200)
    # the display name of the From header of mail sent from it (set_mailbox_sender_name), apart from its label
    # `name`: a new mailbox takes the name of the person who connected it; '' sends under the bare address
    sender_name = models.CharField(max_length=200, blank=True, default="", db_default="")
    kind = models.CharField(max_length=10, choices=AccountKind.choices, default=AccountKind.LOCAL)
    email_address = models.CharField(max_length=320, blank=True)
    # Host, user, password and the like: encrypted, and never returned by any operation.
    credentials = EncryptedJSONField()
    created_at = models.DateTimeField(default=timezone.now)
    # IMAP sync (apps/mail/sync.py): when it last succeeded, and after failures, a fixed reason
    # (never the server's text) and when the next attempt is due (exponential backoff)
    synced_at = models.DateTimeField(null=True, blank=True)
    sync_failures = models.PositiveIntegerField(default=0)
    sync_error = models.CharField(max_length=40, blank=True)
    sync_next_at = models.DateTimeField(null=True, blank=True)
    # A mailbox connected by OAuth (apps.mail.oauth): the provider's name ('' for a password login), its access and
    # refresh tokens (encrypted like passwords, never returned), when the access token expires, and whether the
    # provider still honours the grant (needs_reconnect: it refused a refresh; sync and delivery stop trying)
    oauth_provider = models.CharField(max_length=40, blank=True)
    oauth_tokens = EncryptedJSONField(null=True, default=None)
    oauth_expires_at = models.DateTimeField(null=True, blank=True)
    oauth_state = models.CharField(max_length=20, choices=OAuthState.choices, default=OAuthState.OK)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "name"], name="account_name_unique_in_workspace"),
        ]

    def __str__(self) -> str:
        return self.name


class FolderKind(models.TextChoices):
    INBOX = "inbox", "Inbox"
    ARCHIVE = "archive", "Archive"
    SPAM = "spam", "Spam"
    TRASH = "trash", "Trash"
    SENT = "sent", "Sent"
    DRAFTS = "drafts", "Drafts"
    CUSTOM = "custom", "Custom"


STANDARD_FOLDERS = [kind for kind in FolderKind if kind != FolderKind.CUSTOM]


class Folder(TenantOwned):
    account = models.ForeignKey(MailAccount, on_delete=models.CASCADE, related_name="folders")
    kind = models.CharField(max_length=10, choices=FolderKind.choices)
    # for IMAP accounts, the folder's name on the server
    name = models.CharField(max_length=500)
    # IMAP sync state: what was stored under which UIDVALIDITY, up to which UID and MODSEQ
    imap_uidvalidity = models.BigIntegerField(null=True, blank=True)
    imap_last_uid = models.BigIntegerField(default=0)
    imap_highestmodseq = models.BigIntegerField(default=0)
    # how many messages the server had with a UID up to imap_last_uid when the folder was last synced: fewer
    # now means the server expunged some (UIDs only grow, so nothing new can join that range)
    imap_uid_count = models.BigIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["account", "name"], name="folder_name_unique_in_account"),
            models.UniqueConstraint(
                fields=["account", "kind"],
                condition=~Q(kind="custom"),
                name="one_standard_folder_of_each_kind",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class Thread(TenantOwned):
    account = models.ForeignKey(MailAccount, on_delete=models.CASCADE, related_name="threads")
    subject = models.TextField(blank=True)
    # normalize_subject(subject): the fallback key when References/In-Reply-To find nothing
    subject_key = models.TextField(blank=True)
    first_message_at = models.DateTimeField(null=True)
    last_message_at = models.DateTimeField(null=True)
    message_count = models.PositiveIntegerField(default=0)
    # Waiting for reply (apps.mail.awaiting): the mailbox's own last message the nudge brought the thread back
    # for, and when. Once per such message: a newer one of the person's may be nudged again; an answer ends the
    # wait whatever these hold (the wait is computed, never stored).
    awaiting_nudged_for = models.UUIDField(null=True, blank=True)
    awaiting_nudged_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["account", "subject_key"], name="thread_subject_key"),
            models.Index(fields=["tenant", "account", "-last_message_at"], name="thread_recent"),
        ]


class Label(TenantOwned):
    account = models.ForeignKey(MailAccount, on_delete=models.CASCADE, related_name="labels")
    name = models.CharField(max_length=200)
    color = models.CharField(max_length=20, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # an AI label (set_label_description): new mail that matches the description is labelled, acting as the person
    # who set it (description_by), for mail stored after description_at; each change is a new version, so a
    # changed description decides only mail that arrives after it
    description = models.TextField(blank=True)
    description_by = models.ForeignKey(
        "accounts.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    description_at = models.DateTimeField(null=True, blank=True)
    description_version = models.PositiveIntegerField(default=0)
    # why the AI label stopped labelling (its person left the tenant or lost the account's workspace); '' labels
    ai_stopped = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["account", "name"], name="label_name_unique_in_account")]

    def __str__(self) -> str:
        return self.name

    @property
    def ai_state(self) -> str:
        """off (no description), on (labels new mail), or stopped (ai_stopped says why)."""
        if not self.description:
            return "off"
        return "stopped" if self.ai_stopped else "on"


# where a listing puts a message (apps.mail.reads: the same expression as its SQL, so the indexes serve it): the
# time a snooze brought it back, else its Date
LISTED_AT = Coalesce(F("returned_at"), F("date"))

# bits of Message.flags_pending
FLAG_SEEN = 1
FLAG_FLAGGED = 2


class Message(TenantOwned):
    # Foreign-key indexes are left to the composite indexes below, which lead with these
    # columns: every index costs on imports of thousands of messages.
    tenant = models.ForeignKey("workspaces.Tenant", on_delete=models.CASCADE, related_name="+", db_index=False)
    account = models.ForeignKey(MailAccount, on_delete=models.CASCADE, related_name="messages", db_index=False)
    folder = models.ForeignKey(Folder, on_delete=models.PROTECT, related_name="messages")
    thread = models.ForeignKey(Thread, on_delete=models.PROTECT, related_name="messages", db_index=False)
    # Message-ID without angle brackets; '' when the message had none
    message_id = models.TextField(blank=True)
    in_reply_to = models.TextField(blank=True)
    # the References header's ids, ending with In-Reply-To when References lacks it
    references = ArrayField(models.TextField(), default=list, blank=True)
    subject = models.TextField(blank=True)
    sender_name = models.TextField(blank=True)
    sender_address = models.CharField(max_length=320, blank=True)
    # lists of {"name": ..., "address": ...}
    to_addresses = models.JSONField(default=list, blank=True)
    cc_addresses = models.JSONField(default=list, blank=True)
    bcc_addresses = models.JSONField(default=list, blank=True)
    reply_to_addresses = models.JSONField(default=list, blank=True)
    date = models.DateTimeField(null=True)
    received_at = models.DateTimeField(default=timezone.now)
    text_body = models.TextField(blank=True)
    html_body = models.TextField(blank=True)
    snippet = models.CharField(max_length=200, blank=True)
    size = models.PositiveIntegerField(default=0)
    read = models.BooleanField(default=False)
    pinned = models.BooleanField(default=False)
    has_attachments = models.BooleanField(default=False)
    # where a trashed message came from, so restoring puts it back
    trashed_from = models.ForeignKey(Folder, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    content_hash = models.CharField(max_length=64)
    headers = models.JSONField(default=dict, blank=True)
    # Where the message lives on the IMAP server (its folder there and its UID under that folder's
    # UIDVALIDITY), so flags and moves can go back. It differs from `folder` while a move made in
    # Oaken waits to be mirrored; the UID is null until the server's UID is known.
    imap_folder = models.ForeignKey(
        Folder, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    imap_uid = models.BigIntegerField(null=True, blank=True)
    # Since when the server has not had the message where Oaken last saw it (expunged, or moved and not found
    # yet); cleared when a sync finds it again. A message missing for longer than SYNC_MISSING_GRACE_SECONDS at
    # the end of a complete sync was deleted on the server, and is removed here too.
    imap_missing_since = models.DateTimeField(null=True, blank=True)
    # Which flags changed in Oaken and are not on the server yet (FLAG_SEEN | FLAG_FLAGGED), and since when:
    # until the push clears them, a sync does not take the server's (older) value of those flags.
    flags_pending = models.PositiveSmallIntegerField(default=0, db_default=0)
    flags_pending_at = models.DateTimeField(null=True, blank=True)
    # On a server with Gmail's extensions (X-GM-EXT-1), the message's X-GM-MSGID (as a signed 64-bit number): one
    # message in many Gmail labels is one row, found again by it wherever the server shows it (apps.mail.gmail)
    gmail_msgid = models.BigIntegerField(null=True, blank=True)
    # Snooze (apps.mail.snooze): until when the message is away from the inbox (in the archive, here and on the
    # server), null when it is not snoozed; and when a snooze (or the waiting-for-reply nudge, apps.mail.awaiting)
    # last brought it back. A listing orders a message by LISTED_AT (its return, else its Date): a returned message
    # comes back at the top without its Date changing.
    snoozed_until = models.DateTimeField(null=True, blank=True)
    returned_at = models.DateTimeField(null=True, blank=True)
    labels = models.ManyToManyField(Label, through="MessageLabel", related_name="messages")

    class Meta:
        constraints = [
            # A re-import of the same source adds nothing: same Message-ID and same content.
            # Also the index for finding messages by Message-ID (threading, reconciliation).
            models.UniqueConstraint(fields=["account", "message_id", "content_hash"], name="message_unique_in_account"),
            models.UniqueConstraint(
                fields=["account", "gmail_msgid"],
                condition=Q(gmail_msgid__isnull=False),
                name="gmail_message_once_in_account",
            ),
        ]
        indexes = [
            # a listing's order (newest first, undated last, then by id: apps.mail.reads), so that its first page
            # is read off the index instead of sorting the whole folder (a 10,000-message inbox: 16 ms -> 0.3 ms)
            # (by LISTED_AT: the Date, or the time a snooze brought the message back)
            models.Index(
                "tenant", "account", "folder", LISTED_AT.desc(nulls_last=True), F("id").desc(), name="message_in_folder"
            ),
            models.Index(
                "tenant", "account", LISTED_AT.desc(nulls_last=True), F("id").desc(), name="message_in_account"
            ),
            # and across every account (an agent's "what is new", with no account named): 86 ms for 10,000 without it
            models.Index("tenant", LISTED_AT.desc(nulls_last=True), F("id").desc(), name="message_in_tenant"),
            # the snoozed messages whose time has come (apps.mail.snooze.due)
            models.Index(fields=["snoozed_until"], name="message_snoozed", condition=Q(snoozed_until__isnull=False)),
            # a folder's unread count, read off this index alone (apps.mail.reads.folder_counts)
            models.Index(
                fields=["tenant", "account", "folder"], condition=Q(read=False), name="message_unread_in_folder"
            ),
            models.Index(fields=["thread", "date"], name="message_in_thread"),
            # fastupdate off: threading probes this index right after bulk inserts, and a
            # pending list would make every probe scan all recent inserts
            GinIndex(fields=["references"], name="message_references", fastupdate=False),
            models.Index(
                fields=["imap_folder", "imap_uid"], name="message_imap_location", condition=Q(imap_folder__isnull=False)
            ),
            models.Index(
                fields=["account", "imap_missing_since"],
                name="message_missing_on_server",
                condition=Q(imap_missing_since__isnull=False),
            ),
            models.Index(fields=["account"], name="message_flags_pending", condition=Q(flags_pending_at__isnull=False)),
            # what came in since a time (wait_for_message): rows are stored in the order they arrive, so a block
            # range index finds the recent ones for next to nothing per insert (a B-tree would cost every import)
            BrinIndex(fields=["received_at"], name="message_arrived"),
        ]

    def __str__(self) -> str:
        return self.message_id or str(self.pk)


class RawMessage(TenantOwned):
    """The message exactly as received, kept apart so message rows stay small."""

    message = models.OneToOneField(Message, on_delete=models.CASCADE, related_name="raw")
    data = models.BinaryField()


class MessageLabel(TenantOwned):
    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="+")
    label = models.ForeignKey(Label, on_delete=models.CASCADE, related_name="+")
    # the label came from the server (a Gmail label, apps.mail.gmail): a sync takes it off when the server does;
    # a label put on in Oaken is left alone by syncs
    from_server = models.BooleanField(default=False, db_default=False)
    # the label's description put it on (an AI label, acting as its person), not a person by hand: never an example
    by_description = models.BooleanField(default=False, db_default=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["message", "label"], name="label_once_per_message")]


class LabelRefusal(TenantOwned):
    """A person took off a label its description had put on: a negative example for that AI label (until the
    person puts the label back by hand)."""

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="+")
    label = models.ForeignKey(Label, on_delete=models.CASCADE, related_name="+")
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["message", "label"], name="label_refusal_once")]


class Attachment(TenantOwned):
    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="attachments")
    filename = models.TextField()
    content_type = models.CharField(max_length=255)
    size = models.PositiveIntegerField()
    inline = models.BooleanField(default=False)
    content = models.BinaryField()
    # text for search, where the attachment is text ('' otherwise)
    extracted_text = models.TextField(blank=True)


class ImportState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class ImportRun(TenantOwned):
    account = models.ForeignKey(MailAccount, on_delete=models.CASCADE, related_name="imports")
    source_name = models.CharField(max_length=255)
    source_kind = models.CharField(max_length=20)
    state = models.CharField(max_length=10, choices=ImportState.choices, default=ImportState.RUNNING)
    imported = models.PositiveIntegerField(default=0)
    duplicates = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    error = models.CharField(max_length=255, blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True)
    # an upload from the console (upload_import): its file under IMPORT_UPLOAD_DIR until the import ends, its
    # size, and how many messages it holds (counted when the import starts, for a progress bar's 100%)
    upload = models.CharField(max_length=255, blank=True)
    upload_size = models.BigIntegerField(default=0)
    total = models.PositiveIntegerField(null=True)
    # when it last moved (queued, started, a batch committed): one that stops moving is swept as failed
    updated_at = models.DateTimeField(default=timezone.now)


class ImportFailure(TenantOwned):
    """A message that could not be imported: where it was and why, never its content."""

    run = models.ForeignKey(ImportRun, on_delete=models.CASCADE, related_name="failures")
    position = models.CharField(max_length=500)
    reason = models.CharField(max_length=255)
