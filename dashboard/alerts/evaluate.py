"""Alert evaluation, run by ingest once per tick.

Each (rule, node, gpu) target moves inactive → pending → firing → resolved.
Only targets that are pending or firing are kept in memory; the database is
written only when one changes, in bulk, and every change is a compare-and-set
on the Alert row (unique fingerprint): when two ingest processes evaluate the
same cluster, one wins each transition and the other adopts the result, so
each transition, and each notification, happens once. The hooks other
features register (dashboard/alerts/hooks.py: the Slurm drain of a rule with
"drain") see each recorded transition in the same transaction.
"""

import logging
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import connection, transaction
from django.db.models import Q

from dashboard.alerts import generation as rules_generation
from dashboard.alerts import hooks
from dashboard.alerts.conditions import (
    DESCRIBES_XID,
    INHIBITING,
    NAMES_OWNER,
    CompiledRule,
    down_detail,
    health_detail,
    node_value,
    owner_detail,
    xid_detail,
)
from dashboard.alerts.models import (
    FIRING,
    INACTIVE,
    PENDING,
    RESOLVED,
    SEVERITY_RANK,
    Alert,
    Rule,
    Silence,
    Transition,
    fingerprint,
)
from dashboard.live.state import ClusterState
from gpulse.ratelog import RateLimitedLog
from gpulse.status import UP
from gpulse.usage import NOBODY, Owner, owner

log = logging.getLogger(__name__)

# Seconds between reloads of rules, silences and the active alerts from the
# database, whatever else happens; an edit of a rule or silence reloads them at
# the next tick (dashboard/alerts/generation.py), and the alert rows another
# evaluator changed are read back within this.
RELOAD_EVERY = 5.0
QUIET = (INACTIVE, RESOLVED)
ERROR_LOG_EVERY = 60.0

# change: (old status in memory, new status)
CHANGES = {
    "start": (INACTIVE, PENDING),
    "fire": (PENDING, FIRING),
    "fire_now": (INACTIVE, FIRING),  # a rule without a `for` duration
    "reset": (PENDING, INACTIVE),
    "resolve": (FIRING, RESOLVED),
    "renotify": (FIRING, FIRING),  # firing while silenced or inhibited; that has ended
    "repeat": (FIRING, FIRING),
}


def firing_count() -> int:
    return Alert.objects.filter(status=FIRING).count()


def _dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


def _enqueue_dispatch(transition_ids: list[int]) -> None:
    from dashboard.alerts.tasks import dispatch

    for transition_id in transition_ids:
        try:
            # retry=False: a broker outage must not stall the ingest tick.
            dispatch.apply_async((transition_id,), retry=False)
        except Exception:
            log.exception("could not queue the notification of transition %s", transition_id)


@dataclass
class TargetState:
    status: str  # PENDING or FIRING
    since: float
    alert_id: int
    notified: bool = False
    last_notified: float | None = None
    # While firing: when its condition last turned false (the rule's keep_firing_for runs from it);
    # None while the condition holds. Kept in memory only, across reloads: an evaluator that
    # restarts holds the alert firing for a whole keep_firing_for again, never less.
    clear_since: float | None = None

    @classmethod
    def from_row(cls, row: Alert) -> "TargetState":
        return cls(
            status=row.status,
            since=row.status_since.timestamp(),
            alert_id=row.id,
            notified=row.notified,
            last_notified=row.last_notified_at.timestamp() if row.last_notified_at else None,
        )


@dataclass
class Proposal:
    key: tuple  # (rule id, node, gpu index or None)
    change: str
    value: float | None
    reason: str
    notify: bool = False
    since: float | None = None  # when the old status began
    repeat_interval: float = 0.0
    owner: Owner = NOBODY  # whose the GPU is, for the metrics that name it (NAMES_OWNER)


class AlertEvaluator:
    def __init__(self, clock=time.time, enqueue=None, reload_every: float = RELOAD_EVERY):
        self.clock = clock
        self._enqueue = enqueue or _enqueue_dispatch
        self._reload_every = reload_every
        self._loaded_at: float | None = None
        self._generation = 0  # of the rules and silences loaded (dashboard/alerts/generation.py)
        self._rules: dict[int, CompiledRule] = {}
        self._silences: list[tuple[Silence, float]] = []
        self._scopes: dict[str, tuple[tuple, tuple]] = {}
        self._active: dict[tuple, TargetState] = {}
        self._active_nodes: set[str] = set()
        self._firing: frozenset = frozenset()
        self._alert_ids: dict[tuple, int] = {}
        self._warned_nodes: set[str] = set()
        self._last_error_log = float("-inf")
        self.failing_since: float | None = None  # when the latest run of failed evaluations began
        self.last_error: str | None = None
        self.proposals_failed = 0  # proposals that could not be committed, even on their own
        self._proposal_errors = RateLimitedLog(log)

    # -- public -------------------------------------------------------------

    def evaluate(self, state: ClusterState, now: float | None = None, probes: dict | None = None,
                 health: dict | None = None) -> None:
        """Evaluate every enabled rule against ``state``; log and carry on on any error.

        ``probes``: node -> its latest busbw; ``health``: node -> its NodeHealth
        (dashboard.health.node_health), which the health metrics read.
        """
        now = self.clock() if now is None else now
        try:
            orphans = self._reload_if_due(now)
            proposals = self._propose(state, now, probes or {}, health or {})
            proposals.update(orphans)
            if proposals:
                self._commit_isolated(list(proposals.values()), now)
        except Exception as exc:
            if self.failing_since is None:
                self.failing_since = now
            self.last_error = f"{type(exc).__name__}: {exc}"[:300]
            # Once a minute at most: a database outage would otherwise log every tick.
            if now - self._last_error_log >= ERROR_LOG_EVERY:
                self._last_error_log = now
                log.exception("alert evaluation failed; ingest continues and retries every tick")
        else:
            self.failing_since = self.last_error = None

    def status(self) -> dict:
        """Return whether the latest evaluation ran through; ingest's heartbeat carries it to /healthz."""
        return {
            "ok": self.failing_since is None,
            "failing_since": self.failing_since,
            "error": self.last_error,
            "proposals_failed": self.proposals_failed,
        }

    def firing_targets(self) -> set[tuple[str, int | None]]:
        """Return the (node, gpu index or None) targets with a firing alert; safe from another thread."""
        return set(self._firing)

    def _index_active(self) -> None:
        self._active_nodes = {key[1] for key in self._active}
        # Rebuilt whole and swapped in, so a reader in another thread never sees it half-made.
        self._firing = frozenset((key[1], key[2]) for key, st in self._active.items() if st.status == FIRING)

    # -- loading ------------------------------------------------------------

    def _reload_if_due(self, now: float) -> dict:
        # One small query a tick: a rule or silence saved since the last load reloads at once.
        changed = rules_generation.current()
        if (self._loaded_at is not None and changed == self._generation
                and 0 <= now - self._loaded_at < self._reload_every):
            return {}
        rules = {r.id: CompiledRule.compile(r) for r in Rule.objects.filter(enabled=True)}
        silences = [(s, s.until.timestamp()) for s in Silence.objects.filter(until__gt=_dt(now))]
        active = {}
        for row in Alert.objects.filter(status__in=(PENDING, FIRING)):
            key = (row.rule_id, row.node, row.gpu)
            active[key] = TargetState.from_row(row)
            self._alert_ids[key] = row.id
            before = self._active.get(key)
            if before is not None and before.alert_id == row.id and before.status == row.status == FIRING:
                active[key].clear_since = before.clear_since
        self._rules, self._silences, self._active = rules, silences, active
        self._index_active()
        self._scopes.clear()
        self._warned_nodes.clear()
        self._loaded_at, self._generation = now, changed
        return self._orphans()

    def _orphans(self) -> dict:
        """End the alerts of rules that were disabled or no longer cover their target."""
        ended = {}
        for key, st in self._active.items():
            rule = self._rules.get(key[0])
            if rule is not None and rule.covers(key[1], key[2]):
                continue
            reason = "rule disabled or no longer covers this target"
            if st.status == PENDING:
                ended[key] = Proposal(key, "reset", None, reason, since=st.since)
            else:
                ended[key] = Proposal(key, "resolve", None, reason, notify=st.notified, since=st.since)
        return ended

    def _scope(self, node: str) -> tuple[tuple, tuple]:
        """Return (GPU-level rules, node-level rules) that apply to ``node``, cached per reload."""
        scope = self._scopes.get(node)
        if scope is None:
            rules = [r for r in self._rules.values() if r.rule.matches_node(node)]
            scope = (tuple(r for r in rules if r.gpu_level), tuple(r for r in rules if not r.gpu_level))
            self._scopes[node] = scope
        return scope

    # -- evaluation ---------------------------------------------------------

    def _propose(self, state: ClusterState, now: float, probes: dict, health: dict) -> dict:
        out: dict[tuple, Proposal] = {}
        for node in state.nodes.values():
            try:
                self._propose_node(node, now, probes, health.get(node.name), out)
            except Exception as exc:
                if node.name not in self._warned_nodes:
                    self._warned_nodes.add(node.name)
                    log.warning("alerts: skipping node %s, its sample cannot be evaluated: %r", node.name, exc)
        return out

    def _propose_node(self, node, now, probes, health, out):
        name, status = node.name, node.status
        gpu_rules, node_rules = self._scope(name)
        proposed_before = len(out)
        for rule in node_rules:
            if rule.metric == "probe.busbw":
                if status != UP:
                    continue
                value = probes.get(name)
            else:
                value = node_value(rule.metric, node, health)
            if value is None:
                continue
            if rule.test(value):
                detail = down_detail(node, now) if rule.metric == "node.down" else health_detail(rule.metric, health)
                self._when_true(rule, (rule.id, name, None), value, now, out, detail)
            else:
                self._when_false(rule, (rule.id, name, None), value, now, out, health_detail(rule.metric, health))
        # A stale or down node's last sample is not current: its GPU alerts keep
        # their state (never resolve on vanished data) and node.down takes over.
        if status != UP or not gpu_rules:
            return
        has_active = name in self._active_nodes
        inhibiting = self._inhibiting(name, node_rules, out) if has_active or len(out) > proposed_before else -1
        # (check, gpu) of the node's warn and fail findings; None while it has no health data.
        flagged = health.flagged() if health is not None and health.reported is not None else None
        for gpu in node.sample.get("gpus") or ():
            index = gpu.get("index")
            for rule in gpu_rules:
                if rule.gpu_index is not None and rule.gpu_index != index:
                    continue
                if rule.health_check is None:
                    value = rule.read(gpu)
                else:
                    value = None if flagged is None else int((rule.health_check, index) in flagged)
                if value is None:
                    continue
                key = (rule.id, name, index)
                if rule.test(value):
                    detail = xid_detail(gpu) if rule.metric in DESCRIBES_XID else ""
                    self._when_true(rule, key, value, now, out, detail, SEVERITY_RANK[rule.severity] <= inhibiting)
                elif has_active:
                    self._when_false(rule, key, value, now, out)
                # Only once there is something to tell: most ticks propose nothing.
                if rule.metric in NAMES_OWNER and key in out:
                    proposal = out[key]
                    proposal.owner = owner(gpu)
                    proposal.reason += owner_detail(proposal.owner)

    def _inhibiting(self, node: str, node_rules: tuple, out: dict) -> int:
        """The highest severity rank of the alerts firing on ``node`` after this tick's proposals
        whose metric stands for the whole node (INHIBITING), -1 for none: such an alert inhibits the
        notifications of the node's GPU alerts of the same or a lower severity (Alertmanager's
        inhibit_rules, equal: [node]), so one lost GPU pages once, as "Node failing" with its
        finding and action, not once per rule."""
        ranks = [-1]
        for rule in node_rules:
            if rule.metric not in INHIBITING:
                continue
            key = (rule.id, node, None)
            proposal = out.get(key)
            if proposal is not None:
                firing = CHANGES[proposal.change][1] == FIRING
            else:
                st = self._active.get(key)
                firing = st is not None and st.status == FIRING
            if firing:
                ranks.append(SEVERITY_RANK[rule.severity])
        return max(ranks)

    def _when_true(self, rule: CompiledRule, key, value, now, out, detail: str = "", inhibited: bool = False):
        """``detail``: what the value stands for (node.health's finding, an Xid, with the action), ends the reason.
        ``inhibited``: a node-level alert firing on the node stands for this one (_inhibiting): it notifies not."""
        st = self._active.get(key)
        if st is not None:
            st.clear_since = None
        described = rule.describe(value)
        muted = inhibited or self._silenced(key, now)
        if st is None:
            if rule.for_seconds <= 0:
                reason = described + detail
                out[key] = Proposal(key, "fire_now", value, reason, notify=not muted)
            else:
                out[key] = Proposal(key, "start", value, described + detail)
        elif st.status == PENDING:
            held = now - st.since
            if held >= rule.for_seconds:
                reason = f"{described}, held {held:.0f} s{detail}"
                out[key] = Proposal(key, "fire", value, reason, notify=not muted, since=st.since)
        elif not muted:
            if not st.notified:
                reason = f"{described}, no longer silenced or inhibited{detail}"
                out[key] = Proposal(key, "renotify", value, reason, True, st.since)
            elif st.last_notified is None or now - st.last_notified >= rule.repeat_interval:
                reason = f"{described}, still firing after {now - st.since:.0f} s{detail}"
                out[key] = Proposal(key, "repeat", value, reason, True, st.since, rule.repeat_interval)

    def _when_false(self, rule: CompiledRule, key, value, now, out, detail: str = ""):
        st = self._active.get(key)
        if st is None:
            return
        described = rule.describe(value)
        if st.status == PENDING:
            reason = f"{described}: condition false before its `for` elapsed{detail}"
            out[key] = Proposal(key, "reset", value, reason, since=st.since)
            return
        if rule.keep_firing_for > 0:
            # Held firing, as Prometheus' keep_firing_for: a condition that flaps is one alert.
            if st.clear_since is None:
                st.clear_since = now
            if now - st.clear_since < rule.keep_firing_for:
                return
            reason = f"{described}: back to normal for {now - st.clear_since:.0f} s{detail}"
        else:
            reason = f"{described}: back to normal{detail}"
        out[key] = Proposal(key, "resolve", value, reason, st.notified, st.since)

    def _silenced(self, key, now: float) -> bool:
        rule_id, node, gpu = key
        return any(until > now and s.matches(rule_id, node, gpu) for s, until in self._silences)

    # -- persistence --------------------------------------------------------

    def _commit_isolated(self, proposals: list[Proposal], now: float) -> None:
        """Commit the proposals in one bulk transaction; should it fail, commit each in its own,
        so one proposal that cannot be written never holds back the others."""
        if len(proposals) > 1:
            try:
                self._commit(proposals, now)
                return
            except Exception:
                log.debug("bulk alert commit failed; committing each proposal alone", exc_info=True)
        committed = 0
        for proposal in proposals:
            try:
                self._commit([proposal], now)
                committed += 1
            except Exception as exc:
                self.proposals_failed += 1
                self._proposal_errors.warning("alert %s for %s could not be committed: %r",
                                              proposal.change, proposal.key, exc)
        if not committed:
            # Whether the proposals or the database are at fault: a database that
            # does not answer raises here, and evaluation is reported failing.
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")

    def _commit(self, proposals: list[Proposal], now: float) -> None:
        token = uuid.uuid4().hex
        when = _dt(now)
        with transaction.atomic():
            # Ids of rows created here join self._alert_ids only once committed.
            created = self._ensure_rows([p.key for p in proposals if p.key not in self._alert_ids], when)
            alert_id = {p.key: created.get(p.key) or self._alert_ids[p.key] for p in proposals}
            groups: dict[tuple, list[Proposal]] = {}
            for p in proposals:
                groups.setdefault((p.change, p.notify, p.repeat_interval), []).append(p)
            for (change, notify, repeat_interval), members in groups.items():
                match, update = self._compare_and_set(change, notify, repeat_interval, when)
                Alert.objects.filter(match, id__in=[alert_id[p.key] for p in members]).update(claim=token, **update)
            won = set(Alert.objects.filter(claim=token).values_list("id", flat=True))
            winners = [p for p in proposals if alert_id[p.key] in won]
            Alert.objects.bulk_update(
                [Alert(id=alert_id[p.key], value=p.value) for p in winners if p.value is not None], ["value"]
            )
            rows = Transition.objects.bulk_create(
                [
                    Transition(
                        alert_id=alert_id[p.key],
                        old=CHANGES[p.change][0],
                        new=CHANGES[p.change][1],
                        reason=p.reason[:300],
                        value=p.value,
                        since=_dt(p.since) if p.since is not None else None,
                        created=when,
                        notify=p.notify,
                        owner_user=p.owner.user,
                        owner_job=p.owner.job,
                        owner_pod=p.owner.pod,
                    )
                    for p in winners
                ]
            )
            to_send = [row.id for row in rows if row.notify]
            if to_send:
                transaction.on_commit(lambda: self._enqueue(to_send))
            self._run_hooks([(p, alert_id[p.key]) for p in winners])
        self._alert_ids.update(created)
        for p in winners:
            self._apply(p, alert_id[p.key], now)
        losers = {alert_id[p.key] for p in proposals} - won
        if losers:
            self._adopt(losers)
        self._index_active()

    def _run_hooks(self, changes: list[tuple[Proposal, int]]) -> None:
        """Give the recorded transitions to each registered hook, inside their transaction, and run
        what each returns once it commits."""
        registered = hooks.registered()
        if not registered:
            return
        batch = []
        for p, alert_id in changes:
            compiled = self._rules.get(p.key[0])
            rule = compiled.rule if compiled is not None else None
            batch.append(hooks.Change(alert_id, rule, p.key[1], p.key[2], p.change, p.reason))
        for hook in registered:
            after_commit = hook(batch)
            if after_commit is not None:
                transaction.on_commit(after_commit)

    def _ensure_rows(self, keys: list[tuple], when: datetime) -> dict[tuple, int]:
        """Create the Alert rows ``keys`` lack (another evaluator may have made some); return their ids."""
        if not keys:
            return {}
        by_fp = {fingerprint(*key): key for key in keys}
        Alert.objects.bulk_create(
            [
                Alert(fingerprint=fp, rule_id=k[0], node=k[1], gpu=k[2], status=INACTIVE, status_since=when)
                for fp, k in by_fp.items()
            ],
            ignore_conflicts=True,
        )
        rows = Alert.objects.filter(fingerprint__in=list(by_fp)).values_list("id", "fingerprint")
        return {by_fp[fp]: pk for pk, fp in rows}

    @staticmethod
    def _compare_and_set(change: str, notify: bool, repeat_interval: float, when: datetime) -> tuple[Q, dict]:
        """Return (the status the row must still have, the update) for one kind of change."""
        if change == "start":
            return Q(status__in=QUIET), {"status": PENDING, "status_since": when, "fired_at": None, "resolved_at": None}
        if change in ("fire", "fire_now"):
            expected = Q(status=PENDING) if change == "fire" else Q(status__in=QUIET)
            return expected, {
                "status": FIRING,
                "status_since": when,
                "fired_at": when,
                "resolved_at": None,
                "notified": notify,
                "last_notified_at": when if notify else None,
            }
        if change == "reset":
            return Q(status=PENDING), {"status": INACTIVE, "status_since": when}
        if change == "resolve":
            return Q(status=FIRING, notified=notify), {"status": RESOLVED, "status_since": when, "resolved_at": when}
        if change == "renotify":
            return Q(status=FIRING, notified=False), {"notified": True, "last_notified_at": when}
        due = when - timedelta(seconds=repeat_interval)
        return Q(status=FIRING, notified=True, last_notified_at__lte=due), {"last_notified_at": when}

    def _apply(self, p: Proposal, alert_id: int, now: float) -> None:
        if p.change == "start":
            self._active[p.key] = TargetState(PENDING, now, alert_id)
        elif p.change in ("fire", "fire_now"):
            self._active[p.key] = TargetState(FIRING, now, alert_id, p.notify, now if p.notify else None)
        elif p.change in ("reset", "resolve"):
            self._active.pop(p.key, None)
        else:
            st = self._active[p.key]
            st.notified, st.last_notified = True, now

    def _adopt(self, alert_ids: set[int]) -> None:
        """Take the database's word for alerts another evaluator changed first."""
        found = set()
        for row in Alert.objects.filter(id__in=alert_ids):
            found.add(row.id)
            key = (row.rule_id, row.node, row.gpu)
            if row.status in (PENDING, FIRING):
                self._active[key] = TargetState.from_row(row)
            else:
                self._active.pop(key, None)
        gone = alert_ids - found
        for key in [k for k, pk in self._alert_ids.items() if pk in gone]:
            del self._alert_ids[key]
            self._active.pop(key, None)
