"use strict";
// The admin's tool picker: a filter box over the grouped checkboxes (name and description);
// ticked tools always stay visible, a group with nothing to show is hidden.
(function () {
  function setup(picker) {
    const filter = picker.querySelector(".tool-filter");
    if (!filter) {
      return;
    }
    filter.hidden = false;
    filter.addEventListener("input", function () {
      const words = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
      picker.querySelectorAll(".tool-group").forEach(function (group) {
        let shown = 0;
        group.querySelectorAll(".tool-option").forEach(function (option) {
          const text = option.textContent.toLowerCase();
          const box = option.querySelector("input");
          const match = (box && box.checked) || words.every(function (w) { return text.includes(w); });
          option.hidden = !match;
          shown += match ? 1 : 0;
        });
        group.hidden = shown === 0;
      });
    });
    filter.addEventListener("keydown", function (event) {
      if (event.key === "Enter") {
        event.preventDefault(); // filtering, not submitting the form
      }
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll(".tool-picker").forEach(setup);
  });
})();
