from django.core.management.base import BaseCommand, CommandError

from dashboard.alerts import delivery
from dashboard.alerts.formats import FORMATS, Event


class Command(BaseCommand):
    help = "Send a signed test event to URL exactly as an alert delivery would; exit 1 with the reason if it fails."

    def add_arguments(self, parser):
        parser.add_argument("url")
        parser.add_argument("--secret", default="", help="signing secret (default: empty)")
        parser.add_argument("--format", default="gpulse", choices=sorted(FORMATS), help="payload format")

    def handle(self, url, secret, format, **options):
        event = Event.test()
        result = delivery.send(url, secret, format, event, receiver="webhook_test")
        if not result.ok:
            raise CommandError(f"{url}: {result.describe()}")
        self.stdout.write(f"{url}: {result.describe()} (event {event.event_id})")
