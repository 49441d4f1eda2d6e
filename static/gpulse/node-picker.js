// The launch form's node picker: a filter that narrows the list as one types, and the
// rank order of the ticked nodes. Without this script the boxes work as plain checkboxes
// (the filter stays hidden). Node names go in as text (textContent), never as markup.
"use strict";

(() => {
  const picker = document.getElementById("node-picker");
  if (!picker) return;
  const filter = document.getElementById("node-filter");
  const order = document.getElementById("rank-order");
  const choices = [...picker.querySelectorAll(".node-choice")];

  filter.hidden = false;
  filter.addEventListener("input", () => {
    const wanted = filter.value.trim().toLowerCase();
    for (const choice of choices) choice.hidden = !choice.dataset.node.toLowerCase().includes(wanted);
  });
  // Enter in the filter would submit the launch form.
  filter.addEventListener("keydown", (event) => { if (event.key === "Enter") event.preventDefault(); });

  // The browser submits ticked boxes in page order, and the job numbers its nodes in
  // that order; a ticked node the filter hides still counts.
  picker.addEventListener("change", () => {
    const ticked = choices.filter((choice) => choice.querySelector("input").checked);
    order.replaceChildren(...ticked.map((choice) => {
      const item = document.createElement("li");
      item.textContent = choice.dataset.node;
      return item;
    }));
  });
})();
