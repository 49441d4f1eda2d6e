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
