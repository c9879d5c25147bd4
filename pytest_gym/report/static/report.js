/* pytest-gym report: the task table (sort, filter, expand) and the clicks on the charts.
   Reads the data embedded once in #report-data; no network, no library. */
(function () {
  "use strict";
  var node = document.getElementById("report-data");
  var app = document.getElementById("task-app");
  if (!node || !app) { return; }
  var data = JSON.parse(node.textContent);
  var tasks = data.tasks;
  var suites = data.suites;
  var suiteIndex = {};
  suites.forEach(function (s, i) { suiteIndex[s.name] = i; });
  var byId = {};
  tasks.forEach(function (t, i) {
    t._i = i;
    t._text = (t.prompt || "").toLowerCase() + " " + (t.name || t.hash).toLowerCase();
    t._min = suites[suiteIndex[t.suite]] ? suites[suiteIndex[t.suite]].min_reward : 1;
    byId[t.id] = t;
  });
  var hasBaseline = tasks.some(function (t) { return t.baseline; });
  var PAGE = 100;
  var state = { filter: "all", search: "", suite: "", gate: null, range: null, sortKey: null, sortDir: 1, limit: PAGE, open: {} };

  function esc(text) {
    return String(text).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }
  function num(v, digits) {
    if (v === null || v === undefined) { return "n/a"; }
    if (typeof v !== "number") { return esc(v); }
    if (Number.isInteger(v)) { return v.toLocaleString("en-US"); }
    return v.toFixed(digits === undefined ? 3 : digits);
  }
  function fixed(v) { return v === null || v === undefined ? "n/a" : v.toFixed(3); }
  function nodeid(t, trial) { return trial.nodeid || (t.suite + "::" + (t.name || t.hash) + "[r" + trial.r + "]"); }
  function shellQuote(s) { return "'" + s.replace(/'/g, "'\\''") + "'"; }

  var FILTERS = [
    ["all", "all", function () { return true; }],
    ["failed", "failed", function (t) { return t.n > 0 && !t.passed; }],
    ["flaky", "flaky", function (t) { return t.flaky; }],
    ["errored", "errored", function (t) { return t.errors > 0; }]
  ];
  if (hasBaseline) { FILTERS.push(["regressed", "regressed", function (t) { return !!t.regressed; }]); }
  var filterFn = {};
  FILTERS.forEach(function (f) { filterFn[f[0]] = f[2]; });

  var COLUMNS = [
    ["task", "task", function (t) { return [suiteIndex[t.suite], t.index === null ? 1e12 : t.index]; }],
    ["prompt", "prompt", function (t) { return t._text; }],
    ["mean", "mean reward", function (t) { return t.mean === null ? -1e12 : t.mean; }],
    ["passes", "passes", function (t) { return t.n ? t.successes / t.n : -1; }],
    ["errors", "errors", function (t) { return t.errors; }],
    ["flags", "", null],
    ["delta", "\u0394 baseline", function (t) { return t.baseline && t.baseline.delta !== null ? t.baseline.delta : 0; }],
    ["latency", "latency", function (t) { return t.latency === null ? -1 : t.latency; }],
    ["tokens", "tokens", function (t) { return t.tokens === null ? -1 : t.tokens; }]
  ];
  if (!hasBaseline) { COLUMNS = COLUMNS.filter(function (c) { return c[0] !== "delta"; }); }

  function matches(t) {
    if (!filterFn[state.filter](t)) { return false; }
    if (state.suite && t.suite !== state.suite) { return false; }
    if (state.gate && !state.gate.ids[t.id]) { return false; }
    if (state.range) {
      if (state.range.errored) { if (t.mean !== null) { return false; } }
      else if (t.mean === null || t.mean < state.range.lo || (state.range.last ? t.mean > state.range.hi : t.mean >= state.range.hi)) { return false; }
    }
    if (state.search) {
      var words = state.search.toLowerCase().split(/\s+/);
      for (var i = 0; i < words.length; i++) { if (words[i] && t._text.indexOf(words[i]) < 0) { return false; } }
    }
    return true;
  }
  function compare(a, b) {
    if (Array.isArray(a)) {
      for (var i = 0; i < a.length; i++) { if (a[i] !== b[i]) { return a[i] < b[i] ? -1 : 1; } }
      return 0;
    }
    return a < b ? -1 : a > b ? 1 : 0;
  }
  function visible() {
    var list = tasks.filter(matches);
    if (state.gate) {
      var rank = state.gate.rank;
      list.sort(function (a, b) { return rank[a.id] - rank[b.id]; });
    }
    if (state.sortKey) {
      var col = COLUMNS.filter(function (c) { return c[0] === state.sortKey; })[0];
      list.sort(function (a, b) { return state.sortDir * compare(col[2](a), col[2](b)) || a._i - b._i; });
    }
    return list;
  }

  // -- the controls -------------------------------------------------------------------------------------
  var controls = document.createElement("div");
  controls.className = "controls";
  var buttons = FILTERS.map(function (f) {
    var b = document.createElement("button");
    b.type = "button";
    b.className = "fbtn";
    b.dataset.filter = f[0];
    b.innerHTML = esc(f[1]) + '<span class="n">' + tasks.filter(f[2]).length + "</span>";
    b.addEventListener("click", function () { state.filter = f[0]; state.limit = PAGE; draw(); });
    controls.appendChild(b);
    return b;
  });
  var search = document.createElement("input");
  search.type = "search";
  search.placeholder = "search prompts and task ids";
  search.setAttribute("aria-label", "search prompts and task ids");
  var timer = null;
  search.addEventListener("input", function () {
    clearTimeout(timer);
    timer = setTimeout(function () { state.search = search.value.trim(); state.limit = PAGE; draw(); }, 120);
  });
  controls.appendChild(search);
  var suiteSelect = null;
  if (suites.length > 1) {
    suiteSelect = document.createElement("select");
    suiteSelect.setAttribute("aria-label", "suite");
    suiteSelect.innerHTML = '<option value="">all suites</option>' + suites.map(function (s) {
      return '<option value="' + esc(s.name) + '">' + esc(s.name) + "</option>";
    }).join("");
    suiteSelect.addEventListener("change", function () { state.suite = suiteSelect.value; state.limit = PAGE; draw(); });
    controls.appendChild(suiteSelect);
  }
  var chips = document.createElement("span");
  controls.appendChild(chips);
  var count = document.createElement("span");
  count.className = "count";
  controls.appendChild(count);
  app.appendChild(controls);

  var table = document.createElement("table");
  table.className = "tasks";
  var head = "<thead><tr><th aria-label=\"expand\"></th>" + COLUMNS.map(function (c) {
    var cls = ["mean", "passes", "errors", "delta", "latency", "tokens"].indexOf(c[0]) >= 0 ? ' class="num"' : "";
    return "<th" + cls + ' data-key="' + c[0] + '"' + (c[2] ? ' tabindex="0"' : "") + ">" + esc(c[1]) + "</th>";
  }).join("") + "</tr></thead>";
  table.innerHTML = head + "<tbody></tbody>";
  var tbody = table.querySelector("tbody");
  app.appendChild(table);
  var more = document.createElement("div");
  more.className = "showmore";
  app.appendChild(more);

  table.querySelector("thead").addEventListener("click", function (e) {
    var th = e.target.closest("th[data-key]");
    if (!th) { return; }
    var key = th.dataset.key;
    if (!COLUMNS.some(function (c) { return c[0] === key && c[2]; })) { return; }
    if (state.sortKey === key) { state.sortDir = -state.sortDir; } else { state.sortKey = key; state.sortDir = key === "mean" || key === "passes" ? 1 : -1; }
    if (key === "task" || key === "prompt") { state.sortDir = state.sortKey === key && th.getAttribute("aria-sort") === "ascending" ? -1 : 1; }
    draw();
  });
  table.querySelector("thead").addEventListener("keydown", function (e) {
    if (e.key === "Enter" && e.target.dataset.key) { e.target.click(); }
  });

  // -- rows -----------------------------------------------------------------------------------------------
  function tags(t) {
    var out = "";
    if (t.baseline && t.baseline.change === "new_failure") { out += '<span class="tag newfail">new failure</span>'; }
    if (t.baseline && t.baseline.change === "fixed") { out += '<span class="tag fixed">fixed</span>'; }
    if (t.baseline && (t.baseline.change === "flaky_failure" || t.baseline.change === "flaky_fix")) {
      out += '<span class="tag flaky">' + (t.baseline.change === "flaky_fix" ? "flaky fix" : "flaky failure") + ", not counted</span>";
    }
    if (t.n > 0 && !t.passed && !(t.baseline && t.baseline.change === "new_failure")) { out += '<span class="tag fail">failed</span>'; }
    if (t.n > 0 && t.passed) { out += '<span class="tag pass">passed</span>'; }
    if (t.flaky) { out += '<span class="tag flaky">flaky</span>'; }
    if (t.errors) { out += '<span class="tag err">' + t.errors + " error" + (t.errors > 1 ? "s" : "") + "</span>"; }
    return out;
  }
  function meanCell(t) {
    if (t.mean === null) { return '<span class="muted">none</span>'; }
    var ok = t.mean >= t._min;
    var width = Math.max(0, Math.min(1, t.mean)) * 100;
    return '<span class="meanbar"><i class="' + (ok ? "c4" : "c0") + '" style="width:' + width.toFixed(0) + '%"></i></span>' + t.mean.toFixed(3);
  }
  function rowHtml(t) {
    var cells = COLUMNS.map(function (c) {
      switch (c[0]) {
        case "task": return '<td class="tw"><code>' + esc(t.name || t.hash) + "</code>" + (t.index !== null ? ' <span class="muted">#' + t.index + "</span>" : "") + (suites.length > 1 ? '<div class="muted">' + esc(t.suite) + "</div>" : "") + "</td>";
        case "prompt": var shown = (t.prompt || "").slice(t.prompt_at || 0); return '<td class="prompt" title="' + esc((t.prompt || "").slice(0, 300)) + '">' + (t.prompt_at ? "\u2026" : "") + esc(shown.slice(0, 160)) + "</td>";
        case "mean": return '<td class="num tw">' + meanCell(t) + "</td>";
        case "passes": return '<td class="num">' + t.successes + "/" + t.n + "</td>";
        case "errors": return '<td class="num">' + (t.errors || "") + "</td>";
        case "flags": return '<td class="flags">' + tags(t) + "</td>";
        case "delta":
          if (!t.baseline || t.baseline.delta === null) { return '<td class="num muted">' + (t.baseline && t.baseline.change ? "" : "") + "</td>"; }
          return '<td class="num ' + (t.baseline.delta < 0 ? "bad" : "") + '">' + (t.baseline.delta > 0 ? "+" : "") + fixed(t.baseline.delta) + "</td>";
        case "latency": return '<td class="num">' + (t.latency === null ? "" : num(t.latency) + " s") + "</td>";
        case "tokens": return '<td class="num">' + (t.tokens === null ? "" : num(t.tokens)) + "</td>";
      }
      return "<td></td>";
    }).join("");
    var open = !!state.open[t.id];
    return '<tr class="row' + (open ? " open" : "") + '" data-i="' + t._i + '" tabindex="0" aria-expanded="' + open + '"><td>' + (open ? "\u25be" : "\u25b8") + "</td>" + cells + "</tr>" +
      (open ? '<tr class="detail" data-i="' + t._i + '"><td colspan="' + (COLUMNS.length + 1) + '">' + detailHtml(t) + "</td></tr>" : "");
  }
  function textBlock(text, lines) {
    var long = text.length > 600 || text.split("\n").length > (lines || 6);
    return '<pre class="text">' + esc(text) + "</pre>" + (long ? '<button type="button" class="more" data-toggle="text">show more</button>' : "");
  }
  function fieldsTable(t, trial) {
    var rows = [];
    var taskFields = t.fields || {};
    var own = trial.fields || {};
    var used = {};
    Object.keys(own).forEach(function (key) {
      var base = key.replace(/^extracted_/, "");
      var expectedKey = key.indexOf("extracted_") === 0 ? "expected_" + base : null;
      if (expectedKey && Object.prototype.hasOwnProperty.call(taskFields, expectedKey)) {
        used[expectedKey] = true;
        var same = String(taskFields[expectedKey]) === String(own[key]);
        rows.push('<tr class="' + (same ? "match" : "mismatch") + '"><th>' + esc(base) + '</th><td>' + esc(taskFields[expectedKey]) + '</td><td class="v2">' + esc(own[key]) + "</td></tr>");
      } else {
        rows.push("<tr><th>" + esc(key) + '</th><td></td><td class="v2">' + esc(own[key]) + "</td></tr>");
      }
    });
    Object.keys(taskFields).forEach(function (key) {
      if (!used[key] && /^expected/.test(key)) { rows.push("<tr><th>" + esc(key) + "</th><td>" + esc(taskFields[key]) + "</td><td></td></tr>"); }
    });
    if (!rows.length) { return ""; }
    return '<table class="fields"><thead><tr><th>field</th><th>expected (dataset)</th><th>this repeat</th></tr></thead><tbody>' + rows.join("") + "</tbody></table>";
  }
  function trialHtml(t, trial) {
    var cls = trial.error !== undefined ? "error" : (trial.reward < t._min ? "low" : "");
    var head = "<b>r" + trial.r + "</b>";
    if (trial.error !== undefined) { head += ' <span class="tag err">' + esc(trial.error_class || "error") + (trial.http_status ? " " + trial.http_status : "") + "</span>"; }
    else { head += "<span>reward <b>" + num(trial.reward) + "</b></span>"; }
    if (trial.latency !== undefined) { head += "<span>" + num(trial.latency) + " s</span>"; }
    if (trial.tokens) { head += '<span title="input / output / total tokens">' + num(trial.tokens[0]) + " \u2192 " + num(trial.tokens[1]) + " tokens</span>"; }
    head += "<span>" + (trial.attempts || 1) + " attempt" + ((trial.attempts || 1) > 1 ? "s" : "") + "</span>";
    if (trial.health) { head += ' <span class="tag err" title="Gym\'s health checks">' + esc(trial.health.join(", ")) + "</span>"; }
    if (trial.trace && /^https?:\/\//.test(trial.trace)) { head += '<span><a class="trace" rel="noopener noreferrer" href="' + esc(trial.trace) + '">trace</a></span>'; }
    var command = "pytest " + shellQuote(nodeid(t, trial));
    var out = '<div class="trial ' + cls + '"><div class="head">' + head + "</div>";
    out += '<div class="rerun"><code>' + esc(command) + '</code><button type="button" class="copy" data-copy="' + esc(command) + '">copy</button></div>';
    if (trial.error !== undefined) { return out + '<div class="errorbox">' + textBlock(trial.error) + "</div></div>"; }
    out += "<h4>answer</h4>" + textBlock(trial.answer || "(empty)");
    out += fieldsTable(t, trial);
    if (trial.steps) {
      var calls = trial.steps.filter(function (s) { return s[0] === "call"; }).length;
      out += "<h4>trajectory before the answer \u00b7 " + trial.steps.length + " step" + (trial.steps.length > 1 ? "s" : "") + (calls ? ", " + calls + " tool call" + (calls > 1 ? "s" : "") : "") + "</h4><ol class=\"steps\">";
      trial.steps.forEach(function (s, i) {
        var kind = { call: "tool call", result: "tool result" }[s[0]] || s[0];
        out += "<li" + (i >= 4 ? ' class="hidden"' : "") + '><span class="kind">' + esc(kind) + "</span>" + textBlock(s[1], 4) + "</li>";
      });
      out += "</ol>";
      if (trial.steps.length > 4) { out += '<button type="button" class="more" data-toggle="steps">show ' + (trial.steps.length - 4) + " more steps</button>"; }
      if (trial.more_steps) { out += '<div class="muted">' + trial.more_steps + " more steps in rollouts.jsonl</div>"; }
    }
    return out + "</div>";
  }
  function detailHtml(t) {
    var out = '<div class="detail">';
    out += "<h4>prompt</h4>" + textBlock(t.prompt || "(not in the run folder)", 8);
    var other = Object.keys(t.fields || {}).filter(function (k) { return !/^expected/.test(k); });
    if (other.length) {
      out += '<h4>dataset fields</h4><table class="fields"><tbody>' + other.map(function (k) {
        return "<tr><th>" + esc(k) + "</th><td>" + esc(t.fields[k]) + "</td></tr>";
      }).join("") + "</tbody></table>";
    }
    if (t.baseline) {
      out += "<h4>baseline</h4><div>before " + fixed(t.baseline.before) + (t.baseline.before_passed !== undefined ? (t.baseline.before_passed ? " (passed)" : " (failed)") : "") + " \u2192 after " + fixed(t.mean) + (t.baseline.change ? " \u00b7 " + esc(t.baseline.change.replace("_", " ")) : "") + "</div>";
    }
    out += "<h4>repeats (" + t.trials.length + ")</h4><div class=\"repeats\">" + t.trials.map(function (trial) { return trialHtml(t, trial); }).join("") + "</div>";
    return out + "</div>";
  }

  function drawChips() {
    var parts = [];
    if (state.gate) { parts.push('<span class="active-chip">gate <code>' + esc(state.gate.label) + "</code>: " + esc(state.gate.what) + ' <button type="button" data-clear="gate" aria-label="clear gate filter">\u00d7</button></span>'); }
    if (state.range) { parts.push('<span class="active-chip">' + (state.range.errored ? "tasks without a reward" : "mean reward " + state.range.lo.toFixed(2) + "\u2013" + state.range.hi.toFixed(2)) + ' <button type="button" data-clear="range" aria-label="clear range filter">\u00d7</button></span>'); }
    chips.innerHTML = parts.join(" ");
  }
  chips.addEventListener("click", function (e) {
    var b = e.target.closest("button[data-clear]");
    if (!b) { return; }
    state[b.dataset.clear] = null;
    draw();
  });

  function draw() {
    buttons.forEach(function (b) { b.setAttribute("aria-pressed", String(b.dataset.filter === state.filter)); });
    if (suiteSelect) { suiteSelect.value = state.suite; }
    if (search.value.trim() !== state.search) { search.value = state.search; }
    drawChips();
    table.querySelectorAll("thead th[data-key]").forEach(function (th) {
      if (th.dataset.key === state.sortKey) { th.setAttribute("aria-sort", state.sortDir > 0 ? "ascending" : "descending"); } else { th.removeAttribute("aria-sort"); }
    });
    var list = visible();
    var shown = list.slice(0, state.limit);
    tbody.innerHTML = shown.map(rowHtml).join("") || '<tr><td colspan="' + (COLUMNS.length + 1) + '" class="muted">No task matches.</td></tr>';
    count.textContent = "showing " + shown.length + " of " + list.length + " matching tasks (" + tasks.length + " in all)";
    more.innerHTML = list.length > shown.length ? '<button type="button" class="fbtn" data-more="1">show ' + Math.min(PAGE, list.length - shown.length) + " more</button>" : "";
  }
  more.addEventListener("click", function (e) {
    if (e.target.closest("[data-more]")) { state.limit += PAGE; draw(); }
  });

  function toggle(i) {
    var t = tasks[i];
    if (state.open[t.id]) { delete state.open[t.id]; } else { state.open[t.id] = true; }
    draw();
  }
  tbody.addEventListener("click", function (e) {
    var button = e.target.closest("button");
    if (button) {
      if (button.dataset.copy !== undefined) {
        var text = button.dataset.copy;
        if (navigator.clipboard && navigator.clipboard.writeText) {
          navigator.clipboard.writeText(text).then(function () { button.textContent = "copied"; }, function () { button.textContent = "select and copy"; });
        }
      } else if (button.dataset.toggle === "text") {
        var pre = button.previousElementSibling;
        pre.classList.toggle("open");
        button.textContent = pre.classList.contains("open") ? "show less" : "show more";
      } else if (button.dataset.toggle === "steps") {
        button.previousElementSibling.querySelectorAll("li.hidden").forEach(function (li) { li.classList.remove("hidden"); });
        button.remove();
      }
      return;
    }
    var row = e.target.closest("tr.row");
    if (row) { toggle(Number(row.dataset.i)); }
  });
  tbody.addEventListener("keydown", function (e) {
    if ((e.key === "Enter" || e.key === " ") && e.target.matches("tr.row")) { e.preventDefault(); toggle(Number(e.target.dataset.i)); }
  });

  // -- from the rest of the page into the table ---------------------------------------------------------------
  function openTask(id) {
    var t = byId[id];
    if (!t) { return; }
    if (!matches(t)) { state.filter = "all"; state.search = ""; state.gate = null; state.range = null; state.suite = ""; }
    var list = visible();
    var at = list.indexOf(t);
    if (at >= state.limit) { state.limit = Math.ceil((at + 1) / PAGE) * PAGE; }
    state.open[t.id] = true;
    draw();
    var row = tbody.querySelector('tr.row[data-i="' + t._i + '"]');
    if (row) {
      row.scrollIntoView({ block: "start" });
      row.classList.add("flash");
      row.focus({ preventScroll: true });
    }
    if (history.replaceState) { history.replaceState(null, "", "#task=" + encodeURIComponent(id)); }
  }
  function showTasks() { document.getElementById("tasks").scrollIntoView({ block: "start" }); }

  document.addEventListener("click", function (e) {
    var gate = e.target.closest(".gate-link");
    if (gate) {
      e.preventDefault();
      var suite = suites[Number(gate.dataset.suite)];
      var g = suite.gates[Number(gate.dataset.gate)];
      var ids = {}, rank = {};
      g.tasks.forEach(function (index, i) { var id = tasks[index].id; ids[id] = true; rank[id] = i; });
      state.gate = { label: g.label, what: g.tasks_are, ids: ids, rank: rank };
      state.filter = "all"; state.range = null; state.search = ""; state.sortKey = null; state.limit = PAGE;
      draw(); showTasks();
      return;
    }
    var link = e.target.closest(".task-link, .brow[data-task]");
    if (link) { e.preventDefault(); openTask(tasks[Number(link.dataset.task)].id); return; }
    var bar = e.target.closest("svg[data-chart=rewards] rect.bar");
    if (bar) {
      var svgSuite = bar.closest("section.suite");
      var s = suites[Number(svgSuite.id.replace("suite-", ""))];
      state.suite = suites.length > 1 ? s.name : "";
      state.gate = null; state.filter = "all"; state.search = ""; state.limit = PAGE;
      if (bar.dataset.errored) { state.range = { errored: true }; }
      else {
        var hi = Number(bar.dataset.hi);
        var maxHi = Math.max.apply(null, Array.prototype.map.call(bar.parentNode.querySelectorAll("rect.bar[data-hi]"), function (r) { return Number(r.dataset.hi); }));
        state.range = { lo: Number(bar.dataset.lo), hi: hi, last: hi >= maxHi };
      }
      draw(); showTasks();
      return;
    }
    var grid = e.target.closest("svg[data-chart=grid]");
    if (grid) {
      var box = grid.getBoundingClientRect();
      var vb = grid.viewBox.baseVal;
      var scale = vb.width / box.width;
      var x = (e.clientX - box.left) * scale, y = (e.clientY - box.top) * scale;
      var d = grid.dataset;
      var cell = Number(d.cell), cols = Number(d.cols);
      var col = Math.floor((x - Number(d.left)) / cell);
      var band = Math.floor((y - Number(d.top)) / Number(d.band));
      var order = d.order.split(",");
      var pos = band * cols + col;
      if (col >= 0 && col < cols && band >= 0 && pos < order.length) { openTask(tasks[Number(order[pos])].id); }
    }
  });

  draw();
  var m = /^#task=(.+)$/.exec(location.hash);
  if (m) { openTask(decodeURIComponent(m[1])); }
})();
