// minimpi dashboard: draws the launcher's view documents (launcher/dashboard/live.py).
// Live: a document is pushed over Server-Sent Events ("events") a few times a second.
// Replay (`minimpi view TRACE`): the page asks for the document of a moment ("frame?t=").
// The page only reads: no request it makes changes the job.
"use strict";
(function () {
  const token = document.body.dataset.token;
  const SVG_NS = "http://www.w3.org/2000/svg";
  const $ = (sel) => document.querySelector(sel);
  const withToken = (path) => path + (path.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(token);

  const STATE_LABEL = {
    computing: "computing", mpi: "in MPI", blocked: "blocked", finished: "finished",
    exited: "exited", failed: "failed", silent: "no report", starting: "starting",
    running: "running",
  };
  const STATE_COLOUR = {
    computing: "#3b82f6", mpi: "#16a34a", blocked: "#f59e0b", finished: "#64748b",
    exited: "#a8b3c1", failed: "#dc2626", silent: "#9333ea", starting: "#d5dce4",
    running: "#d5dce4",
  };
  const ui = { metric: "messages", comm: "all", outrank: "all" };
  const stats = { updates: 0, times: [] };
  let current = null;
  let ended = false;
  let mode = "live";

  // ---- small helpers ----------------------------------------------------------------
  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else e.setAttribute(k, v);
    }
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }
  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }
  function titled(node, text) { node.appendChild(svg("title", {}, text)); return node; }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
  function fmtBytes(n) {
    if (n === null || n === undefined) return "";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0; let v = n;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (i === 0 ? String(v) : v.toFixed(v < 10 ? 1 : 0)) + " " + units[i];
  }
  function fmtSecs(s) {
    if (s === null || s === undefined) return "";
    if (s < 0.25) return mode === "replay" ? (s * 1000).toFixed(s < 0.01 ? 3 : 1) + " ms" : "<0.25 s";
    if (s < 60) return s.toFixed(1) + " s";
    const m = Math.floor(s / 60);
    return m + " min " + Math.round(s - 60 * m) + " s";
  }
  function fmtCount(n) { return n >= 1e6 ? (n / 1e6).toFixed(1) + "M" : n >= 1e4 ? (n / 1e3).toFixed(0) + "k" : String(n); }
  function peerText(peers) {
    return (peers || []).map(([label, peer, world]) => {
      let p = peer === -1 ? "ANY" : peer === -2 ? "PROC_NULL" : String(peer);
      if (world !== null && world !== undefined && world !== peer) p += " (world " + world + ")";
      return label + " " + p;
    }).join(", ");
  }

  // ---- the header ---------------------------------------------------------------------
  function setConn(text) { $("#conn").textContent = text; }
  function updateRate() {
    const now = performance.now();
    stats.times = stats.times.filter((t) => now - t < 5000);
    if (stats.times.length < 2) return 0;
    return (stats.times.length - 1) / ((stats.times[stats.times.length - 1] - stats.times[0]) / 1000);
  }
  function renderHeader(d) {
    $("#title").textContent = d.title + "  (-n " + d.nprocs + ")";
    document.title = "minimpi: " + d.title;
    const pill = $("#status");
    const job = d.job || {};
    let cls = job.status || "starting";
    let text = job.status || "";
    if (d.mode === "replay") { cls = "ended-ok"; text = "replay"; }
    else if (job.status === "ended") {
      cls = job.exit_code === 0 ? "ended-ok" : "ended-bad";
      text = "ended, exit code " + job.exit_code;
    }
    pill.className = "pill " + cls;
    pill.textContent = text;
    pill.dataset.status = job.status || "";
    $("#elapsed").textContent = d.mode === "replay" ? "" : fmtSecs(job.ended_after !== null && job.ended_after !== undefined ? job.ended_after : d.elapsed);
    if (mode === "live" && !ended) {
      const rate = updateRate();
      setConn("live" + (rate ? ", " + rate.toFixed(1) + " updates/s" : ""));
      document.body.dataset.rate = rate.toFixed(2);
    }
  }

  // ---- ranks --------------------------------------------------------------------------
  const COLUMNS = ["rank", "state", "host", "pid", "cpu num", "mem num", "call", "comm", "peer",
    "tag num", "bytes num", "for num", "out"];
  let rowsByRank = [];
  function ensureRows(n) {
    const body = $("#ranks tbody");
    if (rowsByRank.length === n) return;
    clear(body);
    rowsByRank = [];
    for (let r = 0; r < n; r++) {
      const tr = el("tr", { "data-rank": String(r) });
      const cells = {};
      for (const c of COLUMNS) {
        const td = el("td", { class: c });
        tr.appendChild(td);
        cells[c.split(" ")[0]] = td;
      }
      body.appendChild(tr);
      rowsByRank.push({ tr, cells });
    }
  }
  function renderRanks(d, inCycle) {
    ensureRows(d.ranks.length);
    $("#ranks").classList.toggle("compact", d.ranks.length > 24);
    const counts = {};
    for (const row of d.ranks) {
      const { tr, cells } = rowsByRank[row.rank];
      counts[row.state] = (counts[row.state] || 0) + 1;
      tr.dataset.state = row.state;
      const culprit = d.failure && d.failure.rank === row.rank;
      tr.className = "state-row-" + row.state + (inCycle.has(row.rank) ? " in-cycle" : "") + (culprit ? " culprit" : "");
      cells.rank.textContent = String(row.rank);
      clear(cells.state);
      cells.state.appendChild(el("i", { class: "chip state-" + row.state }));
      let label = STATE_LABEL[row.state] || row.state;
      if (row.state === "exited" || row.state === "failed") label = row.exit || label;
      if (row.state === "blocked" && row.blocked_for !== null) label += " " + fmtSecs(row.blocked_for);
      cells.state.appendChild(document.createTextNode(label));
      if (culprit) cells.state.appendChild(el("span", { class: "badge" }, "ended the job"));
      cells.host.textContent = row.host || "";
      cells.pid.textContent = row.pid || "";
      cells.cpu.textContent = row.cpu === null || row.cpu === undefined ? "" : Math.round(row.cpu) + " %";
      cells.mem.textContent = row.rss ? fmtBytes(row.rss) : "";
      const call = row.call;
      clear(cells.call);
      if (call) {
        let name = call.call + (call.request ? " (" + call.request + ")" : "");
        cells.call.appendChild(el("div", {}, name));
      }
      if (row.text) cells.call.appendChild(el("div", { class: "detail", title: row.text }, row.text));
      cells.comm.textContent = call ? call.comm || "" : "";
      cells.peer.textContent = call ? peerText(call.peers) : "";
      cells.tag.textContent = call && call.tag !== null && call.tag !== undefined ? (call.tag === -1 ? "ANY" : String(call.tag)) : "";
      cells.bytes.textContent = call && call.nbytes !== null && call.nbytes !== undefined ? fmtBytes(call.nbytes) : "";
      const dur = row.state === "blocked" && row.blocked_for !== null ? row.blocked_for : call ? call.for : null;
      cells.for.textContent = dur === null || dur === undefined ? "" : fmtSecs(dur);
      const last = row.out && row.out.length ? row.out[row.out.length - 1] : null;
      cells.out.textContent = last ? last[2] : "";
      cells.out.title = (row.out || []).map((o) => o[2]).join("\n");
    }
    $("#ranks-sub").textContent = Object.entries(counts).map(([s, n]) => n + " " + (STATE_LABEL[s] || s)).join(", ");
  }

  // ---- who waits for whom ---------------------------------------------------------------
  function renderWaitfor(d) {
    const wf = d.waitfor || { edges: [], blocked: [], cycle: [] };
    const root = $("#waitfor");
    clear(root);
    const nodes = new Set(wf.blocked);
    for (const [a, b] of wf.edges) { nodes.add(a); nodes.add(b); }
    const list = Array.from(nodes).sort((x, y) => x - y);
    const note = $("#waitfor-note");
    if (!list.length) {
      root.removeAttribute("viewBox");
      root.setAttribute("height", "60");
      root.appendChild(svg("text", { x: 12, y: 34, fill: "#5f6b7a" },
        d.mode === "replay" ? "No rank is inside a blocking point-to-point call." : "No rank is blocked."));
      note.textContent = d.mode === "replay" ? "" : "A rank counts as blocked once a wait has lasted about a second.";
      return;
    }
    const w = root.clientWidth || 460, h = list.length > 24 ? 420 : 320;
    root.setAttribute("height", String(h));
    root.setAttribute("viewBox", "0 0 " + w + " " + h);
    const defs = svg("defs");
    for (const [id, colour] of [["arrow", "#8a96a6"], ["arrow-cycle", "#dc2626"]]) {
      const m = svg("marker", { id, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7,
        markerHeight: 7, orient: "auto-start-reverse" });
      m.appendChild(svg("path", { d: "M0,0 L10,5 L0,10 z", fill: colour }));
      defs.appendChild(m);
    }
    root.appendChild(defs);
    const n = list.length;
    const nodeR = Math.max(7, Math.min(16, 130 / n + 4));
    const R = n === 1 ? 0 : Math.min(w, h) / 2 - nodeR - 14;
    const pos = {};
    list.forEach((r, i) => {
      const a = -Math.PI / 2 + (2 * Math.PI * i) / n;
      pos[r] = [w / 2 + R * Math.cos(a), h / 2 + R * Math.sin(a)];
    });
    const pairs = new Set(wf.edges.map(([a, b]) => a + ">" + b));
    const states = {};
    for (const row of d.ranks) states[row.rank] = row.state;
    const cycleNodes = new Set(wf.cycle);
    for (const [a, b, text, cyc] of wf.edges) {
      const [x0, y0] = pos[a], [x2, y2] = pos[b];
      const dx = x2 - x0, dy = y2 - y0, len = Math.hypot(dx, dy) || 1;
      const bend = pairs.has(b + ">" + a) ? 0.18 * len : 0.06 * len;
      const cx = (x0 + x2) / 2 - (dy / len) * bend, cy = (y0 + y2) / 2 + (dx / len) * bend;
      const s = shorten(x0, y0, cx, cy, nodeR + 1), e = shorten(x2, y2, cx, cy, nodeR + 3);
      const path = svg("path", {
        d: `M${s[0]},${s[1]} Q${cx},${cy} ${e[0]},${e[1]}`, fill: "none",
        stroke: cyc ? "#dc2626" : "#8a96a6", "stroke-width": cyc ? 3 : 1.4,
        "marker-end": cyc ? "url(#arrow-cycle)" : "url(#arrow)",
        class: cyc ? "edge cycle" : "edge", "data-from": a, "data-to": b,
      });
      root.appendChild(titled(path, text));
    }
    for (const r of list) {
      const [x, y] = pos[r];
      const g = svg("g", { class: "node" + (cycleNodes.has(r) ? " cycle" : ""), "data-rank": r });
      g.appendChild(svg("circle", { cx: x, cy: y, r: nodeR, fill: STATE_COLOUR[states[r]] || "#d5dce4",
        stroke: cycleNodes.has(r) ? "#dc2626" : "#334155", "stroke-width": cycleNodes.has(r) ? 3 : 1 }));
      g.appendChild(svg("text", { x, y: y + 4, "text-anchor": "middle", "font-size": Math.max(9, nodeR - 2),
        "font-weight": 700, fill: states[r] === "blocked" || states[r] === "exited" || states[r] === "starting" ? "#1d2733" : "#fff" }, String(r)));
      root.appendChild(titled(g, "rank " + r + ": " + (STATE_LABEL[states[r]] || states[r] || "")));
    }
    if (wf.cycle.length) {
      note.textContent = "Wait-for cycle (deadlock): " + wf.cycle_text + " -> rank " + wf.cycle[0];
      note.dataset.cycle = wf.cycle.join(",");
    } else {
      note.textContent = wf.blocked.length + " rank(s) blocked; arrows point to the rank each waits for; no cycle.";
      note.dataset.cycle = "";
    }
  }
  function shorten(x, y, tx, ty, by) {
    const dx = tx - x, dy = ty - y, len = Math.hypot(dx, dy) || 1;
    return [x + (dx / len) * by, y + (dy / len) * by];
  }

  // ---- the message matrix ------------------------------------------------------------------
  const RAMP = [[224, 242, 254], [96, 165, 250], [30, 64, 175], [23, 23, 84]];
  function ramp(t) {
    t = Math.max(0, Math.min(1, t)) * (RAMP.length - 1);
    const i = Math.min(RAMP.length - 2, Math.floor(t)), f = t - i;
    const c = RAMP[i].map((v, k) => Math.round(v + (RAMP[i + 1][k] - v) * f));
    return "rgb(" + c.join(",") + ")";
  }
  function renderMatrix(d) {
    const comms = (d.matrix && d.matrix.comms) || [];
    const select = $("#comm");
    const ids = comms.map((c) => c.id).join("|");
    if (select.dataset.ids !== ids) {
      clear(select);
      for (const c of comms) select.appendChild(el("option", { value: c.id }, c.name + (c.id === "all" ? "" : " (" + c.ranks.length + " ranks)")));
      select.dataset.ids = ids;
      if (!comms.some((c) => c.id === ui.comm)) ui.comm = "all";
      select.value = ui.comm;
    }
    const m = comms.find((c) => c.id === ui.comm) || comms[0];
    const root = $("#matrix");
    clear(root);
    if (!m) return;
    if (!m.cells.length) {
      root.removeAttribute("viewBox");
      root.setAttribute("height", "60");
      root.appendChild(svg("text", { x: 12, y: 34, fill: "#5f6b7a" }, "No message sent yet" + (m.id === "all" ? "." : " on " + m.name + ".")));
      $("#matrix-note").textContent = "";
      return;
    }
    const n = m.ranks.length, index = {};
    m.ranks.forEach((r, i) => { index[r] = i; });
    const w = Math.min(root.clientWidth || 460, 460);
    const margin = 34, cell = (w - margin - 8) / Math.max(1, n), size = margin + cell * n;
    root.setAttribute("viewBox", "0 0 " + w + " " + (size + 40));
    root.setAttribute("height", String(size + 40));
    root.appendChild(svg("rect", { x: margin, y: margin, width: cell * n, height: cell * n, fill: "#f7f9fb", stroke: "#dfe3e8" }));
    const every = n <= 16 ? 1 : n <= 32 ? 2 : 8;
    for (let i = 0; i < n; i++) {
      if (i % every) continue;
      const c = margin + (i + 0.5) * cell;
      root.appendChild(svg("text", { x: c, y: margin - 6, "text-anchor": "middle", "font-size": 10, fill: "#5f6b7a" }, String(m.ranks[i])));
      root.appendChild(svg("text", { x: margin - 6, y: c + 3, "text-anchor": "end", "font-size": 10, fill: "#5f6b7a" }, String(m.ranks[i])));
    }
    root.appendChild(svg("text", { x: margin, y: 11, "font-size": 10.5, fill: "#1d2733" }, "receiver \u2192"));
    root.appendChild(svg("text", { x: 9, y: margin + 2, "font-size": 10.5, fill: "#1d2733", transform: `rotate(90 9 ${margin + 2})` }, "sender \u2192"));
    const key = ui.metric === "bytes" ? 3 : 2;
    let max = 0;
    for (const c of m.cells) max = Math.max(max, c[key]);
    for (const [s, t, msgs, bytes] of m.cells) {
      const v = key === 3 ? bytes : msgs;
      if (!v || !(s in index) || !(t in index)) continue;
      const level = max > 1 ? Math.log(1 + v) / Math.log(1 + max) : 1;
      const rect = svg("rect", {
        x: margin + index[t] * cell + 0.5, y: margin + index[s] * cell + 0.5,
        width: Math.max(1, cell - 1), height: Math.max(1, cell - 1), fill: ramp(0.15 + 0.85 * level),
        class: "cell", "data-src": s, "data-dst": t, "data-messages": msgs, "data-bytes": bytes,
      });
      root.appendChild(titled(rect, `rank ${s} \u2192 rank ${t}: ${msgs} messages, ${fmtBytes(bytes)}`));
    }
    // the colour scale
    const ly = size + 14, lw = Math.min(220, w - margin - 120);
    for (let i = 0; i < 20; i++) {
      root.appendChild(svg("rect", { x: margin + (i * lw) / 20, y: ly, width: lw / 20 + 0.5, height: 10, fill: ramp(0.15 + (0.85 * i) / 19) }));
    }
    root.appendChild(svg("text", { x: margin, y: ly + 24, "font-size": 10, fill: "#5f6b7a" }, "1"));
    root.appendChild(svg("text", { x: margin + lw, y: ly + 24, "font-size": 10, fill: "#5f6b7a", "text-anchor": "end" },
      key === 3 ? fmtBytes(max) : fmtCount(max)));
    root.appendChild(svg("text", { x: margin + lw + 10, y: ly + 9, "font-size": 10, fill: "#5f6b7a" }, "log scale, empty = none"));
    $("#matrix-note").textContent = `${m.name}: ${fmtCount(m.messages)} messages, ${fmtBytes(m.bytes)} sent` +
      (d.mode === "replay" ? " up to this moment" : " so far") + "; each rank counts what it sends.";
  }

  // ---- collectives ----------------------------------------------------------------------
  function renderCollectives(d) {
    const box = $("#colls");
    clear(box);
    const colls = d.collectives || [];
    if (!colls.length) { box.appendChild(el("p", { class: "empty" }, "No collective call in progress right now.")); return; }
    for (const c of colls) {
      const div = el("div", { class: "coll", "data-call": c.call || "", "data-comm": c.comm || "" });
      const h = el("h3", {}, (c.collective || c.call) + (c.algorithm ? " \u00b7 " + c.algorithm : "") + " on " + c.comm);
      const bits = [c.size + " ranks"];
      if (c.root !== null && c.root !== undefined) bits.push("root " + c.root);
      if (c.nbytes) bits.push(fmtBytes(c.nbytes) + " per rank");
      if (c.blocking === false) bits.push("nonblocking");
      h.appendChild(el("span", { class: "sub" }, bits.join(" \u00b7 ")));
      div.appendChild(h);
      div.appendChild(c.picture ? schedule(c, d) : stepBars(c));
      box.appendChild(div);
    }
  }
  function stepOf(c, r) { const s = c.steps[String(r)]; return s === undefined ? null : s; }
  function stepBars(c) {
    const grid = el("div", { class: "steps" });
    let max = 1;
    for (const s of Object.values(c.steps)) max = Math.max(max, s);
    for (let r = 0; r < c.size; r++) {
      const s = stepOf(c, r);
      const world = c.group && c.group[r] !== undefined ? c.group[r] : r;
      grid.appendChild(el("span", {}, "rank " + r + (world !== r ? " (world " + world + ")" : "")));
      const bar = el("div", { class: "bar" });
      const fill = el("i");
      fill.style.width = s === null ? "0%" : Math.round((100 * s) / max) + "%";
      bar.appendChild(fill);
      grid.appendChild(bar);
      grid.appendChild(el("span", { class: "sub" }, s === null ? "not in this call now" : "step " + s));
    }
    return grid;
  }
  function schedule(c, d) {
    const pic = c.picture, p = c.size, cols = pic.steps;
    const left = 96, top = 26, rowH = 24;
    const colW = Math.max(34, Math.min(76, 760 / Math.max(1, cols)));
    const w = left + cols * colW + 16, h = top + p * rowH + 8;
    const root = svg("svg", { width: w, height: h, viewBox: `0 0 ${w} ${h}`, class: "schedule" });
    const defs = svg("defs");
    const mk = svg("marker", { id: "m-" + c.tag, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 6, markerHeight: 6, orient: "auto" });
    mk.appendChild(svg("path", { d: "M0,0 L10,5 L0,10 z", fill: "#94a3b8" }));
    defs.appendChild(mk);
    root.appendChild(defs);
    const y = (r) => top + r * rowH + rowH / 2;
    const x = (col) => left + col * colW + colW / 2;
    for (let col = 0; col < cols; col++) {
      root.appendChild(svg("text", { x: x(col), y: 14, "text-anchor": "middle", "font-size": 10.5, fill: "#5f6b7a" }, String(col + 1)));
      root.appendChild(svg("line", { x1: left + col * colW, x2: left + col * colW, y1: top - 4, y2: h - 6, stroke: "#eef1f4" }));
    }
    root.appendChild(svg("text", { x: 4, y: 14, "font-size": 10.5, fill: "#5f6b7a" }, "step \u2192"));
    const worldState = {};
    for (const row of d.ranks) worldState[row.rank] = row.state;
    for (let r = 0; r < p; r++) {
      const s = stepOf(c, r);
      const world = c.group && c.group[r] !== undefined ? c.group[r] : r;
      root.appendChild(svg("text", { x: 4, y: y(r) + 4, "font-size": 11, fill: s === null ? "#9aa5b1" : "#1d2733" },
        "rank " + r + (world !== r ? " (w" + world + ")" : "")));
      root.appendChild(svg("line", { x1: left, x2: w - 8, y1: y(r), y2: y(r), stroke: "#e5e9ee" }));
      if (s !== null && s > 0) {
        const lc = pic.rank_columns[r] || [];
        const k = Math.min(s - 1, lc.length - 1);
        const col = k >= 0 ? lc[k] : 0;
        if (col > 0) root.appendChild(svg("rect", { x: left + 1, y: y(r) - 8, width: col * colW - 2, height: 16, rx: 4, fill: "#dcfce7" }));
        const mark = svg("rect", { x: left + col * colW + 3, y: y(r) - 9, width: colW - 6, height: 18, rx: 5,
          fill: STATE_COLOUR[worldState[world]] || STATE_COLOUR.mpi, class: "position", "data-rank": r, "data-column": col });
        root.appendChild(titled(mark, "rank " + r + " is in step " + s + (lc.length ? " of " + lc.length : "")));
      }
    }
    for (const [src, dst, col, dcol, nbytes] of pic.messages) {
      const x0 = x(col) - colW * 0.28, x1 = x(dcol) + colW * 0.28;
      const line = svg("line", { x1: x0, y1: y(src), x2: x1, y2: y(dst), stroke: "#94a3b8", "stroke-width": 1.2, "marker-end": "url(#m-" + c.tag + ")" });
      root.appendChild(titled(line, `step ${col + 1}: rank ${src} \u2192 rank ${dst}, ${fmtBytes(nbytes)}`));
    }
    return root;
  }

  // ---- output and banners ------------------------------------------------------------------
  function renderOutput(d) {
    const select = $("#outrank");
    if (select.options.length !== d.nprocs + 1) {
      clear(select);
      select.appendChild(el("option", { value: "all" }, "every rank"));
      for (let r = 0; r < d.nprocs; r++) select.appendChild(el("option", { value: String(r) }, "rank " + r));
      select.value = ui.outrank;
    }
    const pre = $("#output");
    const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    clear(pre);
    const lines = (d.output || []).filter((o) => ui.outrank === "all" || String(o[1]) === ui.outrank);
    if (!lines.length) pre.appendChild(el("span", { class: "empty" }, d.mode === "replay" ? "(a trace records no output)" : "(nothing printed yet)"));
    for (const [, rank, stream, text] of lines) {
      pre.appendChild(el("span", { class: "who" }, "[" + rank + "] "));
      pre.appendChild(el("span", { class: stream === "stderr" ? "err" : "" }, text + "\n"));
    }
    if (atBottom) pre.scrollTop = pre.scrollHeight;
  }
  function banner(node, cls, head, lines, data) {
    node.hidden = false;
    node.className = "banner " + cls;
    clear(node);
    node.appendChild(el("h3", {}, head));
    if (lines.length) node.appendChild(el("pre", {}, lines.join("\n")));
    for (const [k, v] of Object.entries(data || {})) node.dataset[k] = v;
  }
  function renderBanners(d) {
    const diag = $("#diagnosis");
    if (d.diagnosis) {
      banner(diag, d.diagnosis.final ? "bad" : "warn",
        d.diagnosis.final ? "Deadlock" : "Every running rank is blocked",
        [d.diagnosis.summary].concat(d.diagnosis.lines), { final: d.diagnosis.final ? "1" : "0" });
    } else diag.hidden = true;
    const sum = $("#summary");
    const f = d.failure;
    if (d.summary) {
      const code = d.summary.code;
      const counts = d.summary.counts.map(([what, n]) => n + " rank" + (n > 1 ? "s" : "") + ": " + what).join("; ");
      let lines = d.summary.lines.slice();
      if (f && f.kind === "deadlock") lines = [f.summary, "(the wait-for graph and the report are shown above and below)"];
      if (!lines.length) lines = ["every rank finished its program"];
      banner(sum, code === 0 ? "ok" : "bad", "Job ended: exit code " + code + (counts ? "  \u2014  " + counts : ""), lines, { code: String(code) });
    } else if (f) {
      banner(sum, "bad", "The job is ending", [f.summary].concat(f.kind === "deadlock" ? [] : f.details), { code: "" });
    } else if (d.mode === "replay" && d.trace) {
      banner(sum, "ok", "Recorded trace", d.trace, {});
    } else sum.hidden = true;
  }

  // ---- one document ------------------------------------------------------------------------
  function render(d) {
    current = d;
    const inCycle = new Set((d.waitfor && d.waitfor.cycle) || []);
    renderHeader(d);
    renderBanners(d);
    renderRanks(d, inCycle);
    renderWaitfor(d);
    renderMatrix(d);
    renderCollectives(d);
    renderOutput(d);
  }
  // Documents that arrive while the page is still drawing are not queued: only the newest
  // is drawn, so a slow machine shows the job late by one drawing at most, never falls behind.
  let pending = null;
  function receive(d) {
    stats.updates += 1;
    stats.times.push(performance.now());
    document.body.dataset.updates = String(stats.updates);
    const first = pending === null;
    pending = d;
    if (first) {
      setTimeout(() => {
        const latest = pending;
        pending = null;
        document.body.dataset.seq = String(latest.seq || 0);
        render(latest);
      }, 0);
    }
  }

  // ---- controls ----------------------------------------------------------------------------
  $("#comm").addEventListener("change", (e) => { ui.comm = e.target.value; if (current) renderMatrix(current); });
  for (const radio of document.querySelectorAll("input[name=metric]")) {
    radio.addEventListener("change", (e) => { ui.metric = e.target.value; if (current) renderMatrix(current); });
  }
  $("#outrank").addEventListener("change", (e) => { ui.outrank = e.target.value; if (current) renderOutput(current); });
  window.addEventListener("resize", () => { if (current) render(current); });

  // ---- live: the push channel ------------------------------------------------------------------
  function live() {
    const events = new EventSource(withToken("events"));
    events.onmessage = (e) => receive(JSON.parse(e.data));
    events.addEventListener("end", () => {
      ended = true;
      events.close();
      setConn("the job has ended; this page keeps its last state");
    });
    events.onerror = () => {
      if (ended || (current && current.job && current.job.status === "ended")) {
        ended = true;
        events.close();
        setConn("the job has ended; this page keeps its last state");
      } else setConn("connection lost, retrying\u2026");
    };
  }

  // ---- replay: minimpi view TRACE -------------------------------------------------------------
  function replay(meta) {
    mode = "replay";
    const bar = $("#replay"), slider = $("#slider"), label = $("#replay-time"), play = $("#play");
    bar.hidden = false;
    setConn("replay of a recorded trace");
    const duration = meta.duration || 0;
    let inFlight = false, wanted = null, timer = null;
    const at = () => (duration * Number(slider.value)) / 1000;
    function fetchFrame() {
      if (inFlight) { wanted = at(); return; }
      inFlight = true;
      const t = at();
      label.textContent = fmtMs(t) + " / " + fmtMs(duration);
      fetch(withToken("frame?t=" + t)).then((r) => r.json()).then((d) => receive(d)).finally(() => {
        inFlight = false;
        if (wanted !== null) { wanted = null; fetchFrame(); }
      });
    }
    function fmtMs(s) { return s < 1 ? (s * 1000).toFixed(2) + " ms" : s.toFixed(3) + " s"; }
    slider.addEventListener("input", fetchFrame);
    play.addEventListener("click", () => {
      if (timer) { clearInterval(timer); timer = null; play.textContent = "\u25b6 play"; return; }
      if (Number(slider.value) >= 1000) slider.value = "0";
      play.textContent = "\u275a\u275a pause";
      timer = setInterval(() => {
        slider.value = String(Math.min(1000, Number(slider.value) + 4));
        fetchFrame();
        if (Number(slider.value) >= 1000) { clearInterval(timer); timer = null; play.textContent = "\u25b6 play"; }
      }, 100);
    });
    fetchFrame();
  }

  fetch(withToken("meta")).then((r) => r.json()).then((meta) => {
    if (meta.mode === "replay") replay(meta); else live();
  }).catch(() => live());
})();
