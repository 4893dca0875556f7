// eoc-proxy's page: polls /ui/data every 2 s and draws it with plain DOM and SVG.
// No library and no network beyond the proxy itself.
"use strict";
(function () {
  const colours = ["#2e90fa", "#12b76a", "#f79009", "#9e77ed", "#f04438", "#06aed4", "#667085", "#ee46bc"];
  const stageOrder = ["cache", "kv", "graph", "neural"];

  // fmtJ shows joules with 6 decimals (µJ): the e2e test reads this rounding.
  function fmtJ(j) { return (j || 0).toFixed(6); }
  function fmtRate(j) { return j == null ? "–" : j.toPrecision(4); }
  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text != null) e.textContent = String(text);
    return e;
  }
  function fill(id, rows) {
    const body = document.querySelector("#" + id + " tbody");
    body.replaceChildren(...rows);
  }
  function row(cells, attrs) {
    const tr = el("tr", attrs);
    for (const c of cells) {
      if (c instanceof Node) { tr.append(c); continue; }
      const [text, cls, title] = Array.isArray(c) ? c : [c, ""];
      const attrs = cls ? { class: cls } : {};
      if (title) attrs.title = title;
      tr.append(el("td", attrs, text));
    }
    return tr;
  }
  // receiptCell shows the receipt of the figure in the row: the settlement's when the call's
  // figure settled after its response, naming the client's (of the provisional figure) too.
  function receiptCell(c) {
    if (c.settled_receipt) {
      return [c.settled_receipt.slice(0, 16) + " (settled)", "receipt",
        "settlement " + c.settled_receipt + "; client's (provisional) " + (c.receipt || "")];
    }
    return [(c.receipt || "").slice(0, 16), "receipt", c.receipt];
  }
  function stageName(s) { return s === "" ? "(none)" : s; }

  // chart draws stacked bars, one per minute, one colour per key.
  function chart(id, minutes, field, order) {
    const keys = new Set();
    for (const m of minutes) for (const k in m[field]) keys.add(k);
    const ks = [...keys].sort((a, b) => {
      const ia = order ? order.indexOf(a) : -1, ib = order ? order.indexOf(b) : -1;
      return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib) || a.localeCompare(b);
    });
    const W = 900, H = 180, pad = 40, bw = (W - pad) / minutes.length;
    let max = 0;
    for (const m of minutes) { let t = 0; for (const k of ks) t += m[field][k] || 0; max = Math.max(max, t); }
    const ns = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    svg.setAttribute("preserveAspectRatio", "none");
    const text = (x, y, s, anchor) => {
      const t = document.createElementNS(ns, "text");
      t.setAttribute("x", x); t.setAttribute("y", y); t.setAttribute("font-size", "11");
      t.setAttribute("fill", "#667085"); t.setAttribute("text-anchor", anchor || "start");
      t.textContent = s; svg.append(t);
    };
    text(2, 12, max > 0 ? max.toPrecision(3) + " J" : "0 J");
    minutes.forEach((m, i) => {
      let y = H - 16;
      ks.forEach((k, j) => {
        const v = m[field][k] || 0;
        if (v <= 0 || max <= 0) return;
        const h = (v / max) * (H - 36);
        const r = document.createElementNS(ns, "rect");
        r.setAttribute("x", pad + i * bw + 2); r.setAttribute("width", Math.max(bw - 4, 1));
        r.setAttribute("y", y - h); r.setAttribute("height", h);
        r.setAttribute("fill", colours[j % colours.length]);
        const tip = document.createElementNS(ns, "title");
        tip.textContent = `${k}: ${fmtJ(v)} J`;
        r.append(tip); svg.append(r);
        y -= h;
      });
      if (i % 3 === 0 || i === minutes.length - 1) {
        const d = new Date(m.minute);
        text(pad + i * bw + bw / 2, H - 2, d.toTimeString().slice(0, 5), "middle");
      }
    });
    const legend = el("div", { class: "legend" });
    ks.forEach((k, j) => {
      const s = el("span", { style: "--c:" + colours[j % colours.length] }, stageName(k));
      legend.append(s);
    });
    document.getElementById(id).replaceChildren(svg, legend);
  }

  function bounds(c) {
    // The energy package may add bounds to the figure; show them when the row has them.
    const lo = c.joules_low, hi = c.joules_high;
    if (lo == null && hi == null) return "–";
    return `${lo == null ? "?" : fmtJ(lo)} … ${hi == null ? "?" : fmtJ(hi)}`;
  }

  function draw(d) {
    let spent = 0, calls = 0;
    for (const s of d.stages || []) { spent += s.joules; calls += s.calls; }
    document.getElementById("spent").textContent = fmtJ(spent) + " J";
    document.getElementById("saved").textContent = fmtJ(d.saved.joules) + " J";
    document.getElementById("saved-share").textContent =
      (100 * d.saved.share).toFixed(1) + " % of what the neural stage would have spent (" +
      fmtJ(d.saved.neural_joules + d.saved.joules) + " J)";
    document.getElementById("calls").textContent = String(calls);
    document.getElementById("since").textContent = "since " + new Date(d.since).toLocaleString();

    chart("chart-stages", d.minutes, "stages", stageOrder);
    chart("chart-models", d.minutes, "models", null);

    const stages = (d.stages || []).slice().sort((a, b) => {
      const ia = stageOrder.indexOf(a.name), ib = stageOrder.indexOf(b.name);
      return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib);
    });
    fill("stages", stages.map(s => row([stageName(s.name), [s.calls, "num"], [fmtJ(s.joules), "num joules"], [fmtJ(s.saved), "num"]],
      { "data-stage": s.name })));
    fill("models", (d.models || []).map(m => row([m.name || "(unknown)", [m.calls, "num"], [fmtJ(m.joules), "num"], [fmtJ(m.saved), "num"]],
      { "data-model": m.name })));
    fill("backends", (d.backends || []).map(p => row([p.model, p.backend, [p.calls, "num"],
      [fmtRate(p.joules_per_completion_token), "num"], [fmtRate(p.estimated_joules_per_completion_token), "num"],
      [p.calls ? (100 * p.measured / p.calls).toFixed(0) + " %" : "–", "num"],
      [p.calls ? (100 * p.estimated / p.calls).toFixed(0) + " %" : "–", "num"],
      Object.entries(p.reasons || {}).map(([r, n]) => `${r} ×${n}`).join(", ") || "–"])));
    fill("counters", (d.counters || []).map(c => row([c.name, [c.live ? "yes" : "no", c.live ? "live-yes" : "live-no"], c.reason || ""])));
    const budgets = d.budgets || [];
    // A partial coverage means part of the spend is unknown: what is left is an upper bound.
    fill("budgets", budgets.length ? budgets.map(b => row([b.id, [fmtJ(b.budget), "num"], b.per,
      [(b.coverage === "partial" ? "≤ " : "") + fmtJ(b.left), "num"], b.coverage]))
      : [row([d.auth ? "no key has a budget" : "auth is off: no keys", "", "", "", ""])]);
    fill("calls-table", (d.calls || []).map(c => row([new Date(c.time).toLocaleTimeString(), stageName(c.stage), c.model, c.backend || "–",
      [c.status, "num"], [fmtJ(c.joules), "num"], bounds(c), [fmtJ(c.joules_saved), "num"], c.grade || "–", c.method || "–",
      c.reason || "–", receiptCell(c)])));
  }

  const status = document.getElementById("status");
  async function poll() {
    try {
      const r = await fetch("/ui/data", { cache: "no-store", credentials: "same-origin" });
      if (!r.ok) throw new Error("HTTP " + r.status);
      const d = await r.json();
      draw(d);
      status.className = "status";
      status.textContent = "updated " + new Date(d.now).toLocaleTimeString();
      document.body.dataset.updated = d.now;
    } catch (e) {
      status.className = "status err";
      status.textContent = "no data: " + e.message;
    }
  }
  poll();
  setInterval(poll, 2000);
})();
