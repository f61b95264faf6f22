// The console polls /api/state, a second after the last poll ended, and renders it; the ask
// buttons post to /api/answer with the CSRF token the state carries. No library, no build step.
"use strict";
let csrf = "";

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
}

function bytes(n) {
  const u = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1000 && i < u.length - 1) { n /= 1000; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}

// fill replaces the rows of table id; a cell is a value or a td. Each cell takes its
// column's alignment from the header (class num on the th: numbers to the right), so that
// every value sits under its own header.
function fill(id, rows) {
  const t = document.getElementById(id);
  const heads = [...t.tHead.rows[0].cells];
  t.tBodies[0].replaceChildren(...rows.map(r => el("tr", {}, ...r.map((c, i) => {
    const td = c instanceof Element ? c : el("td", {}, String(c));
    if (heads[i] && heads[i].classList.contains("num")) td.classList.add("num");
    return td;
  }))));
}

async function answer(id, a) {
  const r = await fetch("/api/answer", {
    method: "POST", credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
    body: JSON.stringify({ id: id, answer: a }),
  });
  if (!r.ok) alert("answer failed: " + (await r.text()));
  refresh();
}

// renderAsks keeps one element per prompt, made once and updated in place, so that a
// button is never replaced under the pointer by the next poll.
const askEls = new Map();
function renderAsks(asks, now) {
  const box = document.getElementById("asks");
  const seen = new Set();
  for (const p of asks) {
    seen.add(p.id);
    let e = askEls.get(p.id);
    if (!e) {
      const b = (a, label, cls) => el("button", { class: cls || "", "data-answer": a, "data-id": String(p.id), onclick: () => answer(p.id, a) }, label);
      e = el("div", { class: "ask", "data-host": p.host, "data-port": String(p.port) },
        el("div", { class: "dst" }, p.host + ":" + p.port), el("div", { class: "meta" }),
        b("once", "Allow once", "allow"), b("run", "Allow for this run", "allow"), b("always", "Always allow", "allow"), b("deny", "Deny", "deny"));
      askEls.set(p.id, e);
      box.append(e);
    }
    const left = Math.max(0, Math.round((new Date(p.until) - now) / 1000));
    e.querySelector(".meta").textContent = p.held + " held from " + (p.sources || []).join(", ") + " · " + p.rule + " · " + left + " s left";
  }
  for (const [id, e] of askEls) {
    if (!seen.has(id)) { e.remove(); askEls.delete(id); }
  }
  let none = box.querySelector(".none");
  if (!asks.length && !none) box.append(el("p", { class: "none" }, "nothing is asked"));
  if (asks.length && none) none.remove();
}

function render(s) {
  csrf = s.csrf;
  const st = s.status, now = new Date(s.now);
  const t = st.totals;
  document.getElementById("summary").textContent =
    t.live + " live · " + t.flows + " flows · " + bytes(t.up) + " up · " + bytes(t.down) + " down · " + t.refused + " refused";
  renderAsks(s.asks, now);
  fill("flows", (st.flows || []).map(f => [f.host || f.dst, f.rule, f.action, bytes(f.up + f.down), bytes(f.up_rate + f.down_rate) + "/s", f.src]));
  fill("upstreams", (st.upstreams || []).map(u => [u.name, el("td", { class: u.state }, u.state), u.latency_ns ? (u.latency_ns / 1e6).toFixed(1) + " ms" : "", u.last_error || ""]));
  // The [budget] counts per guest and domain (bytes up, names); shown only when there are any.
  const bs = st.domain_budgets || [];
  document.getElementById("budgets-section").hidden = !bs.length;
  fill("budgets", bs.map(u => {
    const up = u.budget === "bytes_up_per_domain", amount = n => up ? bytes(n) : String(n);
    return [up ? "bytes up" : "names", u.guest, u.domain, el("td", { class: u.over ? "over num" : "num" }, amount(u.used) + (u.over ? " over" : "")), amount(u.limit),
      "in " + Math.max(0, Math.round((new Date(u.ends) - now) / 1000)) + " s"];
  }));
  // The switched guests (router profile); shown only when the config defines profiles.
  document.getElementById("profiles-section").hidden = (st.profile_names || []).length < 2;
  fill("profiles", (st.profiles || []).map(p => [p.guest, p.profile]).concat([["others", "default"]]));
  fill("rules", (st.rules || []).map(r => [r.index || "", r.name, r.action + (r.proxy ? " " + r.proxy : ""), r.hits, bytes(r.bytes)]));
  const refs = (st.refusals || []).filter(r => r.count > 0);
  document.getElementById("refusals").replaceChildren(...(refs.length ? refs.map(r =>
    el("div", { class: "reason" }, el("b", {}, r.reason + " " + r.count),
      el("div", { class: "recent" }, (r.recent || []).slice(0, 3).map(e => (e.host || e.dst || "") + (e.rule ? " (" + e.rule + ")" : "")).join(" · ")))) :
    [el("p", { class: "none" }, "nothing refused")]));
}

async function refresh() {
  try {
    // Bounded: a poll that hangs (a stalled connection) ends, and the next one is made.
    const r = await fetch("/api/state", { credentials: "same-origin", signal: AbortSignal.timeout(5000) });
    if (!r.ok) throw new Error(r.status + " " + (await r.text()));
    render(await r.json());
  } catch (e) {
    document.getElementById("summary").textContent = "disconnected: " + e.message;
  }
}

// The next poll is due a second after the last one ended, never while one runs: on a busy
// machine, where a poll of many flows takes longer than a second, polls do not pile up.
async function poll() {
  try {
    await refresh();
  } finally {
    setTimeout(poll, 1000);
  }
}
poll();
