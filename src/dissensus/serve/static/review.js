// Keyboard shortcuts of the dissensus review page (no build step, no dependencies).
// 1-9 pick an option, n note, Enter resolve, j/k next/previous case, ? keys help.
(function () {
  if (window.__dissensusKeys) { return; }
  window.__dissensusKeys = true;
  function typing(el) {
    if (!el) { return false; }
    var tag = el.tagName;
    return tag === "TEXTAREA" || tag === "SELECT" || (tag === "INPUT" && el.type !== "radio" && el.type !== "checkbox");
  }
  function help() {
    var d = document.getElementById("keys-help");
    if (!d) { return; }
    if (d.open) { d.close(); } else { d.showModal(); }
  }
  // htmx keeps focus on an element with the same id across a swap: after a resolve
  // the next case must start with the keys live, not inside its note field.
  document.addEventListener("htmx:afterSettle", function () {
    var active = document.activeElement;
    if (active && typing(active)) { active.blur(); }
  });
  document.addEventListener("click", function (e) {
    if (e.target && e.target.closest && e.target.closest("[data-keys-toggle]")) { help(); }
  });
  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey) { return; }
    var el = e.target;
    if (typing(el)) {
      if (e.key === "Escape") { el.blur(); }
      return;
    }
    var form = document.getElementById("resolve-form");
    if (e.key >= "1" && e.key <= "9") {
      var radio = document.querySelector('input[name="decision"][data-key="' + e.key + '"]');
      if (radio) { radio.checked = true; radio.focus(); e.preventDefault(); }
    } else if (e.key === "n") {
      var note = document.getElementById("note");
      if (note) { note.focus(); e.preventDefault(); }
    } else if (e.key === "Enter") {
      if (form && el && el.tagName !== "A" && el.tagName !== "BUTTON") { e.preventDefault(); form.requestSubmit(); }
    } else if (e.key === "j" || e.key === "k") {
      var link = document.getElementById(e.key === "j" ? "next-link" : "prev-link");
      if (link) { e.preventDefault(); link.click(); }
    } else if (e.key === "?") {
      e.preventDefault(); help();
    }
  });
})();
