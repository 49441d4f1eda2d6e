import os
import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = ("Create the superuser 'admin' if missing "
            "(password from GPULSE_ADMIN_PASSWORD, else generated and printed once).")

    def add_arguments(self, parser):
        parser.add_argument("--username", default="admin")

    def handle(self, username, **options):
        User = get_user_model()
        if User.objects.filter(username=username).exists():
            self.stdout.write(f"user {username!r} already exists; its password is unchanged")
            return
        password = os.environ.get("GPULSE_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
        try:
            # The settings' validators, as every other place a password is set runs them.
            validate_password(password, user=User(username=username))
        except ValidationError as exc:
            raise CommandError(f"GPULSE_ADMIN_PASSWORD is refused: {' '.join(exc.messages)} User {username!r} was"
                               " not created: set another, or unset it to have one generated.") from None
        user = User.objects.create_superuser(username, password=password)
        # Superusers pass every check anyway; the explicit grant documents intent.
        user.user_permissions.add(Permission.objects.get(codename="launch_benchmark"))
        if os.environ.get("GPULSE_ADMIN_PASSWORD"):
            self.stdout.write(f"created user {username!r} with the password from GPULSE_ADMIN_PASSWORD")
        else:
            self.stdout.write(f"created user {username!r} with password: {password}")
