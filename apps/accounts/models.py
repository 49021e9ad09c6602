"""People: one login (their e-mail address) across every tenant they belong to."""

from __future__ import annotations

from typing import Any, ClassVar

from django.contrib.auth.base_user import AbstractBaseUser, BaseUserManager
from django.contrib.auth.models import PermissionsMixin
from django.db import models
from django.utils import timezone

from apps.core.ids import new_id
from apps.core.tenancy import TenantOwned


def normalize_email(email: str) -> str:
    """E-mail addresses compare case-insensitively as logins."""
    return email.strip().lower()


class UserManager(BaseUserManager["User"]):
    use_in_migrations = True

    def create_user(self, email: str, password: str | None = None, **extra: Any) -> User:
        if not email:
            raise ValueError("email is required")
        user = self.model(email=normalize_email(email), **extra)
        user.set_password(password)
        user.save(using=self._db)
        return user

    def create_superuser(self, email: str, password: str | None = None, **extra: Any) -> User:
        extra.setdefault("is_staff", True)
        extra.setdefault("is_superuser", True)
        return self.create_user(email, password, **extra)

    def for_email(self, email: str) -> models.QuerySet[User]:
        """The person with this login, if any."""
        return self.filter(email=normalize_email(email))


class User(AbstractBaseUser, PermissionsMixin):
    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    email = models.EmailField(unique=True)
    is_active = models.BooleanField(default=True)
    is_staff = models.BooleanField(default=False)
    date_joined = models.DateTimeField(default=timezone.now)
    email_verified_at = models.DateTimeField(null=True, blank=True)
    # how the person is called (set_preferences): a new mailbox they connect sends under it ('' for none)
    name = models.CharField(max_length=200, blank=True, default="", db_default="")

    objects: ClassVar[UserManager] = UserManager()

    USERNAME_FIELD = "email"
    EMAIL_FIELD = "email"
    REQUIRED_FIELDS: ClassVar[list[str]] = []

    def __str__(self) -> str:
        return self.email

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.email = normalize_email(self.email)
        super().save(*args, **kwargs)


class Preferences(models.Model):
    """How the console behaves for one person, in every tenant they belong to (their own choice, nobody else's)."""

    user = models.OneToOneField(User, on_delete=models.CASCADE, primary_key=True, related_name="preferences")
    # opening a message in the console marks it read (mark_read, as the person's own act), as mail clients do
    mark_read_on_open = models.BooleanField(default=True)
    # the tenant the person used last (remember_tenant): where the console opens after sign-in while they still
    # belong to it (an id, checked against their memberships each time, so no tenant's row is held by it)
    last_tenant_id = models.UUIDField(null=True, blank=True)
    # waiting for reply (list_awaiting_reply): after how many days a thread they wrote last with no answer since
    # is listed (null: the AWAITING_REPLY_DAYS bound), and whether such a thread comes back to the inbox once
    # (the nudge, apps.worker.awaiting)
    awaiting_reply_days = models.PositiveSmallIntegerField(null=True, blank=True)
    awaiting_reply_nudge = models.BooleanField(default=False, db_default=False)
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"preferences of {self.user_id}"


class Signature(TenantOwned):
    """The text the console's compose form puts below what a person writes from one mail account (set_signature).
    It is never added to mail by itself: the console inserts it into the draft, where the person can still change
    it or take it out."""

    account = models.OneToOneField("mail.MailAccount", on_delete=models.CASCADE, related_name="+")
    text = models.TextField()
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"signature of {self.account_id}"
