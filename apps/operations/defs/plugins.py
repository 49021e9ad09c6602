"""Plugins as a tenant's admin sees them: health, operations, settings (SPEC §17, docs/plugins.md)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field

from apps.core import words
from apps.core.bounds import bounds
from apps.core.changes import Change
from apps.core.errors import OakenError
from apps.core.schema_paths import UNKNOWN_ARGUMENT, dotted, known_path
from apps.mail.models import MailAccount, Message
from apps.mail.parsing.html_text import html_to_text
from apps.mail.selectors import (
    Reach,
    access_account_by_id,
    access_message_by_id,
    newest_attachments_of,
    newest_messages_of,
)
from apps.operations.context import Context
from apps.operations.defs.shapes import Closed, Empty
from apps.operations.exposure import level_for, tenant_settings
from apps.operations.plugin_runtime import Runtime, runtime, runtimes
from apps.operations.plugin_schema import PluginValidator, first_error
from apps.operations.plugin_secrets import SecretNotKept, SettingsSchema
from apps.operations.plugin_state import settings_of, store_settings
from apps.operations.plugins import MailReaders, provide_mail_readers, status
from apps.operations.registry import ALWAYS, Callers, Ceiling, OpClass, Preview, operation, registry

# ---------------------------------------------------------------- what a plugin's call reads


def _targets(ctx: Context, data: BaseModel) -> Message | MailAccount | None:
    """The message or account the input names, in the caller's reach (a restricted agent names an account)."""
    reach = Reach.of(ctx.caller)
    values = data.model_dump()
    if values.get("message_id"):
        return access_message_by_id(str(values["message_id"]), reach=reach)
    if values.get("account_id"):
        return access_account_by_id(str(values["account_id"]), reach=reach)
    reach.require_account(None)
    return None


# what an operation may declare it reads besides attachments' MIME types (oaken_plugin.MESSAGE_TEXT, _HEADERS)
MESSAGE_TEXT = "message/text"
MESSAGE_HEADERS = "message/headers"
_HEADER_NAMES = (
    ("From", "sender_address"),
    ("To", "to_addresses"),
    ("Cc", "cc_addresses"),
    ("Reply-To", "reply_to_addresses"),
)


def _parts(ctx: Context, data: BaseModel, reads: tuple[str, ...]) -> list[dict[str, Any]]:
    """The parts of the declared kinds: of the message named, else of the account's newest messages (newest
    first, at most the input's `limit` and PLUGIN_MAX_PARTS in all)."""
    found = ctx.targets
    if not reads or not isinstance(found, Message | MailAccount):
        return []
    limit = data.model_dump().get("limit")
    most = bounds.PLUGIN_MAX_PARTS
    if isinstance(limit, int) and limit > 0:
        most = min(limit, most)
    cut = bounds.PLUGIN_PART_MAX_BYTES
    own = {kind for kind in reads if kind in (MESSAGE_TEXT, MESSAGE_HEADERS)}
    types = [kind for kind in reads if kind not in own]
    # (date, message, kind, place): newest message first; in a message its headers, its text, its attachments
    parts: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    if own:
        for message in newest_messages_of(tenant=ctx.tenant, found=found, limit=most):
            if MESSAGE_HEADERS in own:
                headers = _part(message, "headers", "text/rfc822-headers", "", _header_lines(message))
                parts.append(((message.date, str(message.pk), 0, 0), headers))
            if MESSAGE_TEXT in own:
                text = (message.text_body or html_to_text(message.html_body))[:cut]
                parts.append(((message.date, str(message.pk), 1, 0), _part(message, "text", "text/plain", "", text)))
    if types:
        rows = newest_attachments_of(tenant=ctx.tenant, found=found, content_types=types, limit=most)
        for place, row in enumerate(rows):
            text = bytes(row.content[:cut]).decode("utf-8", errors="replace")
            attachment = _part(row.message, "attachment", row.content_type, row.filename, text)
            parts.append(((row.message.date, str(row.message.pk), 2, place), attachment))
    oldest = datetime.min.replace(tzinfo=UTC)
    parts.sort(key=lambda item: item[0][2:])
    parts.sort(key=lambda item: (item[0][0] or oldest, item[0][1]), reverse=True)  # stable: keeps the kinds' order
    return [part for _, part in parts[:most]]


def _part(message: Message, kind: str, content_type: str, filename: str, text: str) -> dict[str, Any]:
    return {
        "message_id": str(message.pk),
        "account_id": str(message.account_id),
        "subject": message.subject,
        "sender": message.sender_address,
        "date": message.date.isoformat() if message.date else None,
        "filename": filename,
        "content_type": content_type,
        "text": text,
        "kind": kind,
    }


def _header_lines(message: Message) -> str:
    """The message's headers as Oaken keeps them, one "Name: value" line each."""
    lines = []
    for name, field in _HEADER_NAMES:
        value = getattr(message, field)
        if field == "sender_address":
            value = f"{message.sender_name} <{value}>" if message.sender_name and value else value
        elif isinstance(value, list):
            value = ", ".join(_address(item) for item in value)
        if value:
            lines.append(f"{name}: {value}")
    for name, value in (
        ("Subject", message.subject),
        ("Date", message.date.isoformat() if message.date else ""),
        ("Message-ID", f"<{message.message_id}>" if message.message_id else ""),
        ("In-Reply-To", f"<{message.in_reply_to}>" if message.in_reply_to else ""),
        *sorted((str(k).title(), str(v)) for k, v in (message.headers or {}).items()),
    ):
        if value:
            lines.append(f"{name}: {value}")
    return "\n".join(line.replace("\r", " ").replace("\n", " ") for line in lines)


def _address(item: Any) -> str:
    if isinstance(item, dict):
        address, name = str(item.get("address", "")), str(item.get("name", ""))
        return f"{name} <{address}>" if name and address else address or name
    return str(item)


provide_mail_readers(MailReaders(targets=_targets, parts=_parts))


# ---------------------------------------------------------------- list_plugins, set_plugin_settings


def masked(values: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """The settings as an admin sees them: every secret that is set, wherever the schema puts it, as the mask."""
    shown: dict[str, Any] = SettingsSchema(schema).masked(values)
    return shown


class PluginOperationOut(Closed):
    name: str
    summary: str
    op_class: str
    exposure: str = Field(description="what this tenant's agents meet: on, off")


class PluginOut(Closed):
    name: str
    version: str
    healthy: bool
    operations: list[PluginOperationOut]
    settings_schema: dict[str, Any] = Field(description="JSON Schema of the plugin's settings")
    settings: dict[str, Any] = Field(
        description="this tenant's settings; every secret that is set, wherever the schema puts it, shown as ********"
    )


class RefusedPluginOut(Closed):
    name: str
    reason: str = Field(description="why Oaken refused it, in Oaken's words")


class PluginsOut(Closed):
    plugins: list[PluginOut]
    sandbox: str = Field(description="bwrap: plugins run in an operating-system sandbox; none: without one")
    problem: str = Field(description="why no plugin could be loaded, if none could (empty otherwise)")
    refused: list[RefusedPluginOut] = Field(description="installed plugins Oaken refused to load, and why")


@operation(
    name="list_plugins",
    summary="The installed plugins: health, version, operations, settings schema and this tenant's settings.",
    input=Empty,
    output=PluginsOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
    role="ADMIN",
    callers=Callers.PERSONS,
)
def list_plugins(ctx: Context, data: Empty) -> PluginsOut:
    exposure = tenant_settings(ctx.tenant)
    listed = []
    for found in runtimes():
        operations = [
            PluginOperationOut(
                name=op.name, summary=op.summary, op_class=op.op_class.value, exposure=level_for(op, exposure)
            )
            for op in registry
            if op.plugin == found.name
        ]
        listed.append(
            PluginOut(
                name=found.name,
                version=found.version,
                healthy=found.healthy(),
                operations=operations,
                settings_schema=found.settings_schema,
                settings=masked(settings_of(ctx.tenant, found.name), found.settings_schema),
            )
        )
    refused = [RefusedPluginOut(name=name, reason=why) for name, why in sorted(status.refused.items())]
    return PluginsOut(plugins=listed, sandbox=status.sandbox, problem=status.problem, refused=refused)


class PluginSettingsIn(Closed):
    plugin: str = Field(min_length=1, max_length=40)
    settings: dict[str, Any] = Field(
        description=(
            "the plugin's settings; a secret (nested, in a list or a dict too) sent as ******** keeps the value "
            "stored at the same place (same keys, same list position); ********@<JSON pointer> keeps the stored "
            "secret at that place (a list item that moved)"
        )
    )


class PluginSettingsOut(Closed):
    plugin: str
    changed: list[str] = Field(
        description="the names of the settings that changed (server.password inside a model; a list named whole)"
    )
    settings: dict[str, Any]


def _plugin(ctx: Context, data: PluginSettingsIn) -> Runtime:
    found = runtime(data.plugin)
    if found is None:
        raise OakenError.not_found("plugin")
    return found


def _merged(ctx: Context, data: PluginSettingsIn) -> tuple[dict[str, Any], list[str]]:
    """The settings as they will be stored (a secret sent as the mask keeps its stored value, see
    apps.operations.plugin_secrets), checked against the plugin's schema, and the names of those that change."""
    found: Runtime = ctx.targets
    stored = settings_of(ctx.tenant, found.name)
    schema = SettingsSchema(found.settings_schema)
    try:
        merged = schema.kept(data.settings, stored)
    except SecretNotKept as missing:
        where = ".".join(str(part) for part in ("settings", *missing.where))
        raise OakenError.invalid(where, "has no stored secret to keep: type it again") from None
    error = first_error(PluginValidator(found.settings_schema), merged)
    if error is not None:
        loc = tuple(part for part in error["loc"] if part is not None)
        # only a setting the plugin's schema names is named: an unknown one is the caller's own text
        known = known_path(found.settings_schema, loc)
        where = dotted(("settings", *known))
        kind = error["type"]
        if kind == "extra_forbidden":
            message = f"holds {UNKNOWN_ARGUMENT}, not a setting of this plugin"
        elif kind == "missing":
            message = "is required"
        else:
            message = str(kind.message_template)
        raise OakenError.invalid(where, message)
    return merged, schema.changed(stored, merged)


def _settings_preview(ctx: Context, data: PluginSettingsIn) -> Preview:
    _, changed = _merged(ctx, data)
    said = words.listed(words.named(name.replace("_", " ").replace(".", " ")) for name in changed)
    return Preview(
        tuple(Change(f"{data.plugin}.{name}") for name in changed),
        summary=f"Change {words.count(len(changed), 'setting')} of the plugin {words.named(data.plugin)}"
        + (f": {said}." if changed else "."),
        title="Save these plugin settings?",
        verb="Save settings",
    )


@operation(
    name="set_plugin_settings",
    summary="Set this tenant's settings for a plugin, checked against the plugin's settings schema.",
    input=PluginSettingsIn,
    output=PluginSettingsOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    role="ADMIN",
    preview=_settings_preview,
    confirm=ALWAYS,
    targets=_plugin,
    callers=Callers.PERSONS,
)
def set_plugin_settings(ctx: Context, data: PluginSettingsIn) -> PluginSettingsOut:
    found: Runtime = ctx.targets
    merged, changed = _merged(ctx, data)
    store_settings(tenant=ctx.tenant, plugin=found.name, values=merged, now=ctx.now)
    for name in changed:  # the audit names the settings, never their values
        ctx.touch(f"{found.name}.{name}")
    return PluginSettingsOut(plugin=found.name, changed=changed, settings=masked(merged, found.settings_schema))
