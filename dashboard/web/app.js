// The Floodgate dashboard: polls /ui/api/overview once a second (only the
// seconds it has not seen) and /ui/api/quotas every two seconds while the
// keys page is open, and draws with uPlot. It keeps the last hour and shows
// the chosen range of it (5 min, 15 min, 1 h), or the stretch dragged
// across a chart (the zoom, which stays put while new seconds come in,
// until it is reset); the panels are ordered by their refusals there.
"use strict";

(function () {
  const WINDOW = 3600;
  const RANGES = [300, 900, 3600];
  const RANGE_NAMES = { 300: "5 min", 900: "15 min", 3600: "1 h" };
  const state = {
    range: RANGES.includes(Number(localStorage.getItem("floodgate-range"))) ? Number(localStorage.getItem("floodgate-range")) : 300,
    zoom: null,          // {min, max} in seconds, or null: the last range seconds
    refused: {},         // route -> {u: [], f: [], b: []}: answers refused before any limit, per second
    refusedCharts: {},   // route -> uPlot
    timeCharts: [],      // every chart of time, for the zoom
    token: sessionStorage.getItem("floodgate-token") || "",
    until: 0,            // the last second received
    xs: [],              // seconds
    series: {},          // limit name -> {d: [], x: []}
    charts: {},          // limit name -> uPlot
    latency: [],         // per second: mean store latency (ms), this instance
    degraded: [],        // per second: degraded decisions, this instance
    overload: {},        // route -> {t: [], limit: [], ms: []}: its overload control, sampled seconds
    overloadCharts: {},  // route -> uPlot
    page: "traffic",
    timer: null,
    quotaTimer: null,
  };

  // A token may come in the page's address (#traffic&token=...); it is
  // kept for this tab and removed from the address. One that does not
  // decode (a link may hold anything) is dropped: the page asks for one.
  (function takeToken() {
    const m = location.hash.match(/[#&]token=([^&]+)/);
    if (m) {
      try {
        state.token = decodeURIComponent(m[1]);
      } catch (e) {
        state.token = "";
      }
      sessionStorage.setItem("floodgate-token", state.token);
      const rest = location.hash.replace(/[#&]token=[^&]+/, "").replace(/^#?&?/, "");
      history.replaceState(null, "", location.pathname + (rest ? "#" + rest : "#traffic"));
    }
  })();

  // HIDDEN matches what a reader cannot see or what reorders the text
  // around it: controls (C0 and C1), format characters (bidi embeddings,
  // overrides, isolates and marks, zero-width characters, the byte-order
  // mark), line and paragraph separators, and the other default-ignorable
  // code points (fillers, variation selectors).
  const HIDDEN = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Default_Ignorable_Code_Point}]/gu;
  // shown returns s as the page shows it: each HIDDEN character written
  // out as ⟨U+202E⟩, so that a key a client chose (a token's user, a
  // header) reads as what it is. Everything the page shows from its feeds
  // goes through it, as text (never as markup).
  function shown(s) {
    return String(s).replace(HIDDEN, (c) => "⟨U+" + c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0") + "⟩");
  }

  function $(sel) { return document.querySelector(sel); }
  // el makes an element: attributes set as values (never parsed), and its
  // children, nodes or text (shown).
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else e.setAttribute(k, v);
    }
    for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(shown(k)));
    return e;
  }
  function setStatus(text, bad) {
    const s = $("#status");
    s.textContent = shown(text);
    s.classList.toggle("error", !!bad);
  }

  async function getJSON(path) {
    const headers = {};
    if (state.token) headers["Authorization"] = "Bearer " + state.token;
    const resp = await fetch(path, { headers, cache: "no-store" });
    if (resp.status === 401) {
      showLogin();
      throw new Error("unauthorized");
    }
    if (!resp.ok) throw new Error(path + ": " + resp.status);
    return resp.json();
  }

  function showLogin() {
    $("#login").hidden = false;
    document.querySelector("main").hidden = true;
    setStatus("token needed", true);
  }
  $("#login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    state.token = $("#token").value.trim();
    sessionStorage.setItem("floodgate-token", state.token);
    $("#login").hidden = true;
    document.querySelector("main").hidden = false;
    state.until = 0;
    poll();
  });

  // ---- pages ----
  function showPage() {
    const name = (location.hash.replace(/^#/, "").split("&")[0]) || "traffic";
    state.page = ["traffic", "keys", "health"].includes(name) ? name : "traffic";
    for (const p of document.querySelectorAll(".page")) p.hidden = p.id !== "page-" + state.page;
    for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.page === state.page);
    document.body.dataset.page = state.page;
    if (state.page === "keys") pollQuotas();
    resizeCharts();
  }
  window.addEventListener("hashchange", showPage);

  // ---- time range and zoom ----
  // view returns the seconds shown: the zoom, or the last range seconds.
  function view() {
    if (state.zoom) return state.zoom;
    return { min: state.until - state.range + 1, max: state.until };
  }
  // viewIdx returns the indexes [i0, i1) of state.xs inside the view.
  function viewIdx() {
    const v = view();
    let i0 = state.xs.length, i1 = state.xs.length;
    while (i0 > 0 && state.xs[i0 - 1] >= v.min) i0--;
    while (i1 > i0 && state.xs[i1 - 1] > v.max) i1--;
    return [i0, i1];
  }
  function setRange(r) {
    state.range = r;
    localStorage.setItem("floodgate-range", String(r));
    for (const b of document.querySelectorAll("#range button")) b.setAttribute("aria-pressed", String(Number(b.dataset.range) === r));
    setZoom(null);
  }
  function setZoom(z) {
    state.zoom = z && z.max - z.min >= 2 ? z : null;
    $("#zoom-reset").hidden = !state.zoom;
    const label = state.zoom ? "zoomed: " + new Date(state.zoom.min * 1000).toLocaleTimeString() + " – " +
      new Date(state.zoom.max * 1000).toLocaleTimeString() : "last " + RANGE_NAMES[state.range];
    for (const e of document.querySelectorAll(".range-label")) e.textContent = e.closest(".card") ? (state.zoom ? "zoomed" : "last " + RANGE_NAMES[state.range]) : label;
    document.body.dataset.range = String(state.range);
    document.body.dataset.zoomed = String(!!state.zoom);
    if (state.lastData) redraw();
  }
  for (const b of document.querySelectorAll("#range button")) b.addEventListener("click", () => setRange(Number(b.dataset.range)));
  $("#zoom-reset").addEventListener("click", () => setZoom(null));

  // timeChart makes a chart of time in box: a drag across it zooms every
  // chart into that stretch, a double-click zooms out; the box tells the
  // seconds it shows (data-xmin, data-xmax).
  function timeChart(box, opts, height) {
    opts.width = chartWidth(box);
    opts.height = height;
    opts.scales = Object.assign({}, opts.scales || {}, { x: { time: true } });
    opts.axes = opts.axes || [{}, { size: 50 }];
    opts.axes[0] = Object.assign({ space: 70 }, opts.axes[0]); // room for the two-line time labels
    opts.legend = { live: false };
    opts.cursor = {
      drag: { x: true, y: false, setScale: false },
      bind: { dblclick: () => () => { setZoom(null); return null; } },
    };
    opts.hooks = {
      setSelect: [(u) => {
        if (u.select.width >= 5) {
          setZoom({ min: u.posToVal(u.select.left, "x"), max: u.posToVal(u.select.left + u.select.width, "x") });
        }
        u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
      }],
      setScale: [(u, key) => {
        if (key === "x" && u.scales.x.min != null) {
          box.dataset.xmin = String(Math.round(u.scales.x.min));
          box.dataset.xmax = String(Math.round(u.scales.x.max));
        }
      }],
    };
    const u = new uPlot(opts, opts.series.map(() => []), box);
    u.fgHeight = height;
    state.timeCharts.push(u);
    return u;
  }
  // show gives a chart its data and the seconds in view.
  function show(u, data) {
    u.batch(() => {
      u.setData(data);
      u.setScale("x", view());
    });
  }
  // clip returns the arrays' entries at the indexes [i0, i1).
  function clip(arrays, i0, i1) { return arrays.map((a) => a.slice(i0, i1)); }

  // ---- traffic ----
  function chartWidth(container) {
    return Math.max(300, container.clientWidth - 14);
  }

  function ensureChart(name) {
    if (state.charts[name]) return state.charts[name];
    let u;
    if (name === "all") {
      u = timeChart($("#chart-all"), { series: [{},
        { label: "decisions/s", stroke: "#2563eb", fill: "rgba(37,99,235,0.08)", width: 1 },
        { label: "429/s", stroke: "#dc2626", fill: "rgba(220,38,38,0.10)", width: 1 },
        { label: "401 and 403/s (before any limit)", stroke: "#d97706", width: 1.5 }] }, 220);
    } else {
      const box = el("div", { class: "chart", "data-limit": name });
      $("#charts").append(box);
      u = timeChart(box, { title: shown(name), series: [{},
        { label: "decisions/s", stroke: "#2563eb", fill: "rgba(37,99,235,0.08)", width: 1 },
        { label: "429/s", stroke: "#dc2626", fill: "rgba(220,38,38,0.10)", width: 1 }] }, 160);
    }
    state.charts[name] = u;
    return u;
  }

  function ensureRefusedChart(route) {
    if (state.refusedCharts[route]) return state.refusedCharts[route];
    const grid = $("#refused");
    if (!Object.keys(state.refusedCharts).length) grid.replaceChildren();
    const box = el("div", { class: "chart", "data-route": route });
    grid.append(box);
    const u = timeChart(box, { title: shown(route), series: [{},
      { label: "401/s", stroke: "#d97706", fill: "rgba(217,119,6,0.10)", width: 1 },
      { label: "403/s", stroke: "#7c3aed", fill: "rgba(124,58,237,0.08)", width: 1 },
      { label: "429/s (penalty box)", stroke: "#991b1b", width: 1 }] }, 160);
    state.refusedCharts[route] = u;
    return u;
  }

  // order puts the boxes of grid in the order of keys, moving only when it
  // changed.
  function order(grid, boxes) {
    const now = Array.from(grid.children);
    if (now.length === boxes.length && now.every((b, i) => b === boxes[i])) return;
    grid.append(...boxes);
  }

  function resizeCharts() {
    for (const [name, u] of Object.entries(state.charts)) {
      const box = u.root.parentElement;
      if (box && box.clientWidth > 0) u.setSize({ width: chartWidth(box), height: name === "all" ? 220 : 160 });
    }
    for (const u of state.timeCharts) {
      const box = u.root.parentElement;
      if (box && box.clientWidth > 0 && !Object.values(state.charts).includes(u)) u.setSize({ width: chartWidth(box), height: u.fgHeight });
    }
  }
  window.addEventListener("resize", resizeCharts);

  function append(data) {
    const n = data.until - data.from + 1;
    if (n <= 0) return;
    for (let i = 0; i < n; i++) state.xs.push(data.from + i);
    const names = ["all"].concat(data.limits);
    for (const name of names) {
      let s = state.series[name];
      if (!s) {
        // A limit first seen now: pad its past with zeros.
        s = state.series[name] = { d: new Array(state.xs.length - n).fill(0), x: new Array(state.xs.length - n).fill(0) };
      }
      const pts = data.series[name] || [];
      for (let i = 0; i < n; i++) {
        const p = pts[i] || { d: 0, x: 0 };
        s.d.push(p.d);
        s.x.push(p.x);
      }
    }
    // Limits that sent nothing this time still move on.
    for (const [name, s] of Object.entries(state.series)) {
      while (s.d.length < state.xs.length) { s.d.push(0); s.x.push(0); }
    }
    for (const [route, pts] of Object.entries(data.refused || {})) {
      let r = state.refused[route];
      if (!r) {
        const pad = state.xs.length - n;
        r = state.refused[route] = { u: new Array(pad).fill(0), f: new Array(pad).fill(0), b: new Array(pad).fill(0) };
      }
      for (let i = 0; i < n; i++) {
        const p = pts[i] || { u: 0, f: 0, b: 0 };
        r.u.push(p.u); r.f.push(p.f); r.b.push(p.b);
      }
    }
    for (const r of Object.values(state.refused)) {
      while (r.u.length < state.xs.length) { r.u.push(0); r.f.push(0); r.b.push(0); }
    }
    const drop = state.xs.length - WINDOW;
    if (drop > 0) {
      state.xs.splice(0, drop);
      for (const s of Object.values(state.series)) { s.d.splice(0, drop); s.x.splice(0, drop); }
      for (const r of Object.values(state.refused)) { r.u.splice(0, drop); r.f.splice(0, drop); r.b.splice(0, drop); }
    }
    for (const h of data.health || []) { state.latency.push(h.avg_ms); state.degraded.push(h.degraded); }
    while (state.latency.length < state.xs.length) { state.latency.unshift(0); state.degraded.unshift(0); }
    if (state.latency.length > state.xs.length) {
      state.latency.splice(0, state.latency.length - state.xs.length);
      state.degraded.splice(0, state.degraded.length - state.xs.length);
    }
    for (const [route, pts] of Object.entries(data.overload || {})) {
      const o = state.overload[route] || (state.overload[route] = { t: [], limit: [], ms: [] });
      for (const p of pts) { o.t.push(p.t); o.limit.push(p.limit); o.ms.push(p.latency_ms); }
      const cut = o.t.length - WINDOW;
      if (cut > 0) { o.t.splice(0, cut); o.limit.splice(0, cut); o.ms.splice(0, cut); }
    }
    state.until = data.until;
  }

  function drawOverload() {
    const box = $("#overload");
    for (const route of Object.keys(state.overload).sort()) {
      const o = state.overload[route];
      let u = state.overloadCharts[route];
      if (!u) {
        if (!state.overloadCharts.__any) { box.replaceChildren(); state.overloadCharts.__any = true; }
        const div = el("div", { class: "chart wide" });
        box.append(div);
        u = state.overloadCharts[route] = timeChart(div, { title: shown(route), scales: { ms: { auto: true } },
          axes: [{}, { size: 50 }, { scale: "ms", side: 1, size: 50 }],
          series: [{}, { label: "cap (requests in flight)", stroke: "#2563eb", width: 1 },
            { label: "upstream latency (ms)", stroke: "#ea580c", width: 1, scale: "ms" }] }, 180);
      }
      const v = view();
      let i0 = 0;
      while (i0 < o.t.length && o.t[i0] < v.min) i0++;
      show(u, clip([o.t, o.limit, o.ms], i0, o.t.length));
    }
  }

  function sum(a, from) { let t = 0; for (let i = Math.max(0, from); i < a.length; i++) t += a[i]; return t; }

  function drawTraffic(data) {
    const [i0, i1] = viewIdx();
    const all = state.series["all"] || { d: [], x: [] };
    const routes = Object.keys(state.refused);
    const before = state.xs.map((_, i) => routes.reduce((t, r) => t + state.refused[r].u[i] + state.refused[r].f[i], 0));
    show(ensureChart("all"), clip([state.xs, all.d, all.x, before], i0, i1));
    // Each limit's panel, the most refused in view first.
    const limits = Object.keys(state.series).filter((n) => n !== "all").map((name) => {
      const s = state.series[name];
      return { name, s, refused: sumRange(s.x, i0, i1), decided: sumRange(s.d, i0, i1) };
    });
    limits.sort((a, b) => b.refused - a.refused || b.decided - a.decided || (a.name < b.name ? -1 : 1));
    for (const l of limits) {
      const u = ensureChart(l.name);
      show(u, clip([state.xs, l.s.d, l.s.x], i0, i1));
      const box = u.root.parentElement;
      box.dataset.refused = String(l.refused);
      title(u, l.name, l.refused ? l.refused.toLocaleString() + " × 429" : "no 429");
    }
    order($("#charts"), limits.map((l) => state.charts[l.name].root.parentElement));
    // The answers refused before any limit, per route, the most first.
    const rs = routes.map((route) => {
      const r = state.refused[route];
      return { route, r, u: sumRange(r.u, i0, i1), f: sumRange(r.f, i0, i1), b: sumRange(r.b, i0, i1) };
    });
    rs.sort((a, b) => (b.u + b.f + b.b) - (a.u + a.f + a.b) || (a.route < b.route ? -1 : 1));
    for (const x of rs) {
      const u = ensureRefusedChart(x.route);
      show(u, clip([state.xs, x.r.u, x.r.f, x.r.b], i0, i1));
      const box = u.root.parentElement;
      box.dataset.unauthorized = String(x.u);
      box.dataset.forbidden = String(x.f);
      box.dataset.banned = String(x.b);
      title(u, x.route, x.u.toLocaleString() + " × 401 · " + x.f.toLocaleString() + " × 403" + (x.b ? " · " + x.b.toLocaleString() + " × 429" : ""));
    }
    if (rs.length) order($("#refused"), rs.map((x) => state.refusedCharts[x.route].root.parentElement));
    const last = all.d.length - 60;
    $("#rate").textContent = Math.round(sum(all.d, last) / 60).toLocaleString();
    $("#denied-rate").textContent = (sum(all.x, last) / 60).toFixed(1);
    $("#denied-range").textContent = sumRange(all.x, i0, i1).toLocaleString();
    $("#refused-range").textContent = sumRange(before, i0, i1).toLocaleString();
    $("#instance-count").textContent = data.instances.length;
    const tb = $("#top tbody");
    tb.replaceChildren(...(data.top.length ? data.top.map((h) => el("tr", {},
      el("td", {}, h.limit), el("td", { class: "key" }, h.key), el("td", { class: "num" }, h.count.toLocaleString()), el("td", { class: "num" }, h.error)))
      : [el("tr", {}, el("td", { colspan: 4, class: "muted" }, "no 429s"))]));
    document.body.dataset.refused = String(sum(before, 0));
  }
  function sumRange(a, i0, i1) { let t = 0; for (let i = i0; i < i1 && i < a.length; i++) t += a[i]; return t; }
  // title names a chart and what it counts in view.
  function title(u, name, what) {
    const t = u.root.querySelector(".u-title");
    const text = shown(name) + " · " + what;
    if (t && t.textContent !== text) t.textContent = text;
  }

  // ---- health ----
  let latencyChart = null;
  function drawHealth(data) {
    const tb = $("#instances tbody");
    tb.replaceChildren(...data.instances.map((i) => el("tr", {},
      el("td", { class: "key" }, i.id), el("td", {}, i.config_version || "–"), el("td", {}, i.store),
      el("td", {}, el("span", { class: "pill " + (i.breaker === "open" ? "bad" : "ok") }, i.breaker)),
      el("td", { class: "num" }, i.health.calls ? i.health.latency_avg_ms.toFixed(2) + " ms" : "–"),
      el("td", { class: "num" }, i.health.calls ? i.health.latency_max_ms.toFixed(2) + " ms" : "–"),
      el("td", { class: "num" }, i.health.degraded),
      el("td", { class: "num" }, i.reloads + (i.rejected ? " (" + i.rejected + " rejected)" : "")),
      el("td", {}, new Date(i.seen).toLocaleTimeString()))));
    const rb = $("#reloads tbody");
    const rl = data.reloads || [];
    rb.replaceChildren(...(rl.length ? rl.map((r) => el("tr", {},
      el("td", {}, new Date(r.time).toLocaleString()), el("td", {}, r.version || "–"),
      el("td", {}, r.ok ? el("span", { class: "pill ok" }, "applied") : el("span", { class: "pill bad" }, "rejected: " + r.error))))
      : [el("tr", {}, el("td", { colspan: 3, class: "muted" }, "no reloads since the start"))]));
    if (state.page === "health") {
      drawOverload();
      const box = $("#chart-latency");
      if (!latencyChart) {
        latencyChart = timeChart(box, { series: [{}, { label: "store latency, mean (ms)", stroke: "#7c3aed", width: 1 },
          { label: "degraded decisions/s", stroke: "#dc2626", width: 1 }] }, 200);
      }
      const [i0, i1] = viewIdx();
      show(latencyChart, clip([state.xs, state.latency, state.degraded], i0, i1));
    }
  }

  // ---- keys ----
  function bar(pct) {
    const cls = pct >= 100 ? "bar full" : pct >= 80 ? "bar warn" : "bar";
    const b = el("div", { class: cls, role: "progressbar", "aria-valuenow": pct.toFixed(1) });
    const s = el("span", {});
    s.style.width = Math.min(100, pct) + "%";
    b.append(s);
    return b;
  }
  function quotaRow(q, full) {
    const cells = [el("td", { class: "key" }, q.key), el("td", {}, q.plan)];
    if (full) cells.push(el("td", {}, q.source));
    cells.push(el("td", {}, bar(q.percent), " ", q.percent.toFixed(1) + "%"));
    cells.push(el("td", { class: "num" }, q.used.toLocaleString() + " / " + q.capacity.toLocaleString()));
    if (full) cells.push(el("td", { class: "num" }, (q.capacity - q.used).toLocaleString()));
    cells.push(el("td", {}, new Date(q.resets_at).toLocaleString()));
    return el("tr", { "data-key": q.key }, ...cells);
  }
  async function pollQuotas() {
    clearTimeout(state.quotaTimer);
    if (state.page !== "keys") return;
    try {
      const data = await getJSON("api/quotas");
      $("#quotas tbody").replaceChildren(...(data.keys.length ? data.keys.map((q) => quotaRow(q, true))
        : [el("tr", {}, el("td", { colspan: 7, class: "muted" }, "no API key has a quota"))]));
      $("#nearest tbody").replaceChildren(...data.nearest.map((q) => quotaRow(q, false)));
      document.body.dataset.quotas = String(Date.now());
    } catch (e) {
      if (e.message !== "unauthorized") setStatus(e.message, true);
    }
    state.quotaTimer = setTimeout(pollQuotas, 2000);
  }

  // redraw draws the pages again from what is kept (a new second, a new
  // range or zoom).
  function redraw() {
    drawTraffic(state.lastData);
    drawHealth(state.lastData);
  }

  // ---- polling ----
  async function poll() {
    clearTimeout(state.timer);
    try {
      const q = state.until ? "?since=" + state.until : "";
      const data = await getJSON("api/overview" + q);
      append(data);
      state.lastData = data;
      redraw();
      setStatus("live · " + data.instances.length + " instance" + (data.instances.length === 1 ? "" : "s") +
        " · config " + (data.instances[0].config_version || "–") + " · " + new Date(data.until * 1000).toLocaleTimeString());
      document.body.dataset.until = String(data.until);
      document.body.dataset.total = String(sum((state.series["all"] || { d: [] }).d, 0));
    } catch (e) {
      if (e.message === "unauthorized") return;
      setStatus(e.message, true);
    }
    state.timer = setTimeout(poll, 1000);
  }

  showPage();
  setRange(state.range);
  poll();
})();
