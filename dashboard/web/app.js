// The Floodgate dashboard: polls /ui/api/overview once a second (only the
// seconds it has not seen) and /ui/api/quotas every two seconds while the
// keys page is open, and draws with uPlot.
"use strict";

(function () {
  const WINDOW = 3600;
  const state = {
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
  // kept for this tab and removed from the address.
  (function takeToken() {
    const m = location.hash.match(/[#&]token=([^&]+)/);
    if (m) {
      state.token = decodeURIComponent(m[1]);
      sessionStorage.setItem("floodgate-token", state.token);
      const rest = location.hash.replace(/[#&]token=[^&]+/, "").replace(/^#?&?/, "");
      history.replaceState(null, "", location.pathname + (rest ? "#" + rest : "#traffic"));
    }
  })();

  function $(sel) { return document.querySelector(sel); }
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else e.setAttribute(k, v);
    }
    for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
    return e;
  }
  function setStatus(text, bad) {
    const s = $("#status");
    s.textContent = text;
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

  // ---- traffic ----
  function chartOpts(title, width, height) {
    return {
      title, width, height,
      scales: { x: { time: true } },
      axes: [{}, { size: 50 }],
      series: [
        {},
        { label: "decisions/s", stroke: "#2563eb", fill: "rgba(37,99,235,0.08)", width: 1 },
        { label: "429/s", stroke: "#dc2626", fill: "rgba(220,38,38,0.10)", width: 1 },
      ],
      legend: { live: false },
      cursor: { drag: { x: false, y: false } },
    };
  }

  function chartWidth(container) {
    return Math.max(300, container.clientWidth - 14);
  }

  function ensureChart(name) {
    if (state.charts[name]) return state.charts[name];
    let box;
    if (name === "all") {
      box = $("#chart-all");
    } else {
      box = el("div", { class: "chart", "data-limit": name });
      $("#charts").append(box);
    }
    const w = chartWidth(box.parentElement === $("#charts") ? box : box);
    const u = new uPlot(chartOpts(name === "all" ? "" : name, w, name === "all" ? 220 : 160), [[], [], []], box);
    state.charts[name] = u;
    return u;
  }

  function resizeCharts() {
    for (const [name, u] of Object.entries(state.charts)) {
      const box = u.root.parentElement;
      if (box && box.clientWidth > 0) u.setSize({ width: chartWidth(box), height: name === "all" ? 220 : 160 });
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
    const drop = state.xs.length - WINDOW;
    if (drop > 0) {
      state.xs.splice(0, drop);
      for (const s of Object.values(state.series)) { s.d.splice(0, drop); s.x.splice(0, drop); }
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
        u = state.overloadCharts[route] = new uPlot({ title: route, width: chartWidth(div), height: 180,
          scales: { x: { time: true }, ms: { auto: true } }, legend: { live: false },
          axes: [{}, { size: 50 }, { scale: "ms", side: 1, size: 50 }],
          series: [{}, { label: "cap (requests in flight)", stroke: "#2563eb", width: 1 },
            { label: "upstream latency (ms)", stroke: "#ea580c", width: 1, scale: "ms" }] }, [o.t, o.limit, o.ms], div);
      } else {
        u.setData([o.t, o.limit, o.ms]);
      }
    }
  }

  function sum(a, from) { let t = 0; for (let i = Math.max(0, from); i < a.length; i++) t += a[i]; return t; }

  function drawTraffic(data) {
    const names = ["all"].concat(Object.keys(state.series).filter((n) => n !== "all").sort());
    for (const name of names) {
      const s = state.series[name];
      ensureChart(name).setData([state.xs, s.d, s.x]);
    }
    const all = state.series["all"] || { d: [], x: [] };
    const last = all.d.length - 60;
    $("#rate").textContent = Math.round(sum(all.d, last) / 60).toLocaleString();
    $("#denied-rate").textContent = (sum(all.x, last) / 60).toFixed(1);
    $("#denied-hour").textContent = sum(all.x, 0).toLocaleString();
    $("#instance-count").textContent = data.instances.length;
    const tb = $("#top tbody");
    tb.replaceChildren(...(data.top.length ? data.top.map((h) => el("tr", {},
      el("td", {}, h.limit), el("td", {}, h.key), el("td", { class: "num" }, h.count.toLocaleString()), el("td", { class: "num" }, h.error)))
      : [el("tr", {}, el("td", { colspan: 4, class: "muted" }, "no 429s"))]));
  }

  // ---- health ----
  let latencyChart = null;
  function drawHealth(data) {
    const tb = $("#instances tbody");
    tb.replaceChildren(...data.instances.map((i) => el("tr", {},
      el("td", {}, i.id), el("td", {}, i.config_version || "–"), el("td", {}, i.store),
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
      const n = state.latency.length;
      const xs = state.xs.slice(-n);
      if (!latencyChart) {
        latencyChart = new uPlot({ width: chartWidth(box), height: 200, scales: { x: { time: true } }, legend: { live: false },
          axes: [{}, { size: 50 }],
          series: [{}, { label: "store latency, mean (ms)", stroke: "#7c3aed", width: 1 },
            { label: "degraded decisions/s", stroke: "#dc2626", width: 1 }] }, [xs, state.latency, state.degraded], box);
      } else {
        latencyChart.setData([xs, state.latency, state.degraded]);
      }
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
    const cells = [el("td", {}, q.key), el("td", {}, q.plan)];
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

  // ---- polling ----
  async function poll() {
    clearTimeout(state.timer);
    try {
      const q = state.until ? "?since=" + state.until : "";
      const data = await getJSON("api/overview" + q);
      append(data);
      drawTraffic(data);
      drawHealth(data);
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
  poll();
})();
