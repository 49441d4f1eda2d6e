"""A counter that moves whenever a rule or a silence is saved, deleted or expired.

Ingest's evaluator keeps rules and silences in memory and reads this one
row each tick: when it moved, it reloads them at once, so a silence created
just before a fault mutes that fault's notification. The counter is bumped
in the transaction that changes the rule or silence (a signal, or
``bump()`` after a queryset update, which sends no signal), so an evaluator
that sees the new value also sees the change.
"""

from django.db.models import F
from django.db.models.signals import post_delete, post_save

from dashboard.alerts.models import Rule, RulesGeneration, Silence

ROW = 1


def bump() -> None:
    if not RulesGeneration.objects.filter(pk=ROW).update(value=F("value") + 1):
        # A database flushed since the migration made it (a test's): start again.
        RulesGeneration.objects.get_or_create(pk=ROW, defaults={"value": 1})


def current() -> int:
    """The counter's value: 0 before anything was ever bumped."""
    return RulesGeneration.objects.filter(pk=ROW).values_list("value", flat=True).first() or 0


def _changed(sender, **kwargs) -> None:
    bump()


def connect() -> None:
    for model in (Rule, Silence):
        post_save.connect(_changed, sender=model, dispatch_uid=f"rules-generation-save-{model.__name__}")
        post_delete.connect(_changed, sender=model, dispatch_uid=f"rules-generation-delete-{model.__name__}")
