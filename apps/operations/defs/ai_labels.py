"""AI labels: a label's description (set_label_description, always confirmed: its proposal shows what it would have
labelled over the last 30 days) and why a message carries the labels its descriptions put on (explain_labels). The
labelling itself runs in the background (apps.worker.ailabels) as the person who set the description."""

from __future__ import annotations

from pydantic import Field

from apps.core import words
from apps.core.changes import Change
from apps.mail import services
from apps.mail.models import Label, Message
from apps.mail.selectors import access_labels_by_ids
from apps.operations import forwarding
from apps.operations.context import Context
from apps.operations.defs.mail_organize import LabelResult
from apps.operations.defs.mail_read import label_out
from apps.operations.defs.shapes import Closed, Id, MailText
from apps.operations.registry import ALWAYS, Ceiling, OpClass, Preview, operation
from apps.operations.targets import MessageIn, reach, the_message
from apps.search import labelling


class SetDescriptionIn(Closed):
    label_id: Id
    description: str = Field(
        max_length=500,
        description="what mail belongs under the label, in a sentence ('invoices, receipts, order confirmations'); "
        "empty: the label labels nothing by itself any more",
    )


def _the_label(ctx: Context, data: SetDescriptionIn) -> Label:
    label = access_labels_by_ids([data.label_id], reach=reach(ctx), field="label_id")[0]
    forwarding.guard_labels(ctx, [label], "this label's description")
    return label


def _description_preview(ctx: Context, data: SetDescriptionIn) -> Preview:
    label: Label = ctx.targets
    description = " ".join(data.description.split())
    tried = labelling.try_description(label, description, ctx.now)
    after = {
        "description": description,
        "description_chars": len(description),
        "would_have_labelled_30_days": tried.labelled,
        "examples": list(tried.subjects),
    }
    name = words.named(label.name)
    if not description:
        summary = f"Clear the description of the label {name}: it will label no mail by itself."
    else:
        summary = (
            f"Set the description of the label {name}: new mail that matches it is labelled. Over the last "
            f"{labelling.PREVIEW_DAYS} days it would have labelled {words.count(tried.labelled, 'message')}."
        )
    summary += forwarding.changes(forwarding.using_labels(ctx.tenant, [label]))
    return Preview(
        (Change(str(label.pk), {"description": label.description}, after),),
        summary=summary,
        title="Set this label's description?" if description else "Clear this label's description?",
        verb="Set description" if description else "Clear description",
        lines=tuple(tried.subjects),
    )


@operation(
    name="set_label_description",
    summary="Set (or clear) a label's description: new mail that matches it is labelled, acting as the person who "
    "set it. Always confirmed; the proposal shows how many messages of the last 30 days it would have labelled.",
    input=SetDescriptionIn,
    output=LabelResult,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_description_preview,
    confirm=ALWAYS,
    targets=_the_label,
)
def set_label_description(ctx: Context, data: SetDescriptionIn) -> LabelResult:
    description = " ".join(data.description.split())
    label = services.set_label_description(act=ctx, label=ctx.targets, description=description)
    # the forwarding rules naming it forward by their terms as approved: theirs changed (an agent's change waits
    # for a person's approval; a person's is approved as they confirm it)
    for rule in forwarding.using_labels(ctx.tenant, [label]):
        forwarding.bind(ctx, rule)
    return LabelResult(label=label_out(label))


class ExampleOut(Closed):
    message_id: str
    subject: MailText


class DecisionOut(Closed):
    label_id: str
    label_name: MailText
    on: bool = Field(description="the message carries the label now")
    labelled: bool = Field(description="the label's description decided it belongs under the label")
    method: str = Field(description="embeddings, or model (the chat model the settings name)")
    score: float
    reason: str = Field(description="why, in fixed words")
    examples: list[ExampleOut] = Field(description="the examples that decided it (labelled by hand, or taken off)")
    outcome: str = Field(description="applied, failed (error says why) or empty (not labelled)")
    error: str
    decided_at: str


class ExplainOut(Closed):
    message_id: str
    decisions: list[DecisionOut]


@operation(
    name="explain_labels",
    summary="Why the AI labels (labels with a description) put their label on a message, or not: each decision "
    "with its score, reason and the examples that decided it.",
    input=MessageIn,
    output=ExplainOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.ON,
    targets=the_message,
    returns_mail=True,
)
def explain_labels(ctx: Context, data: MessageIn) -> ExplainOut:
    message: Message = ctx.targets
    return ExplainOut(
        message_id=str(message.pk),
        decisions=[DecisionOut(**d) for d in labelling.decisions_of(message)],
    )
