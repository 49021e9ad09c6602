"""What search keeps beside the mail: a full-text document per message, and its meaning as embedded chunks.

The document (`SearchDocument.document`) is written by PostgreSQL itself, by triggers on the mail tables
(migration 0001), so every path that stores or changes mail (import, sync, a draft saved to a server) keeps
it current without calling search. The chunks are written by the enricher (apps.search.indexing) in the
background; a message whose chunks are missing or stale has its `EmbeddingState.model` unset: it *waits*.
"""

from __future__ import annotations

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.db.models import Q
from django.utils import timezone
from pgvector.django import HalfVectorField

from apps.core.tenancy import TenantOwned


class EmbeddingModel(models.Model):
    """A model that embedded chunks, by provider, name, version and dimension: a change of any is a new model."""

    key = models.CharField(max_length=300, unique=True)
    dimensions = models.PositiveIntegerField()
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.key


class SearchDocument(TenantOwned):
    """One per message: its words for full-text search, and when they last changed."""

    id = None  # type: ignore[assignment]  # keyed by its message
    message = models.OneToOneField(
        "mail.Message", primary_key=True, on_delete=models.CASCADE, related_name="search_document"
    )
    document = SearchVectorField()
    changed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [GinIndex(fields=["document"], name="search_document_words")]


class EmbeddingState(TenantOwned):
    """One per message: which model its chunks were embedded with; unset while it waits for the enricher (new,
    changed, or embedded by another model).

    A narrow table of its own: kept on the document, every mark the enricher made rewrote the row holding
    the tsvector and re-entered its words into the GIN index (a sixth of the enricher's time at 100,000
    messages)."""

    id = None  # type: ignore[assignment]  # keyed by its message
    message = models.OneToOneField(
        "mail.Message", primary_key=True, on_delete=models.CASCADE, related_name="embedding_state"
    )
    model = models.ForeignKey(EmbeddingModel, null=True, blank=True, on_delete=models.SET_NULL)

    class Meta:
        indexes = [models.Index(fields=["tenant"], condition=Q(model__isnull=True), name="search_state_waiting")]


class Chunk(TenantOwned):
    """A piece of a message's text (quotes and signature stripped) and its embedding by one model.

    The vector column has no fixed dimension, so models of any dimension live side by side while a tenant
    is re-embedded; the indexes are on `embedding::halfvec(<dimensions>)` for one model (and, for a large
    tenant, one tenant: apps.search.vectors)."""

    message = models.ForeignKey("mail.Message", on_delete=models.CASCADE, related_name="+")
    model = models.ForeignKey(EmbeddingModel, on_delete=models.CASCADE, related_name="+")
    ordinal = models.PositiveSmallIntegerField()
    embedding = HalfVectorField()

    class Meta:
        indexes = [models.Index(fields=["tenant", "model"], name="search_chunk_tenant_model")]
        constraints = [
            models.UniqueConstraint(fields=["message", "model", "ordinal"], name="search_chunk_one_per_place")
        ]


class SavedView(TenantOwned):
    """A saved search of one person in one tenant (create_view): a query, or none (a filter-only view), and the
    filters `search` takes. Its account and label are ids, not keys: what they name is looked up in the caller's
    reach each time the view is used (apps.search.saved), so a view never reaches further than its user does now."""

    user = models.ForeignKey("accounts.User", on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=100)
    query = models.TextField(blank=True)
    mode = models.CharField(max_length=10, default="hybrid")
    account_id = models.UUIDField(null=True, blank=True)
    folder = models.CharField(max_length=500, blank=True)
    label_id = models.UUIDField(null=True, blank=True)
    sender = models.CharField(max_length=320, blank=True)
    recipient = models.CharField(max_length=320, blank=True)
    unread = models.BooleanField(null=True, blank=True)
    has_attachment = models.BooleanField(null=True, blank=True)
    after = models.DateField(null=True, blank=True)
    before = models.DateField(null=True, blank=True)
    tz = models.CharField(max_length=64, default="UTC")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user", "name"], name="saved_view_name_unique_per_person")
        ]

    def __str__(self) -> str:
        return self.name


class LabelDecision(TenantOwned):
    """What an AI label decided about one message, once per description version (the unique row makes retries,
    re-syncs and a second worker harmless): labelled or not, the score, the reason in fixed words, the examples
    that decided it, and whether putting the label on through the gate succeeded."""

    label = models.ForeignKey("mail.Label", on_delete=models.CASCADE, related_name="+")
    message = models.ForeignKey("mail.Message", on_delete=models.CASCADE, related_name="+")
    version = models.PositiveIntegerField()
    method = models.CharField(max_length=20)  # embeddings | model
    labelled = models.BooleanField()
    score = models.FloatField()
    reason = models.CharField(max_length=200)
    # ids of the messages (hand-labelled or refused examples) that decided it
    examples = models.JSONField(default=list, blank=True)
    # applied (the label went on), failed (the gate refused: `error` holds its code), or '' (not labelled)
    outcome = models.CharField(max_length=10, blank=True)
    error = models.CharField(max_length=40, blank=True)
    decided_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["label", "message", "version"], name="label_decision_once_per_version")
        ]
        indexes = [models.Index(fields=["tenant", "message"], name="label_decision_message")]
