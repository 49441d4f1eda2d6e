"""What another feature does when alerts fire or resolve, registered by that
feature (its AppConfig.ready), so alerts never imports it back.

The evaluator calls every registered hook with the transitions it recorded,
inside the transaction that records them: what a hook writes commits or rolls
back with them. A hook returns what to run once that transaction commits
(queueing work on a broker), or None. The Slurm drain is one
(dashboard/scheduler/hooks.py).
"""

from collections.abc import Callable
from dataclasses import dataclass

from dashboard.alerts.models import Rule

FIRES = ("fire", "fire_now")  # the evaluator's changes that make an alert firing
RESOLVES = "resolve"


@dataclass(frozen=True)
class Change:
    """One recorded transition of an alert."""

    alert_id: int
    rule: Rule | None  # None: the rule was disabled or deleted since the alert began
    node: str
    gpu: int | None
    change: str  # the evaluator's word for it: "fire", "fire_now", "resolve", "reset", ...
    reason: str  # the condition and the value

    @property
    def fired(self) -> bool:
        return self.change in FIRES

    @property
    def resolved(self) -> bool:
        return self.change == RESOLVES


TransitionHook = Callable[[list[Change]], Callable[[], None] | None]

_hooks: list[TransitionHook] = []


def register(hook: TransitionHook) -> None:
    """Add ``hook``; registering the same one again (a second ready()) changes nothing."""
    if hook not in _hooks:
        _hooks.append(hook)


def registered() -> tuple[TransitionHook, ...]:
    return tuple(_hooks)
