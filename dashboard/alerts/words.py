"""Rules in words and units, as every alerts page says them: "GPU temperature above 85 °C for 5 min".

Alert reasons and webhook bodies keep ``Rule.condition_text()`` ("gpu.temp > 85 for
300 s"): receivers match on the metric's id, and a reason is history once written.
"""

from dashboard.alerts.conditions import COMPARE
from dashboard.alerts.models import RULE_METRIC, Rule

COMPARISON_WORDS = {
    ">": "above", ">=": "at or above", "<": "below", "<=": "at or below", "==": "equal to", "!=": "other than"
}
SPAN_UNITS = (("d", 86400), ("h", 3600), ("min", 60), ("s", 1))


def span(seconds: int) -> str:
    """Return a configured duration in its units: 300 → "5 min", 5400 → "1 h 30 min", 0 → "0 s"."""
    parts = []
    for unit, size in SPAN_UNITS:
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count} {unit}")
    return " ".join(parts) or "0 s"


def condition(rule: Rule) -> str:
    """Return what the rule tests, in words: "GPU temperature above 85 °C for 5 min"."""
    metric = RULE_METRIC.get(rule.metric)
    if metric is None:  # a metric this version does not know (a row written past the form)
        return rule.condition_text()
    words = f"throttle reason {rule.throttle_reason} present" if rule.metric == "gpu.throttle" else metric.words
    test = COMPARE[rule.comparison]
    if metric.flag and test(1, rule.threshold) and not test(0, rule.threshold):
        text = words
    else:
        unit = f" {metric.unit}" if metric.unit else ""
        legend = f" ({metric.legend})" if metric.legend else ""
        text = f"{words} {COMPARISON_WORDS[rule.comparison]} {rule.threshold:g}{unit}{legend}"
    return f"{text} for {span(rule.for_seconds)}" if rule.for_seconds else text


def summary(rule: Rule) -> str:
    """Return the whole rule in a sentence or two, for its page."""
    text = (f"Fires when {condition(rule)} on {rule.scope_text()}, {rule.severity}; "
            f"notifies again every {span(rule.repeat_interval)} while firing")
    if rule.keep_firing_for:
        text += f"; stays firing until the condition has been false for {span(rule.keep_firing_for)}"
    if rule.drain:
        text += f"; drains the node, and resumes it once resolved for {span(rule.resume_after)}"
    return text + ("." if rule.enabled else ". Disabled.")
