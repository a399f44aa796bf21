// Keyboard of the dissensus review page (no build step, no dependencies).
//
// Keys act only when no text field has the focus (Esc leaves a field) and the keys help
// is closed (while it is open only ? and Esc act, closing it):
//   1-9 pick an option, 0 clear the pick, o type another answer (which replaces the
//   pick: the option is unchecked as soon as the field holds text), n note, Enter
//   resolve, j/k next/previous
//   case (on the queue, j opens the first row nobody else claimed: its link is the
//   page's next-link), c claim, r give up your claim, u u undo your last resolution (the first u asks,
//   naming the case; a second u within UNDO_MS undoes, any other key cancels), a audit an
//   automatic decision, ? keys help. The undo button (and so u u) goes when the undo
//   window ends (the page says how many milliseconds are left of it), and a claim shown
//   on the page ends there when it expires.
//
// Typing ahead: while a page is loading (a resolve, a j/k move) keys are queued, not
// lost and not typed into a field; once the next page has settled they are replayed in
// order against it, except the keys that send a form (Enter, c, r, u: WRITES), which are
// dropped: they were pressed before the page they would act on was shown, and would
// resolve, claim, give up or undo on a case nobody has seen yet. A resolve blurs the note first, and every page settles with the
// focus on its heading (so a screen reader names the case it moved to), never in a
// field, so a key pressed right after Enter acts on the next case. Once a
// replayed key (n, o) has put the focus in a text field, the keys queued after it are
// typed into that field, not acted on; a queued Enter is then dropped, not sent.
(function () {
  if (window.__dissensusKeys) { return; }
  window.__dissensusKeys = true;
  var busy = false;
  var pending = [];
  var UNDO_MS = 5000;
  var undoAsked = null;  // the timer of a u waiting for its second u
  // The keys that send a form: never replayed from the queue (see the top).
  var WRITES = { "Enter": true, "c": true, "r": true, "u": true };

  function typing(el) {
    if (!el || el === document.body) { return false; }
    var tag = el.tagName;
    if (el.isContentEditable) { return true; }
    return tag === "TEXTAREA" || tag === "SELECT" ||
      (tag === "INPUT" && el.type !== "radio" && el.type !== "checkbox" &&
       el.type !== "submit" && el.type !== "button" && el.type !== "hidden");
  }
  function leaveField() {
    var active = document.activeElement;
    if (active && typing(active)) { active.blur(); }
  }
  function help() {
    var d = document.getElementById("keys-help");
    if (!d) { return; }
    if (d.open) { d.close(); } else { d.showModal(); }
  }
  function helpOpen() {
    var d = document.getElementById("keys-help");
    return !!(d && d.open);
  }
  // The page's heading takes the focus once a page has been swapped in: a screen reader
  // reads out the case moved to, and keys act (a heading is no text field).
  function toHeading() {
    var heading = document.querySelector("main h1");
    if (heading) { heading.focus({ preventScroll: true }); }
  }
  // u asks before it undoes: the first names the case, a second within UNDO_MS undoes.
  function undoSays(text) {
    var box = document.getElementById("undo-confirm");
    if (box) { box.textContent = text; }
  }
  function cancelUndo() {
    if (undoAsked === null) { return; }
    clearTimeout(undoAsked);
    undoAsked = null;
    undoSays("");
  }
  function undo() {
    var form = document.getElementById("undo-form");
    if (!form) { return false; }
    if (undoAsked !== null) {
      cancelUndo();
      form.requestSubmit();
      return true;
    }
    var ref = form.querySelector('input[name="review_id"]');
    undoSays("press u again to undo your resolution of " + (ref ? ref.value : "your last case"));
    undoAsked = setTimeout(cancelUndo, UNDO_MS);
    return true;
  }
  // The undo button goes when its window ends (the page says how many milliseconds are
  // left): pressed later it could only be refused, on the page of the case it names.
  function expireUndo() {
    var form = document.getElementById("undo-form");
    var left = form ? parseInt(form.getAttribute("data-left-ms"), 10) : NaN;
    if (isNaN(left)) { return; }
    setTimeout(function () {
      if (!form.isConnected) { return; }  // another page is shown by now
      var focused = form.contains(document.activeElement);
      cancelUndo();
      var box = document.getElementById("undo-confirm");
      if (box) { box.remove(); }
      form.remove();
      if (focused) { toHeading(); }
    }, Math.max(0, left));
  }
  // A claim shown on the page ends there when it expires (the page says how many
  // milliseconds are left of it): the case is open again, and the holder's "give up
  // claim" goes.
  function expireClaim() {
    var status = document.getElementById("case-status");
    var left = status ? parseInt(status.getAttribute("data-claim-left-ms"), 10) : NaN;
    if (isNaN(left)) { return; }
    setTimeout(function () {
      if (!status.isConnected) { return; }  // another page is shown by now
      var open = document.createElement("b");
      open.textContent = "open";
      status.replaceChildren(open, document.createTextNode(" (the claim ended)"));
      status.removeAttribute("data-claim-left-ms");
      var release = document.getElementById("release-form");
      if (release) {
        var focused = release.contains(document.activeElement);
        release.remove();
        if (focused) { toHeading(); }
      }
    }, Math.max(0, left));
  }
  function clickById(id) {
    var el = document.getElementById(id);
    if (!el) { return false; }
    el.click();
    return true;
  }
  function submitById(id) {
    var form = document.getElementById(id);
    if (!form) { return false; }
    form.requestSubmit();
    return true;
  }
  function start() {
    busy = true;
    cancelUndo();
    leaveField();
    document.documentElement.setAttribute("data-busy", "1");
  }
  function settled() {
    restoreDraft();
    busy = false;
    document.documentElement.removeAttribute("data-busy");
    leaveField();
    toHeading();
    while (pending.length && !busy) {
      var field = document.activeElement;
      if (typing(field)) {
        // A replayed n or o put the focus in a field: the keys after it are its text,
        // never commands (a note "just unusual" must not move on, undo, claim...). An
        // Enter stops the replay there: the reviewer sees the text before sending it.
        var key = pending.shift();
        if (key.length !== 1 || field.tagName === "SELECT") { pending = []; break; }
        typeInto(field, key);
        continue;
      }
      var next = pending.shift();
      if (WRITES[next]) { continue; }  // typed before this page was shown: never sent
      act(next, document.body);
    }
  }
  function typeInto(field, key) {
    if (typeof field.setRangeText === "function" && field.selectionStart !== null) {
      field.setRangeText(key, field.selectionStart, field.selectionEnd, "end");
    } else {
      field.value += key;
    }
    field.dispatchEvent(new Event("input", { bubbles: true }));
  }
  function failed() {
    busy = false;
    pending = [];
    document.documentElement.removeAttribute("data-busy");
  }

  // Open the folded form around el (the audit form of an automatic decision); true
  // when it was folded.
  function unfold(el) {
    var folded = el.closest("details");
    if (!folded || folded.open) { return false; }
    folded.open = true;
    return true;
  }

  // One key, outside any text field; true when it was used. Any key but u cancels a u
  // waiting for its second; while the keys help is open only ? acts (hiding it).
  function act(key, el) {
    if (key !== "u") { cancelUndo(); }
    if (helpOpen() && key !== "?") { return false; }
    if (key >= "1" && key <= "9") {
      var radio = document.querySelector('input[name="decision"][data-key="' + key + '"]');
      if (!radio) { return false; }
      unfold(radio);
      radio.checked = true;
      radio.dispatchEvent(new Event("change", { bubbles: true }));
      return true;
    }
    if (key === "0") {
      var form = draftForm();
      if (!form || !form.querySelector('input[name="decision"]:checked')) { return false; }
      unpick(form);
      saveDraft();
      return true;
    }
    switch (key) {
      case "n": {
        var note = document.getElementById("note") || document.getElementById("audit-note");
        if (!note) { return false; }
        unfold(note);
        note.focus();
        return true;
      }
      case "o": {
        var other = document.getElementById("other-decision");
        if (!other) { return false; }
        var folded = other.closest("details");  // the audit form of an automatic decision
        if (folded) { folded.open = true; }
        other.focus();
        return true;
      }
      case "Enter":
        if (el && (el.tagName === "A" || el.tagName === "BUTTON" || el.tagName === "SUMMARY")) { return false; }
        if (submitById("resolve-form")) { return true; }
        // The audit form of an automatic decision: Enter opens it, then submits it.
        var auditForm = document.getElementById("audit-form");
        if (!auditForm) { return false; }
        if (unfold(auditForm)) { return true; }
        auditForm.requestSubmit();
        return true;
      case "j": return clickById("next-link");
      case "k": return clickById("prev-link");
      case "c": return submitById("claim-form");
      case "r": return submitById("release-form");
      case "u": return undo();
      case "a": {
        var audit = document.getElementById("audit");
        if (!audit) { return false; }
        audit.open = true;
        var field = document.getElementById("audit-note");
        if (field) { field.focus(); }
        return true;
      }
      case "?": help(); return true;
      default: return false;
    }
  }

  // Refusals and failures are shown, never dropped. A page the server rendered for an
  // error (a refused form with its reason, 503 when the journal is busy) is swapped in
  // like any other; any other error answer (JSON, plain text) leaves the page as it is
  // and says what the server said in an alert; so does a request that never reached the
  // server. The form keeps what was typed either way.
  function alertText(text) {
    var box = document.getElementById("page-alert");
    if (!box) {
      box = document.createElement("p");
      box.id = "page-alert";
      box.className = "error page-alert";
      box.setAttribute("role", "alert");
      document.body.appendChild(box);
    }
    box.textContent = text;
  }
  function posted(detail) {
    var verb = detail && detail.requestConfig && detail.requestConfig.verb;
    return verb && verb.toLowerCase() !== "get";
  }
  function serverSaid(xhr) {
    var body = xhr.responseText || "";
    try {
      var parsed = JSON.parse(body);
      if (parsed && typeof parsed.error === "string") { return parsed.error; }
      if (parsed && parsed.error && typeof parsed.error.message === "string") { return parsed.error.message; }
    } catch (e) { /* not JSON */ }
    body = body.replace(/\s+/g, " ").trim();
    return body.length > 300 ? body.slice(0, 300) + "…" : body || xhr.statusText || "";
  }
  document.addEventListener("htmx:beforeSwap", function (e) {
    var xhr = e.detail.xhr;
    if (!xhr || xhr.status < 400) { return; }
    var type = (xhr.getResponseHeader("Content-Type") || "").toLowerCase();
    if (type.indexOf("text/html") === 0) {
      e.detail.shouldSwap = true;
      e.detail.isError = false;
      return;
    }
    e.detail.shouldSwap = false;
    e.detail.isError = true;
    var said = serverSaid(xhr);
    alertText((posted(e.detail) ? "not saved: " : "") + "the server answered " + xhr.status +
      (said ? " (" + said + ")" : "") + "; try again");
  });
  document.addEventListener("htmx:sendError", function (e) {
    alertText((posted(e.detail) ? "not saved: " : "") + "the server could not be reached; try again");
  });
  document.addEventListener("htmx:timeout", function (e) {
    alertText((posted(e.detail) ? "not saved: " : "") + "the server did not answer in time; try again");
  });

  // What the reviewer typed on a case's resolve form (or an audit's form) is kept in this
  // browser's session storage (per reviewer and case) until it is sent and accepted from
  // this page, so a session that ended, a server restart or a reload loses nothing: the
  // page fills its empty fields from it whenever it is shown to the same reviewer
  // (unfolding a folded audit form). Another reviewer signed in in the same tab never
  // sees it, and logging out (the logout form) drops every draft of the tab.
  var DRAFT = "dissensus-draft:";
  function reviewer() {
    var who = document.getElementById("reviewer");
    return who ? who.getAttribute("data-reviewer") : null;
  }
  // The storage key of the draft of case ``id`` of the reviewer signed in (null when the
  // page names nobody: nothing is kept then).
  function draftKey(id) {
    var who = reviewer();
    return who ? DRAFT + encodeURIComponent(who) + ":" + id : null;
  }
  function dropDrafts() {
    try {
      for (var i = sessionStorage.length - 1; i >= 0; i--) {
        var key = sessionStorage.key(i);
        if (key && key.indexOf(DRAFT) === 0) { sessionStorage.removeItem(key); }
      }
    } catch (e) { /* storage unavailable: nothing kept */ }
  }
  var FORMS = ["resolve-form", "audit-form"];
  function draftForm() {
    for (var i = 0; i < FORMS.length; i++) {
      var form = document.getElementById(FORMS[i]);
      if (form) { return form; }
    }
    return null;
  }
  function draftCase() {
    var title = document.getElementById("case-title");
    if (!title || !draftForm()) { return null; }
    return title.getAttribute("data-review-id");
  }
  // Uncheck the option picked on ``form`` (0, or another answer typed).
  function unpick(form) {
    var radios = form.querySelectorAll('input[name="decision"]');
    for (var i = 0; i < radios.length; i++) { radios[i].checked = false; }
  }
  function named(form, name) {
    return form.querySelector('input[name="' + name + '"]:not([type="radio"])');
  }
  function saveDraft() {
    var key = draftKey(draftCase());
    if (!draftCase() || !key) { return; }
    var form = draftForm();
    var picked = form.querySelector('input[name="decision"]:checked');
    var other = named(form, "other");
    var note = named(form, "note");
    var draft = {
      decision: picked ? picked.value : "",
      other: other ? other.value : "",
      note: note ? note.value : ""
    };
    try {
      if (draft.decision || draft.other || draft.note) {
        sessionStorage.setItem(key, JSON.stringify(draft));
      } else {
        sessionStorage.removeItem(key);
      }
    } catch (e) { /* storage unavailable: nothing kept */ }
  }
  function restoreDraft() {
    var key = draftKey(draftCase());
    if (!draftCase() || !key) { return; }
    var draft = null;
    try { draft = JSON.parse(sessionStorage.getItem(key) || "null"); } catch (e) { return; }
    if (!draft) { return; }
    var form = draftForm();
    var filled = false;
    ["other", "note"].forEach(function (name) {
      var el = named(form, name);
      if (el && !el.value && draft[name]) { el.value = draft[name]; filled = true; }
    });
    var typed = named(form, "other");
    if (draft.decision && !(typed && typed.value.trim()) &&
        !form.querySelector('input[name="decision"]:checked')) {
      var radios = form.querySelectorAll('input[name="decision"]');
      for (var i = 0; i < radios.length; i++) {
        if (radios[i].value === draft.decision) { radios[i].checked = true; filled = true; }
      }
    }
    if (filled) { unfold(form); }
  }
  function keepTyping(e) {
    var form = e.target && e.target.form;
    if (!form || FORMS.indexOf(form.id) < 0) { return; }
    // Another answer replaces the pick: an option left checked beside it would be refused
    // ("not both") with no way to uncheck it but 0.
    if (e.target.name === "other" && e.target.type !== "radio" && e.target.value.trim()) {
      unpick(form);
    }
    // And a pick replaces another answer, by key or by mouse, for the same reason.
    if (e.target.name === "decision" && e.target.type === "radio" && e.target.checked) {
      var other = form.querySelector('input[name="other"]');
      if (other && other.value) { other.value = ""; }
    }
    saveDraft();
  }
  document.addEventListener("input", keepTyping);
  document.addEventListener("change", keepTyping);
  document.addEventListener("htmx:afterRequest", function (e) {
    var path = (e.detail.pathInfo && e.detail.pathInfo.requestPath) || "";
    var done = /\/review\/(?:case\/([^\/?#]+)\/resolve|auto\/([^\/?#]+)\/confirm|audit\/([^\/?#]+)\/answer)(?:[?#]|$)/.exec(path);
    var status = e.detail.xhr ? e.detail.xhr.status : 0;
    if (/\/review\/logout(?:[?#]|$)/.test(path) && status >= 200 && status < 400) { dropDrafts(); }
    if (done && status >= 200 && status < 300) {
      var ref = done[1] || done[2] || done[3];
      var key = draftKey(decodeURIComponent(ref));
      try { if (key) { sessionStorage.removeItem(key); } } catch (err) { /* none kept */ }
    }
  });
  document.addEventListener("DOMContentLoaded", restoreDraft);

  document.addEventListener("htmx:beforeRequest", start);
  document.addEventListener("htmx:afterSettle", settled);
  ["htmx:sendError", "htmx:responseError", "htmx:timeout", "htmx:sendAbort", "htmx:swapError"]
    .forEach(function (name) { document.addEventListener(name, failed); });
  // A submit (Enter in the note) leaves the field at once: the keys that follow are
  // queued for the next case instead of being typed into this one.
  document.addEventListener("submit", function (e) {
    var form = e.target;
    if (form && form.getAttribute && form.getAttribute("method") === "dialog") { return; }
    if (form && form.id === "resolve-form") { saveDraft(); }
    start();
  }, true);
  document.addEventListener("click", function (e) {
    if (e.target && e.target.closest && e.target.closest("[data-keys-toggle]")) { help(); }
  });
  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey || e.isComposing) { return; }
    if (e.key !== "Shift" && (e.key !== "u" || typing(e.target))) { cancelUndo(); }
    if (helpOpen()) {
      // Only the help's own keys: ? hides it; Esc (the dialog's own), Tab and the close
      // button are the browser's.
      if (e.key === "?") { help(); e.preventDefault(); }
      return;
    }
    var el = e.target;
    if (typing(el)) {
      if (e.key === "Escape") { el.blur(); e.preventDefault(); }
      return;
    }
    if (e.key === "Escape" || e.key === "Tab" || e.key === "Shift") { return; }
    if (busy) {
      if (e.key.length === 1 || e.key === "Enter") { pending.push(e.key); e.preventDefault(); }
      return;
    }
    if (act(e.key, el)) { e.preventDefault(); }
  });
  // Local, readable times: every <time datetime> shows the reader's local time.
  function localTimes(root) {
    var nodes = (root || document).querySelectorAll("time[datetime]");
    for (var i = 0; i < nodes.length; i++) {
      var d = new Date(nodes[i].getAttribute("datetime"));
      if (!isNaN(d.getTime())) {
        nodes[i].textContent = d.toLocaleString(undefined, {
          year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit"
        });
        nodes[i].title = nodes[i].getAttribute("datetime");
      }
    }
  }
  document.addEventListener("htmx:afterSettle", function () {
    localTimes(document); expireUndo(); expireClaim();
  });
  document.addEventListener("DOMContentLoaded", function () {
    localTimes(document); expireUndo(); expireClaim();
  });
})();
