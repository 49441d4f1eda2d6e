import hashlib
import secrets

from django.conf import settings
from django.db import models


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class ApiToken(models.Model):
    """A bearer token for scripts; only its hash is stored."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, blank=True)
    token_hash = models.CharField(max_length=64, unique=True)
    created = models.DateTimeField(auto_now_add=True)
    last_used = models.DateTimeField(null=True, blank=True)

    @classmethod
    def issue(cls, user, name: str = "") -> str:
        """Create a token for ``user`` and return its clear text (shown once)."""
        token = "gpl_" + secrets.token_urlsafe(32)
        cls.objects.create(user=user, name=name, token_hash=hash_token(token))
        return token

    def __str__(self):
        return f"{self.user} {self.name or self.token_hash[:8]}"


class AuditEvent(models.Model):
    """One change someone made: kept even when the user is deleted (username is copied)."""

    created = models.DateTimeField(auto_now_add=True, db_index=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    username = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=64, help_text="e.g. benchmark.launch, rule.update, silence.create")
    target = models.CharField(max_length=300, help_text="what it was done to, e.g. 'job 12'")
    detail = models.JSONField(default=dict, blank=True)
    ip = models.GenericIPAddressField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]

    def __str__(self):
        return f"{self.created:%Y-%m-%d %H:%M:%S} {self.username or '-'} {self.action} {self.target}"
