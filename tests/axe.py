"""axe-core, the accessibility engine, run inside a page the browser tests opened.

`make axe` (run by `make test`) installs the version package-lock.json pins from
npm into node_modules/. The pages' Content-Security-Policy allows no inline
script, so a ``<script>`` tag carrying axe would be refused: ``page.evaluate``
goes through the DevTools protocol, which the policy does not govern.
"""

from pathlib import Path

from playwright.sync_api import Page

AXE_SOURCE = Path(__file__).resolve().parent.parent / "node_modules" / "axe-core" / "axe.min.js"

# WCAG 2.0, 2.1 and 2.2, levels A and AA, as issue 18 asks; and axe's best practices
# (landmarks, headings, table headers with a name), which the pages meet too.
# axe's color-contrast overlaps test_browser_pages' own contrast check; both stay, as each
# catches what the other does not: axe reads the value inside a form field, which the
# other (text nodes only) skips; the other refuses any translucent text, which axe blends.
RULES = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22a", "wcag22aa", "best-practice"]

RUN = """async tags => {
  const result = await axe.run(document, {runOnly: {type: "tag", values: tags}, resultTypes: ["violations"]});
  return result.violations.map(v => ({
    id: v.id, impact: v.impact, help: v.help, url: v.helpUrl,
    nodes: v.nodes.map(n => ({target: n.target.join(" "), summary: n.failureSummary})),
  }));
}"""


def axe_violations(page: Page) -> list[dict]:
    """The rules of RULES that axe finds broken on the page as it is now."""
    if not AXE_SOURCE.exists():
        raise AssertionError(f"{AXE_SOURCE} is missing: install axe-core from npm (make axe)")
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(AXE_SOURCE.read_text())
    return page.evaluate(RUN, RULES)


def describe(violations: list[dict], where: str) -> list[str]:
    """One paragraph a person can act on per broken rule: what, why, and the elements."""
    lines = []
    for violation in violations:
        lines.append(f"{where}: {violation['id']} ({violation['impact']}): {violation['help']} <{violation['url']}>")
        for node in violation["nodes"]:
            summary = " ".join(node["summary"].split())
            lines.append(f"    {node['target']}: {summary}")
    return lines
