"""The catalogue of node-health checks (gpulse.health): complete, traceable, and the same in the docs."""

from pathlib import Path

import pytest

from gpulse import health

ROOT = Path(__file__).resolve().parent.parent


def test_every_check_has_a_unique_id_a_scope_a_rule_a_source_and_both_actions():
    assert len(set(health.CHECK_IDS)) == len(health.CHECKS)
    for check in health.CHECKS:
        assert check.scope in (health.GPU, health.NODE, health.CLUSTER), check.id
        assert all((check.title, check.rule, check.source, check.warn_action, check.fail_action)), check.id


@pytest.mark.parametrize("doc", ["docs/health.md", "docs/ARCHITECTURE.md"])
def test_the_docs_name_every_check(doc):
    text = (ROOT / doc).read_text()
    assert [check_id for check_id in health.CHECK_IDS if f"`{check_id}`" not in text] == []


def test_the_health_reference_gives_every_checks_rule_source_and_action_as_the_catalogue_has_them():
    reference = (ROOT / "docs" / "health.md").read_text()
    for check in health.CHECKS:
        assert check.rule in reference and check.source in reference, check.id
        assert check.fail_action in reference or check.warn_action in reference, check.id


def test_the_action_comes_from_the_catalogue_and_only_for_warn_and_fail():
    assert health.action("row_remap", health.WARN) == health.BY_ID["row_remap"].warn_action
    assert health.action("row_remap", health.FAIL) == health.BY_ID["row_remap"].fail_action
    assert health.action("row_remap", health.UNKNOWN) == ""
    assert health.action("row_remap", health.PASS) == ""
    assert health.action("no_such_check", health.FAIL) == ""


@pytest.mark.parametrize("statuses, expected", [
    ([], health.HEALTHY),
    ([health.UNKNOWN], health.HEALTHY),
    ([health.UNKNOWN, health.WARN], health.DEGRADED),
    ([health.WARN, health.FAIL, health.WARN], health.FAILING),
])
def test_the_verdict_is_the_worst_finding_and_unknown_alone_is_not_a_fault(statuses, expected):
    assert health.verdict(statuses) == expected
