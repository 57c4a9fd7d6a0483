// fusionworker dashboard: live overview by short polling of /api/v1, the SVG chart,
// confirmations and "select all". No framework, no CDN.
(function () {
  "use strict";
  var poll = parseInt(document.body.getAttribute("data-poll-ms"), 10) || 2000;

  // x with one decimal as the page's Python writes it (f"{x:.1f}"): toFixed rounds an
  // exact half up (1.25 -> "1.3"), Python to the even digit (1.25 -> "1.2"), so a cell
  // would change at its first refresh with nothing changed
  function fixed1(x) {
    x = Number(x);
    var q = x * 4;      // an exact tie is an odd number of quarters (0.25, 0.75, 1.25, ...)
    if (Number.isInteger(q) && Math.abs(q) % 2 === 1) {
      var down = Math.floor(x * 10);                 // exact: x * 10 is a whole and a half
      return ((down % 2 === 0 ? down : down + 1) / 10).toFixed(1);
    }
    return x.toFixed(1);
  }

  function age(s) {
    if (s === null || s === undefined) return "-";
    if (s < 120) return fixed1(s) + "s";
    if (s < 7200) return fixed1(s / 60) + "m";
    if (s < 172800) return fixed1(s / 3600) + "h";
    return fixed1(s / 86400) + "d";
  }

  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  var SVG = "http://www.w3.org/2000/svg";
  function svg(tag, attrs) {
    var e = document.createElementNS(SVG, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    return e;
  }

  function drawChart(rows) {
    var box = document.getElementById("chart");
    if (!box) return;
    var W = Math.max(box.clientWidth - 16, 200), H = 150, pad = 30;
    var max = 1;
    rows.forEach(function (r) { max = Math.max(max, r.finished, r.failed); });
    var s = svg("svg", { viewBox: "0 0 " + W + " " + (H + pad), width: W, height: H + pad, role: "img",
                         "aria-label": "jobs finished and failed per minute" });
    s.appendChild(svg("line", { x1: pad, y1: H, x2: W, y2: H, stroke: "#cbd5e1" }));
    var label = svg("text", { x: 2, y: 12, "font-size": 12, fill: "currentColor" });
    label.textContent = String(max);
    s.appendChild(label);
    var step = (W - pad) / Math.max(rows.length, 1);
    rows.forEach(function (r, i) {
      var x = pad + i * step;
      var hf = (H - 14) * r.finished / max, hx = (H - 14) * r.failed / max;
      s.appendChild(svg("rect", { x: x + 1, y: H - hf, width: Math.max(step / 2 - 1, 1), height: hf, fill: "#16a34a" }));
      s.appendChild(svg("rect", { x: x + step / 2, y: H - hx, width: Math.max(step / 2 - 1, 1), height: hx, fill: "#dc2626" }));
    });
    [0, rows.length - 1].forEach(function (i) {
      if (!rows[i]) return;
      var d = new Date(rows[i].minute * 60000);
      var t = svg("text", { x: i === 0 ? pad : W - 36, y: H + 14, "font-size": 12, fill: "currentColor" });
      t.textContent = ("0" + d.getUTCHours()).slice(-2) + ":" + ("0" + d.getUTCMinutes()).slice(-2);
      s.appendChild(t);
    });
    var total = rows.reduce(function (a, r) { return [a[0] + r.finished, a[1] + r.failed]; }, [0, 0]);
    box.textContent = "";
    box.appendChild(s);
    box.appendChild(el("div", "finished (green) " + total[0] + " · failed (red) " + total[1] + " in the last hour (UTC)", "legend"));
  }

  // the Rate cell as the page writes it (state.py's _fmt_rate_cell): "10/s (held 1.5 s)",
  // "1/s per group, 2 groups own (held 0.8 s)", or "-"
  function rateWindow(seconds) {
    return { 1: "s", 60: "m", 3600: "h" }[Number(seconds)] || (Number(seconds) + " s");
  }
  function held(seconds) {
    return seconds ? " (held " + fixed1(seconds) + " s)" : "";
  }
  function rateText(q) {
    var rl = q.rate_limit, grl = q.group_rate_limit, parts = [];
    if (rl === undefined && grl === undefined) return null;   // an answer without them
    if (rl) parts.push(rl.limit + "/" + rateWindow(rl.window) + held(rl.held_seconds));
    if (grl) {
      var own = [], n = grl.groups ? Object.keys(grl.groups).length : 0;
      if (grl.every) own.push(grl.every.limit + "/" + rateWindow(grl.every.window) + " per group");
      if (n) own.push(n + " group" + (n > 1 ? "s" : "") + " own");
      parts.push((own.join(", ") || "per group") + held(grl.held_seconds));
    }
    return parts.join(" · ") || "-";
  }

  function updateQueues(data) {
    var body = document.querySelector("#queues tbody");
    if (!body) return;
    data.queues.forEach(function (q) {
      var row = body.querySelector('tr[data-queue="' + CSS.escape(q.queue) + '"]');
      if (!row) { document.body.setAttribute("data-stale", "1"); return; }
      var values = { pending: q.pending, high: q.bands.high, normal: q.bands.normal, low: q.bands.low,
                     scheduled: q.scheduled, deferred: q.deferred, started: q.started, finished: q.finished,
                     awaiting_compute: q.awaiting_compute, held: q.held,
                     max_active: q.max_active === null ? "-" : q.max_active, busy_groups: q.busy_groups,
                     oldest_age: age(q.oldest_age), rate: rateText(q) };
      Object.keys(values).forEach(function (k) {
        var cell = row.querySelector('[data-k="' + k + '"]');
        if (cell && values[k] !== null && cell.textContent !== String(values[k])) cell.textContent = values[k];
      });
      var failed = row.querySelector('[data-k="failed"] a');
      if (failed) failed.textContent = q.failed;
      var state = row.querySelector('[data-k="state"] .badge');
      if (state) { state.textContent = q.paused ? "paused" : "active"; state.className = "badge " + (q.paused ? "warn" : "good"); }
    });
    var count = document.getElementById("queue-count");
    if (count && data.total !== undefined) count.textContent = data.total;
    var sus = document.getElementById("suspended");
    if (sus) { sus.textContent = data.suspended ? "workers suspended" : "running"; sus.className = "badge " + (data.suspended ? "warn" : "good"); }
  }

  function updateWorkers(data) {
    var body = document.querySelector("#workers tbody");
    if (!body) return;
    body.textContent = "";
    if (!data.workers.length) {
      var tr0 = el("tr"); var td0 = el("td", "No live worker.", "empty"); td0.colSpan = 10; tr0.appendChild(td0); body.appendChild(tr0);
    }
    data.workers.forEach(function (w) {
      var tr = el("tr");
      function td(text, cls, label) {
        var c = el("td", text, cls);
        if (label) c.setAttribute("data-label", label);
        tr.appendChild(c);
        return c;
      }
      var name = td(null, "first"), link = el("a", w.name);
      link.href = "/workers/" + encodeURIComponent(w.name);
      name.appendChild(link);
      td(w.host, "minor"); td(w.pid, "n minor");
      var st = td(null, "key"); st.appendChild(el("span", w.state, "badge"));
      if (w.throttle) { st.appendChild(document.createTextNode(" ")); st.appendChild(el("span", w.throttle, "badge warn")); }
      td(w.queues.join(", "), "", "queues");
      var job = td(null, "key", "job");
      // a worker with several slots runs several jobs: each is listed, as the page does
      var ids = (w.current_jobs && w.current_jobs.length) ? w.current_jobs : (w.current_job ? [w.current_job] : []);
      ids.forEach(function (id, n) {
        if (n) job.appendChild(el("br"));
        var a = el("a", id);
        a.href = "/jobs/" + encodeURIComponent(id) + (id === w.current_job && w.current_queue ? "?queue=" + encodeURIComponent(w.current_queue) : "");
        job.appendChild(a);
      });
      if (!ids.length) job.textContent = "-";
      td(w.current_job ? age(w.current_job_age) : "-", "n", "running");
      td(age(w.heartbeat_age), "n", "heartbeat");
      td(w.successful, "n", "ok"); td(w.failed, "n", "failed");
      body.appendChild(tr);
    });
    var count = document.getElementById("worker-count");
    if (count) count.textContent = data.workers.length;
  }

  function get(url) {
    return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.json(); });
  }

  // Polls run while the tab is visible only: a hidden tab asks nothing until it shows again.
  function whenVisible(fn) {
    if (!document.hidden) { fn(); return; }
    document.addEventListener("visibilitychange", function again() {
      if (document.hidden) return;
      document.removeEventListener("visibilitychange", again);
      fn();
    });
  }

  function refresh() {
    if (document.hidden) { whenVisible(refresh); return; }
    var jobs = [], table = document.getElementById("queues"), page = "";
    if (table && table.getAttribute("data-page")) {   // the overview polls its own page of queues
      page = "page=" + encodeURIComponent(table.getAttribute("data-page")) +
        "&per_page=" + encodeURIComponent(table.getAttribute("data-per-page")) +
        (table.getAttribute("data-match") ? "&match=" + encodeURIComponent(table.getAttribute("data-match")) : "");
    }
    if (table) jobs.push(get("/api/v1/queues" + (page ? "?" + page : "")).then(updateQueues));
    if (document.getElementById("workers")) jobs.push(get("/api/v1/workers").then(updateWorkers));
    if (document.getElementById("chart")) jobs.push(get("/api/v1/chart?minutes=60" + (page ? "&" + page : "")).then(function (d) { drawChart(d.minutes); }));
    Promise.all(jobs).then(function () {
      document.body.setAttribute("data-refreshed", String(Date.now()));
    }, function () { /* keep the last figures; the next poll tries again */ })
      .then(function () { setTimeout(refresh, poll); });
  }

  // The job page and the queue pages: ask the page's live endpoint with what it shows
  // ("seen"); the answer has something only when that changed.
  var live = document.querySelector("[data-live]");
  function liveURL() {
    return live.getAttribute("data-live") + "&seen=" + encodeURIComponent(live.getAttribute("data-seen") || "") +
      "&here=" + encodeURIComponent(location.pathname + location.search);
  }
  function busyTyping(box) {
    var a = document.activeElement;
    return a && box.contains(a) && (a.tagName === "INPUT" || a.tagName === "SELECT");
  }
  function applyJob(d) {
    if (!d.changed || busyTyping(live)) return;
    var open = [];
    live.querySelectorAll("details[open][id]").forEach(function (x) { open.push(x.id); });
    live.innerHTML = d.html;
    open.forEach(function (id) { var x = document.getElementById(id); if (x) x.open = true; });
    live.setAttribute("data-seen", d.seen);
  }
  function applyQueue(d) {
    Object.keys(d.counts).forEach(function (k) {
      var c = document.querySelector('#tabs [data-k="' + k + '"]');
      if (c && c.textContent !== String(d.counts[k])) c.textContent = d.counts[k];
    });
    var stats = document.getElementById("queue-stats");
    if (stats) stats.innerHTML = d.stats;
    var state = document.getElementById("queue-state");
    if (state) { state.textContent = d.paused ? "paused" : "active"; state.className = "badge " + (d.paused ? "warn" : "good"); }
    var rows = document.getElementById("job-rows");
    if (d.rows !== undefined && rows) {
      var checked = {};
      rows.querySelectorAll('input[name="ids"]:checked').forEach(function (c) { checked[c.value] = true; });
      rows.innerHTML = d.rows;
      rows.querySelectorAll('input[name="ids"]').forEach(function (c) { if (checked[c.value]) c.checked = true; });
      var pager = document.getElementById("pager");
      if (pager && d.pager !== undefined) pager.innerHTML = d.pager;
    }
    if (d.seen) live.setAttribute("data-seen", d.seen);
  }
  function liveTick() {
    if (document.hidden) { whenVisible(liveTick); return; }
    var apply = live.id === "live" ? applyJob : applyQueue;
    get(liveURL()).then(function (d) {
      apply(d);
      document.body.setAttribute("data-refreshed", String(Date.now()));
    }, function () { /* keep what is shown; ask again */ })
      .then(function () { setTimeout(liveTick, poll); });
  }
  if (live) setTimeout(liveTick, poll);

  // The charts page: bars (throughput, failures) and lines (duration percentiles), drawn
  // at the box's own width so that 12 px text stays 12 px on a phone.
  function hhmm(t) {
    var d = new Date(t * 1000);
    return ("0" + d.getUTCHours()).slice(-2) + ":" + ("0" + d.getUTCMinutes()).slice(-2);
  }
  function frame(box, max, rows) {
    var W = Math.max(box.clientWidth - 16, 200), H = 150, left = 40, bottom = 18;
    var s = svg("svg", { viewBox: "0 0 " + W + " " + (H + bottom), width: W, height: H + bottom, role: "img" });
    s.appendChild(svg("line", { x1: left, y1: H, x2: W, y2: H, stroke: "#94a3b8" }));
    var top = svg("text", { x: 2, y: 12, "font-size": 12, fill: "currentColor" });
    top.textContent = String(Math.round(max * 10) / 10);
    s.appendChild(top);
    [0, rows.length - 1].forEach(function (i) {
      if (!rows[i]) return;
      var t = svg("text", { x: i === 0 ? left : W - 36, y: H + 14, "font-size": 12, fill: "currentColor" });
      t.textContent = hhmm(rows[i].t);
      s.appendChild(t);
    });
    return { s: s, W: W, H: H, left: left, step: (W - left) / Math.max(rows.length, 1) };
  }
  function bars(id, rows, key, colour) {
    var box = document.getElementById(id);
    if (!box) return;
    var max = 1;
    rows.forEach(function (r) { max = Math.max(max, r[key]); });
    var f = frame(box, max, rows), total = 0;
    rows.forEach(function (r, i) {
      total += r[key];
      var h = (f.H - 14) * r[key] / max;
      f.s.appendChild(svg("rect", { x: f.left + i * f.step, y: f.H - h, width: Math.max(f.step - 1, 1), height: h, fill: colour }));
    });
    box.textContent = "";
    box.appendChild(f.s);
    box.appendChild(el("div", total + " in all (UTC times)", "legend"));
  }
  function lines(id, rows) {
    var box = document.getElementById(id);
    if (!box) return;
    var keys = [["p50", "#16a34a"], ["p95", "#d97706"], ["p99", "#dc2626"]], max = 1;
    rows.forEach(function (r) { keys.forEach(function (k) { if (r[k[0]] !== null) max = Math.max(max, r[k[0]]); }); });
    var minutes = rows.filter(function (r) { return r.p50 !== null; });
    box.textContent = "";
    if (!minutes.length) {   // no axes without a point: say why the chart is empty
      box.appendChild(el("p", "Not enough data yet: no job has finished in this range.", "empty"));
      return;
    }
    var f = frame(box, max, rows);
    keys.forEach(function (k) {
      var d = "";
      rows.forEach(function (r, i) {
        if (r[k[0]] === null) return;
        var x = (f.left + (i + 0.5) * f.step).toFixed(1), y = (f.H - (f.H - 14) * r[k[0]] / max).toFixed(1);
        d += (d ? " L" : "M") + x + " " + y;
        // a minute without a neighbour draws no line: a dot shows it
        var alone = (i === 0 || rows[i - 1][k[0]] === null) && (i === rows.length - 1 || rows[i + 1][k[0]] === null);
        if (alone) f.s.appendChild(svg("circle", { cx: x, cy: y, r: 4, fill: k[1] }));
      });
      if (d) f.s.appendChild(svg("path", { d: d, fill: "none", stroke: k[1], "stroke-width": 2 }));
    });
    box.appendChild(f.s);
    var last = minutes[minutes.length - 1];
    box.appendChild(el("div", "p50 (green), p95 (amber), p99 (red), milliseconds; latest minute with data (" +
      hhmm(last.t) + " UTC): p50 " + last.p50 + ", p95 " + last.p95 + ", p99 " + last.p99 +
      (minutes.length < 2 ? "; one minute of data so far" : ""), "legend"));
  }
  var history = document.getElementById("history"), historyRows = null;
  function drawHistory(doc) {
    historyRows = doc.rows;
    bars("chart-throughput", doc.rows, "finished", "#16a34a");
    bars("chart-failures", doc.rows, "failed", "#dc2626");
    lines("chart-durations", doc.rows);
  }
  function historyTick() {
    if (document.hidden) { whenVisible(historyTick); return; }
    get(history.getAttribute("data-url")).then(drawHistory, function () { /* next time */ })
      .then(function () { setTimeout(historyTick, 30000); });
  }
  if (history) {
    try { drawHistory(JSON.parse(document.getElementById("history-data").textContent)); } catch (e) { /* ignore */ }
    window.addEventListener("resize", function () { if (historyRows) drawHistory({ rows: historyRows }); });
    setTimeout(historyTick, 30000);
  }

  // Pages without a live endpoint of their own (a worker, a batch, batches, the failed
  // page without a record filter): the page is asked again and its region replaced,
  // unless the user is selecting or typing in it.
  var region = document.querySelector("#refresh[data-refresh]");
  function regionTick() {
    if (document.hidden) { whenVisible(regionTick); return; }
    var busy = busyTyping(region) || region.querySelector('input[name="ids"]:checked') ||
      region.querySelector("details[open]");
    var done = busy ? Promise.resolve() : fetch(location.href, { credentials: "same-origin" })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("refresh");
        if (fresh && fresh.innerHTML !== region.innerHTML) {   // only what changed moves
          region.innerHTML = fresh.innerHTML;
          document.body.setAttribute("data-refreshed", String(Date.now()));
        }
      }, function () { /* keep what is shown; ask again */ });
    done.then(function () { setTimeout(regionTick, poll); });
  }
  if (region) setTimeout(regionTick, poll);

  var initial = document.getElementById("chart-data");
  if (initial) { try { drawChart(JSON.parse(initial.textContent)); } catch (e) { /* ignore */ } }
  if (document.getElementById("queues") || document.getElementById("workers")) setTimeout(refresh, poll);

  var toggle = document.getElementById("theme-toggle");
  if (toggle) toggle.addEventListener("click", function () {
    var root = document.documentElement;
    var now = root.getAttribute("data-theme") ||
      (window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light");
    var next = now === "dark" ? "light" : "dark";
    root.setAttribute("data-theme", next);
    try { window.localStorage.setItem("fw-theme", next); } catch (e) { /* not kept */ }
  });

  document.addEventListener("submit", function (ev) {
    var submitter = ev.submitter;
    var ask = (submitter && submitter.getAttribute("data-confirm")) || ev.target.getAttribute("data-confirm");
    if (ask && !window.confirm(ask)) ev.preventDefault();
  });
  document.addEventListener("change", function (ev) {   // survives a region's refresh
    var all = ev.target;
    if (all && all.hasAttribute && all.hasAttribute("data-submit-on-change") && all.form) {
      all.form.submit();
      return;
    }
    if (!all || all.id !== "select-all") return;
    document.querySelectorAll('#jobs input[name="ids"]').forEach(function (c) { c.checked = all.checked; });
  });
})();
