// The launch form's node picker: a filter that narrows the list as one types, the
// rank order of the ticked nodes, and the question about held nodes, shown while a ticked
// node is held. Without this script the boxes work as plain checkboxes (the filter stays
// hidden) and the server asks on the launch. Node names go in as text (textContent), never as markup.
"use strict";

(() => {
  const picker = document.getElementById("node-picker");
  if (!picker) return;
  const filter = document.getElementById("node-filter");
  const order = document.getElementById("rank-order");
  const heldConfirm = document.getElementById("held-confirm"); // rendered only when a listed node is held
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
  const ticked = () => choices.filter((choice) => choice.querySelector("input").checked);

  // Ask only while a ticked node is held. A confirmation is for the nodes it was given
  // for: hiding the question withdraws it.
  function askAboutHeld() {
    if (!heldConfirm) return;
    const asking = ticked().some((choice) => choice.classList.contains("held"));
    if (!asking) heldConfirm.querySelector("input[type=checkbox]").checked = false;
    heldConfirm.hidden = !asking;
  }

  picker.addEventListener("change", (event) => {
    if (heldConfirm && heldConfirm.contains(event.target)) return; // the answer, not a node
    if (order) order.replaceChildren(...ticked().map((choice) => {
      const item = document.createElement("li");
      item.textContent = choice.dataset.node;
      return item;
    }));
    askAboutHeld();
  });
  askAboutHeld(); // a launch sent back, or "run again", may come with held nodes ticked
})();
