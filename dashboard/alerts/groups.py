"""The alerts page's groups: one per rule with firing or pending alerts, each showing a page of them.

One broad rule can fire on every GPU of a cluster (1,145 rows made one flat
44,500-px table), so the page shows each rule's counts and its oldest alert,
and at most GROUP_ROWS of its alerts at a time. Every group's first page
comes from one query (a row number per rule), so the page costs the same
number of queries however many rules and alerts there are.
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Case, Count, Min, Q, Value, When, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from dashboard.alerts.models import FIRING, PENDING, SEVERITY_RANK, Alert, Rule
from dashboard.alerts.notices import attach_notices, with_latest_notice
from dashboard.alerts.reasons import attach_reasons, with_reason

GROUP_ROWS = 50
ACTIVE = (PENDING, FIRING)
# Within a group: firing before pending, each the oldest first.
ROW_ORDER = (Case(When(status=FIRING, then=Value(0)), default=Value(1)), "status_since", "id")


@dataclass
class RuleGroup:
    rule: Rule
    firing: int
    pending: int
    oldest: datetime  # when its longest-standing alert took its status
    age: timedelta
    page: int = 1
    open: bool = False  # shown open: the group someone is paging through
    alerts: list[Alert] = field(default_factory=list)  # this page's

    @property
    def count(self) -> int:
        return self.firing + self.pending

    @property
    def pages(self) -> int:
        return -(-self.count // GROUP_ROWS)

    @property
    def first(self) -> int:
        """The number of this page's first alert, from 1."""
        return (self.page - 1) * GROUP_ROWS + 1

    @property
    def last(self) -> int:
        return min(self.page * GROUP_ROWS, self.count)


def rule_groups(paged_rule: int | None = None, page: int = 1) -> list[RuleGroup]:
    """Return the groups, the most severe first, then by name, so a refresh never reorders them.

    ``paged_rule``'s group shows its ``page`` (brought within its pages), the others their first.
    """
    now = timezone.now()
    rules = Rule.objects.filter(alerts__status__in=ACTIVE).annotate(
        firing=Count("alerts", filter=Q(alerts__status=FIRING)),
        pending=Count("alerts", filter=Q(alerts__status=PENDING)),
        oldest=Min("alerts__status_since"),
    )
    groups = {r.id: RuleGroup(r, r.firing, r.pending, r.oldest, now - r.oldest) for r in rules}
    ranked = Alert.objects.filter(status__in=ACTIVE).annotate(
        row=Window(RowNumber(), partition_by="rule_id", order_by=ROW_ORDER)
    )
    alerts = list(with_reason(with_latest_notice(ranked.filter(row__lte=GROUP_ROWS).order_by("rule_id", "row"))))
    paged = groups.get(paged_rule) if paged_rule is not None else None
    if paged is not None:
        paged.page, paged.open = min(max(page, 1), paged.pages), True
        alerts = [a for a in alerts if a.rule_id != paged.rule.id]
        paged_rows = Alert.objects.filter(status__in=ACTIVE, rule=paged.rule).order_by(*ROW_ORDER)
        alerts += with_reason(with_latest_notice(paged_rows))[paged.first - 1:paged.last]
    for alert in alerts:
        group = groups.get(alert.rule_id)
        if group is None:  # its rule began firing between the two queries: it shows at the next refresh
            continue
        alert.rule, alert.age = group.rule, now - alert.status_since
        group.alerts.append(alert)
    attach_notices([a for g in groups.values() for a in g.alerts if a.status == FIRING])
    attach_reasons([a for g in groups.values() for a in g.alerts])
    return sorted(groups.values(), key=lambda g: (-SEVERITY_RANK.get(g.rule.severity, 0), g.rule.name))
