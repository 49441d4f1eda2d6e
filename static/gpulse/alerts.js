// The alerts page is rendered on the server; reload it every 15 s to stay
// current, but never while someone is filling in a form on it.
(function () {
  const RELOAD_MS = 15000;
  setInterval(function () {
    const active = document.activeElement;
    const editing = active && active.form;
    const typed = Array.from(document.querySelectorAll("form input[type=text], form input[type=number], form textarea"))
      .some(function (field) { return field.value !== field.defaultValue; });
    if (!editing && !typed) window.location.reload();
  }, RELOAD_MS);
})();
