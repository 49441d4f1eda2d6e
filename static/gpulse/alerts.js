// The alerts page is rendered on the server. Every 15 s its live part (#alerts-live: the rule
// groups, resolved alerts, silences) is fetched again and swapped in, keeping which groups are
// open and the scroll position. The silence form is not part of it, so what is typed there stays.
(function () {
  const REFRESH_MS = 15000;
  const S = window.GpulseLiveSection;

  async function refresh() {
    const fresh = await S.fetchPart(window.location.href, "alerts-live");
    const live = document.getElementById("alerts-live");
    if (!fresh || !live) return;
    const opened = new Map(Array.from(live.querySelectorAll("details[data-rule]"), (group) => [group.dataset.rule, group.open]));
    fresh.querySelectorAll("details[data-rule]").forEach((group) => {
      if (opened.has(group.dataset.rule)) group.open = opened.get(group.dataset.rule);
    });
    const x = window.scrollX, y = window.scrollY;
    live.replaceWith(fresh);
    window.scrollTo(x, y);
  }

  S.every(REFRESH_MS, refresh);
})();
