"""manage.py import_incidents FILE --nodes N --since ISO --until ISO: import a site's incident history."""

from django.core.management.base import BaseCommand, CommandError

from dashboard.reliability.importer import ImportRefused, import_csv


class Command(BaseCommand):
    help = ("Import incidents from a CSV (header start,node,component[,gpu,end,planned,cause]) and the window "
            "of node-hours it covers; one bad line imports nothing.")

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument("--nodes", help="how many nodes were watched over the window")
        parser.add_argument("--since", help="the window's start (ISO 8601)")
        parser.add_argument("--until", help="the window's end (ISO 8601)")

    def handle(self, *args, **options):
        try:
            with open(options["file"], "rb") as source:
                data = source.read()
        except OSError as exc:
            raise CommandError(f"cannot read {options['file']}: {exc.strerror}") from None
        try:
            result = import_csv(data, options["nodes"], options["since"], options["until"])
        except ImportRefused as exc:
            raise CommandError(f"nothing imported: {exc}") from None
        self.stdout.write(f"imported {result['incidents']} incidents ({result['planned']} planned) and "
                          f"{result['node_hours']:g} node-hours watched")
