from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from dashboard.accounts.models import ApiToken


class Command(BaseCommand):
    help = "Issue an API token for USER and print it once (send it as 'Authorization: Bearer <token>')."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="a label to recognise the token by")

    def handle(self, username, name, **options):
        try:
            user = get_user_model().objects.get(username=username)
        except get_user_model().DoesNotExist:
            raise CommandError(f"no user named {username!r}") from None
        self.stdout.write(ApiToken.issue(user, name))
