// The t3orch web page: a client of the daemon's JSON-RPC API over the WebSocket of
// the origin it was served from (the session cookie authenticates it). Plain ES module,
// no build step. Every feed is "snapshot at N, then events after N"; after a lost
// connection each feed resubscribes with its cursor, so the page gets exactly the gap
// and de-duplicates by sequence: nothing on screen is lost or doubled.

const DELTA_FIELD = {
  assistant_message: "text", reasoning: "text", plan: "markdown",
  command_execution: "output", file_change: "diffStr", file_search: "output", web_search: "output",
};
// A run with a turn in the provider: it can be steered and interrupted.
const RUN_ACTIVE = new Set(["running", "waiting"]);
const PROVIDERS = ["codex", "claude", "standin"];
const DECISION_LABEL = {
  accept: "Approve", acceptForSession: "Approve for session", decline: "Decline", cancel: "Cancel turn",
};

// -- helpers ------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}
// replaceChildren would render a null child as the text "null".
function fill(el, ...children) {
  el.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
}
const camel = (s) => s.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
function commandId(kind) {
  const b = new Uint8Array(12);
  crypto.getRandomValues(b);
  return `web-${kind}-${Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("")}`;
}
const badge = (s) => h("span", { class: `badge ${s || ""}` }, s || "—");
function tokens(u) {
  if (!u) return "";
  const cost = u.costUsd != null ? ` · $${u.costUsd.toFixed(4)}` : "";
  return `${u.totalTokens} tokens (${u.inputTokens} in, ${u.outputTokens} out)${cost}`;
}
function describeRequest(req) {
  const d = req.detail || {};
  if (d.summary) return String(d.summary);
  if (d.command) return Array.isArray(d.command) ? d.command.join(" ") : String(d.command);
  if (d.paths) return [].concat(d.paths).join("\n");
  if (d.path) return String(d.path);
  if (d.questions) return JSON.stringify(d.questions);
  return Object.keys(d).length ? JSON.stringify(d) : req.kind;
}

// -- the connection ------------------------------------------------------------------

class Api {
  constructor() {
    this.ws = null;
    this.nextId = 1;
    this.waiting = new Map();
    this.feeds = new Set();
    this.bySub = new Map();
    this.backoff = 250;
    this.unauthorized = false;
    this.onstate = () => {};
  }
  connect() {
    const ws = new WebSocket(`ws://${location.host}/`);
    this.ws = ws;
    ws.onopen = () => {
      this.backoff = 250;
      this.onstate("live");
      for (const feed of this.feeds) feed.subscribe();
    };
    ws.onmessage = (m) => this.receive(JSON.parse(m.data));
    ws.onerror = () => {};
    ws.onclose = () => {
      this.ws = null;
      this.bySub.clear();
      for (const [, w] of this.waiting) w.reject(new ApiError({ code: -1, message: "connection lost" }));
      this.waiting.clear();
      if (this.unauthorized) return;
      this.onstate("down");
      setTimeout(() => this.connect(), this.backoff);
      this.backoff = Math.min(this.backoff * 2, 2000);
    };
  }
  receive(msg) {
    if (msg.id !== undefined && msg.id !== null && this.waiting.has(msg.id)) {
      const w = this.waiting.get(msg.id);
      this.waiting.delete(msg.id);
      if (msg.error) {
        if (msg.error.code === -32001) {
          this.unauthorized = true;
          this.onstate("unauthorized");
        }
        w.reject(new ApiError(msg.error));
      } else w.resolve(msg.result);
      return;
    }
    const p = msg.params || {};
    const feed = this.bySub.get(p.subscription);
    if (feed) feed.frame(msg.method, p);
  }
  call(method, params = {}) {
    return new Promise((resolve, reject) => {
      if (!this.ws || this.ws.readyState !== WebSocket.OPEN) {
        reject(new ApiError({ code: -1, message: "not connected (reconnecting…)" }));
        return;
      }
      const id = this.nextId++;
      this.waiting.set(id, { resolve, reject });
      this.ws.send(JSON.stringify({ jsonrpc: "2.0", id, method, params }));
    });
  }
  add(feed) { this.feeds.add(feed); if (this.ws && this.ws.readyState === WebSocket.OPEN) feed.subscribe(); }
  remove(feed) {
    this.feeds.delete(feed);
    if (feed.sub) {
      this.bySub.delete(feed.sub);
      this.call("unsubscribe", { subscription: feed.sub }).catch(() => {});
    }
  }
}

class ApiError extends Error {
  constructor(err) {
    super(err.message);
    this.code = err.code;
    this.data = err.data || {};
  }
}

// A subscription kept current across reconnects: snapshot, then events by sequence.
class Feed {
  constructor(api, topic, threadId, handlers) {
    this.api = api;
    this.topic = topic;
    this.threadId = threadId;
    this.h = handlers; // {snapshot(data), event(envelope, params), changed()}
    this.seq = null; // the last sequence applied; null = no snapshot yet
    this.sub = null;
  }
  async subscribe() {
    const params = { topic: this.topic };
    if (this.threadId) params.threadId = this.threadId;
    if (this.seq !== null) params.afterSequence = this.seq;
    try {
      const res = await this.api.call("subscribe", params);
      if (!this.api.feeds.has(this)) return;
      this.sub = res.subscription;
      this.api.bySub.set(this.sub, this);
    } catch (err) {
      if (err.data && err.data.code === "cursor_ahead") { this.seq = null; this.subscribe(); }
      else if (this.h.failed) this.h.failed(err);
    }
  }
  frame(method, p) {
    if (method === "snapshot") {
      this.seq = p.snapshotSequence;
      this.h.snapshot(p.data);
      this.h.changed();
    } else if (method === "event") {
      if (this.seq !== null && p.sequence <= this.seq) return; // already applied
      this.seq = p.sequence;
      this.h.event(p.event, p);
      this.h.changed();
      if (window.__t3shown) shownPending.push(p.sequence);
    } else if (method === "liveText") {
      // Text as the provider streams it, before it commits (docs/api.md, "Live text").
      if (this.h.live) { this.h.live(p); this.h.changed(); }
    } else if (method === "resync") {
      // Too slow for the stream: start over from a fresh snapshot.
      this.api.bySub.delete(this.sub);
      this.seq = null;
      this.subscribe();
    }
  }
}

// -- global state: thread list, pending requests, sessions ------------------------

const api = new Api();
const state = {
  threads: new Map(), // id -> {thread, runCount, latestRunStatus, latestOrdinal, usage}
  pending: new Map(), // request id -> request
  sessions: new Map(),
  answeredHere: new Map(), // request id -> decision this tab sent
  refusal: new Map(), // request id -> message (already answered …)
};
let render = () => {};
let scheduled = false;
function changed() {
  if (scheduled) return;
  scheduled = true;
  requestAnimationFrame(() => {
    scheduled = false;
    render();
    renderPending();
    // For bench/web.py: when each applied event reached the screen (wall clock, ms).
    if (window.__t3shown && shownPending.length) {
      const at = performance.timeOrigin + performance.now();
      for (const seq of shownPending) window.__t3shown.push([seq, at]);
    }
    shownPending = [];
  });
}
let shownPending = [];

const shell = new Feed(api, "threadShell", null, {
  snapshot(data) {
    state.threads.clear();
    for (const e of data.threads) state.threads.set(e.thread.id, { ...e, latestOrdinal: e.runCount });
  },
  event(ev) {
    const p = ev.payload;
    if (ev.type === "thread.upserted") {
      const cur = state.threads.get(p.thread.id) || { runCount: 0, latestRunStatus: null, latestOrdinal: 0, pendingRequests: 0 };
      // A new thread's host: its owner's, as another thread of that daemon shows it.
      const sibling = [...state.threads.values()].find((e) => e.host && e.host.daemonId === p.thread.ownerDaemonId);
      state.threads.set(p.thread.id, { ...cur, thread: p.thread, host: cur.host || (sibling ? sibling.host : null) });
    } else if (ev.type === "run.upserted") {
      const cur = state.threads.get(p.run.threadId);
      if (cur && p.run.ordinal >= cur.latestOrdinal) {
        cur.latestOrdinal = p.run.ordinal;
        cur.runCount = Math.max(cur.runCount, p.run.ordinal);
        cur.latestRunStatus = p.run.status;
      }
      // A run's end changes its thread's usage, which the stream does not carry
      // (threadShell entries hold sums): re-read the sums, at most once a second.
      if (p.run.completedAt) refreshUsage();
    }
  },
  changed,
});
let usageTimer = null;
function refreshUsage() {
  if (usageTimer) return;
  usageTimer = setTimeout(async () => {
    usageTimer = null;
    try {
      const res = await api.call("view.read", { topic: "threadShell" });
      for (const e of res.data.threads) {
        const cur = state.threads.get(e.thread.id);
        if (cur) { cur.usage = e.usage; cur.host = e.host; }
      }
      changed();
    } catch (err) { /* the next run's end tries again */ }
  }, 1000);
}
const pendingFeed = new Feed(api, "pendingRequests", null, {
  snapshot(data) { state.pending.clear(); for (const r of data.requests) state.pending.set(r.id, r); },
  event(ev) {
    const r = ev.payload.request;
    if (!r) return;
    if (r.status === "pending") state.pending.set(r.id, r);
    else state.pending.delete(r.id);
  },
  changed,
});
const sessionsFeed = new Feed(api, "providerSessions", null, {
  snapshot(data) { state.sessions.clear(); for (const s of data.sessions) state.sessions.set(s.id, { ...s }); },
  event(ev) {
    const p = ev.payload;
    if (ev.type === "provider_session.upserted") {
      const cur = state.sessions.get(p.session.id) || {};
      state.sessions.set(p.session.id, { ...p.session, usage: cur.usage, diagnostics: cur.diagnostics });
    } else if (ev.providerSessionId && state.sessions.has(ev.providerSessionId)) {
      const s = state.sessions.get(ev.providerSessionId);
      if (ev.type === "provider.usage") s.usage = p;
      if (ev.type === "provider.diagnostic") s.diagnostics = [...(s.diagnostics || []).slice(-4), p];
    }
  },
  changed,
});

// -- answering requests ---------------------------------------------------------------

async function respond(req, decision, card) {
  for (const b of card.querySelectorAll("button")) b.disabled = true;
  try {
    await api.call("request.respond", { commandId: commandId("respond"), requestId: req.id, decision });
    state.answeredHere.set(req.id, decision);
  } catch (err) {
    const code = err.data && err.data.code;
    state.refusal.set(req.id, code === "request_already_answered"
      ? "Already answered (in another tab or client)."
      : code === "request_not_pending" ? "No longer pending: it ended without an answer." : err.message);
    for (const b of card.querySelectorAll("button")) b.disabled = false;
  }
  if (threadView) threadView.dirtyItems = true;
  changed();
}

function requestCard(req, { withThread }) {
  const card = h("div", { class: "request", "data-request": req.id });
  const t = state.threads.get(req.threadId);
  card.append(
    h("div", {},
      h("strong", {}, `${req.kind.replace(/_/g, " ")} `),
      badge(req.status),
      withThread ? h("span", {}, " in ", h("a", { href: `#/thread/${req.threadId}` }, t ? t.thread.title : req.threadId)) : null),
    h("div", { class: "what" }, describeRequest(req)));
  const refusal = state.refusal.get(req.id);
  // A decided request stays `pending` until the provider resolves it: it is answered.
  const decided = req.decision || state.answeredHere.get(req.id);
  if (req.status === "pending" && !decided && state.pending.has(req.id)) {
    const row = h("div", { class: "row", role: "group", "aria-label": "answer" });
    for (const d of req.availableDecisions || []) {
      row.append(h("button", {
        class: d === "accept" ? "primary" : d === "cancel" ? "danger" : "",
        "data-decision": d, onclick: () => respond(req, d, card),
      }, DECISION_LABEL[d] || d));
    }
    card.append(row);
  } else {
    const mine = state.answeredHere.get(req.id);
    card.append(h("div", { class: "answer" }, mine
      ? `Answered: ${mine}`
      : req.decision ? `Already answered: ${req.decision}` : `No longer pending (${req.status}).`));
  }
  if (refusal) card.append(h("div", { class: "error-line", role: "alert" }, refusal));
  return card;
}

function renderPending() {
  const box = document.getElementById("pending");
  const reqs = [...state.pending.values()].filter((r) => !r.decision && !state.answeredHere.has(r.id));
  const onThread = route().thread;
  fill(box, ...(reqs.length
    ? [h("strong", {}, `${reqs.length} waiting for you`),
       ...reqs.filter((r) => r.threadId !== onThread).map((r) => requestCard(r, { withThread: true }))]
    : []));
}

// -- routes ---------------------------------------------------------------------------

function route() {
  const m = location.hash.match(/^#\/thread\/([^/?#]+)/);
  if (m) return { thread: decodeURIComponent(m[1]) };
  if (location.hash.startsWith("#/sessions")) return { sessions: true };
  return { list: true };
}

let threadView = null;
function navigate() {
  if (threadView) { threadView.close(); threadView = null; }
  const r = route();
  const main = document.getElementById("main");
  fill(main, );
  if (r.thread) {
    threadView = new ThreadView(r.thread, main);
    render = () => threadView && threadView.render();
  } else if (r.sessions) {
    render = () => renderSessions(main);
  } else {
    render = () => renderList(main);
  }
  render();
  renderPending();
  main.focus();
}

// -- thread list ----------------------------------------------------------------------

let listForm = null;
function createForm() {
  const latest = [...state.threads.values()].sort((a, b) => (a.thread.createdAt < b.thread.createdAt ? 1 : -1))[0];
  const provider = h("select", { name: "provider", id: "new-provider" }, ...PROVIDERS.map((p) => h("option", { value: p }, p)));
  const cwd = h("input", { name: "cwd", id: "new-cwd", required: true, size: 40, placeholder: "/path/to/project", value: latest ? latest.thread.cwd : "" });
  const title = h("input", { name: "title", id: "new-title", placeholder: "optional" });
  const msg = h("span", { class: "error-line", role: "alert" });
  const form = h("form", { class: "row", "aria-label": "new thread", onsubmit: async (e) => {
    e.preventDefault();
    msg.textContent = "";
    const params = { commandId: commandId("create"), provider: provider.value, cwd: cwd.value.trim() };
    if (title.value.trim()) params.title = title.value.trim();
    try {
      const res = await api.call("thread.create", params);
      location.hash = `#/thread/${res.result.threadId}`;
    } catch (err) { msg.textContent = err.message; }
  } },
  h("label", {}, "provider", provider), h("label", {}, "cwd", cwd), h("label", {}, "title", title),
  h("button", { class: "primary", type: "submit" }, "New thread"), msg);
  return form;
}

function renderList(main) {
  if (!listForm || !main.contains(listForm)) {
    listForm = createForm();
    fill(main, h("h1", {}, "Threads"), listForm, h("div", { id: "thread-table" }));
  }
  const counts = new Map();
  for (const r of state.pending.values()) counts.set(r.threadId, (counts.get(r.threadId) || 0) + 1);
  const rows = [...state.threads.values()]
    .filter((e) => !e.thread.deletedAt && !e.thread.archivedAt)
    .sort((a, b) => (a.thread.updatedAt < b.thread.updatedAt ? 1 : -1));
  const table = h("table", { id: "threads" },
    h("thead", {}, h("tr", {}, h("th", {}, "title"), h("th", {}, "provider"), h("th", { class: "hide-narrow" }, "cwd"),
      h("th", {}, "latest run"), h("th", {}, "pending"), h("th", { class: "hide-narrow" }, "usage"),
      h("th", { class: "hide-narrow" }, "host"))),
    h("tbody", {}, ...rows.map((e) => {
      const n = counts.get(e.thread.id) || 0;
      return h("tr", { "data-thread": e.thread.id },
        h("td", {}, h("a", { href: `#/thread/${e.thread.id}` }, e.thread.title || e.thread.id)),
        h("td", {}, e.thread.defaultProvider),
        h("td", { class: "hide-narrow mono" }, e.thread.cwd),
        h("td", {}, badge(e.latestRunStatus)),
        h("td", {}, n ? h("span", { class: "badge pending" }, `${n} waiting`) : ""),
        h("td", { class: "hide-narrow muted" }, e.usage ? `${e.usage.totalTokens} tokens` : ""),
        // The daemon that runs it (the fleet), as of the last snapshot.
        h("td", { class: "hide-narrow muted" }, e.host ? e.host.host + (e.host.online ? "" : " (offline)") : ""));
    })));
  const box = document.getElementById("thread-table");
  fill(box, rows.length ? table : h("p", { class: "muted" }, "No threads yet."));
  if (shell.seq !== null) {
    document.body.dataset.threadsShown = String(rows.length);
    if (!performance.getEntriesByName("threads-shown").length) performance.mark("threads-shown");
  }
}

// -- sessions -------------------------------------------------------------------------

function renderSessions(main) {
  const rows = [...state.sessions.values()].sort((a, b) => (a.createdAt < b.createdAt ? 1 : -1));
  fill(main, h("h1", {}, "Provider sessions"), rows.length ? h("table", { id: "sessions" },
    h("thead", {}, h("tr", {}, h("th", {}, "session"), h("th", {}, "provider"), h("th", {}, "status"), h("th", {}, "pid"),
      h("th", { class: "hide-narrow" }, "cwd"), h("th", {}, "last error / exit"), h("th", { class: "hide-narrow" }, "usage"))),
    h("tbody", {}, ...rows.map((s) => h("tr", { "data-session": s.id },
      h("td", { class: "mono" }, s.id), h("td", {}, s.provider, s.model ? h("div", { class: "muted" }, s.model) : null),
      h("td", {}, badge(s.status)), h("td", { class: "mono" }, s.pid ?? "—"),
      h("td", { class: "hide-narrow mono" }, s.cwd),
      h("td", {}, s.lastError ? h("pre", { class: "why" }, s.lastError) : "", s.exitDescription ? h("div", { class: "muted" }, s.exitDescription) : "",
        ...(s.diagnostics || []).map((d) => h("div", { class: "muted" }, `${d.code || d.kind || "diagnostic"}: ${d.message || ""}`))),
      h("td", { class: "hide-narrow muted" }, usageSummary(s.usage && s.usage.usage)))))) : h("p", { class: "muted" }, "No provider sessions."));
}

// A change's diff as lines; a whole added (deleted) file's content is all additions
// (deletions): Codex sends the content, not a unified diff, for those.
function diffLines(c) {
  const text = (c.diff || "").replace(/\n$/, "");
  if (!text) return [];
  const unified = /^(@@|---|\+\+\+|diff )/m.test(text);
  const mark = !unified && c.kind === "add" ? "+" : !unified && c.kind === "delete" ? "-" : "";
  return text.split("\n").map((l) => {
    const line = mark + l;
    const cls = line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "";
    return h("span", { class: cls }, `${line}\n`);
  });
}

// A provider's own usage report (its words): the totals worth a glance.
function usageSummary(u) {
  if (!u) return "";
  const found = {};
  const walk = (o, depth) => {
    if (!o || typeof o !== "object" || depth > 4) return;
    for (const [k, v] of Object.entries(o)) {
      if (typeof v === "number" && /^(total_?tokens|totalTokens|input_?tokens|inputTokens|output_?tokens|outputTokens|total_cost_usd|costUsd)$/.test(k) && !(k in found)) found[k] = v;
      else walk(v, depth + 1);
    }
  };
  walk(u, 0);
  const parts = Object.entries(found).map(([k, v]) => `${k} ${v}`);
  return parts.length ? parts.join(", ") : "reported";
}

// -- one thread -----------------------------------------------------------------------

class ThreadView {
  constructor(threadId, main) {
    this.id = threadId;
    this.main = main;
    this.thread = null;
    this.runs = new Map();
    this.items = new Map(); // id -> item (hidden ones too: subagent children)
    this.order = []; // item ids, in order
    this.requests = new Map();
    this.nodes = new Map(); // node id -> parent node id
    this.live = new Map(); // item id -> its main text as far as liveText frames told
    this.error = null;
    this.built = false;
    this.feed = new Feed(api, "threadDetail", threadId, {
      snapshot: (d) => this.snapshot(d),
      event: (ev, p) => this.event(ev, p),
      live: (p) => this.liveText(p),
      changed,
      failed: (err) => { this.error = err.message; changed(); },
    });
    api.add(this.feed);
  }
  close() { api.remove(this.feed); }
  async readGraph() {
    // Which node each node hangs under: a subagent's own items are nested under it.
    try {
      const g = await api.call("view.read", { topic: "executionGraph", threadId: this.id });
      for (const n of g.data.nodes) this.nodes.set(n.id, n.parentNodeId);
      this.graphRead = true;
      this.dirtyAll = true;
      changed();
    } catch (err) { /* the items stay unnested until the next snapshot */ }
  }
  liveText(p) {
    if (p.field) return;
    // Offsets count code points; JavaScript strings count UTF-16 units.
    const base = Array.from(this.shown(p.itemId));
    if (p.offset > base.length) return; // after a dropped frame: the commit catches up
    this.live.set(p.itemId, base.slice(0, p.offset).join("") + p.text);
    if (this.items.has(p.itemId)) this.touch(p.itemId);
  }
  shown(id) {
    const item = this.items.get(id);
    const f = item && DELTA_FIELD[item.type];
    const committed = (f && item[f]) || "";
    const live = this.live.get(id) || "";
    return live.length > committed.length && live.startsWith(committed) ? live : committed;
  }
  withLive(item) {
    const f = DELTA_FIELD[item.type];
    return f && this.live.has(item.id) ? { ...item, [f]: this.shown(item.id) } : item;
  }
  snapshot(d) {
    this.live = new Map();
    this.thread = d.thread;
    this.runs = new Map(d.runs.map((r) => [r.id, r]));
    this.items = new Map();
    this.order = [];
    // What a user sees (a fork's inherited items included, rolled-back runs left out),
    // plus the hidden items a subagent item shows nested under it.
    for (const i of [...d.visibleTurnItems, ...d.turnItems.filter((t) => t.hidden)]) {
      if (!this.items.has(i.id)) { this.items.set(i.id, i); this.order.push(i.id); }
    }
    this.readGraph();
    this.requests = new Map(d.pendingRequests.map((r) => [r.id, r]));
    this.usage = d.usage;
    this.olderBefore = d.olderBeforePosition;
    this.total = d.totalTurnItems;
    this.dirtyAll = true;
  }
  event(ev, p) {
    const pl = ev.payload;
    switch (ev.type) {
      case "thread.upserted": this.thread = pl.thread; this.dirtyHead = true; break;
      case "run.upserted": this.runs.set(pl.run.id, pl.run); this.dirtyRuns = true; break;
      case "node.upserted": {
        if (!this.nodes.has(pl.node.id)) {
          this.nodes.set(pl.node.id, pl.node.parentNodeId);
          for (const [id, i] of this.items) if (i.hidden && !this.itemEls?.has(id)) this.touch(id);
        }
        break;
      }
      case "runtime_request.upserted": {
        this.requests.set(pl.request.id, pl.request);
        if (pl.request.status === "pending") state.pending.set(pl.request.id, pl.request);
        else state.pending.delete(pl.request.id);
        this.dirtyItems = true;
        break;
      }
      case "turn_item.upserted": {
        const held = this.items.get(pl.item.id);
        const item = { ...pl.item };
        for (const f of p.unchanged || []) if (held) item[f] = held[f];
        if (!held) this.order.push(item.id);
        if (item.status !== "running") this.live.delete(item.id); // final: its own text
        this.items.set(item.id, item);
        this.touch(item.id);
        break;
      }
      case "turn_item.delta": {
        const item = this.items.get(pl.itemId);
        if (!item) break;
        const f = pl.field ? camel(pl.field) : DELTA_FIELD[item.type];
        if (!f) break;
        item[f] = pl.replace ? pl.text : (item[f] || "") + pl.text;
        this.touch(item.id);
        break;
      }
      default: break;
    }
  }
  touch(id) { (this.touched ||= new Set()).add(id); }

  render() {
    if (this.error && !this.thread) { fill(this.main, h("p", { class: "error-line" }, this.error)); return; }
    if (!this.thread) { fill(this.main, h("p", { class: "muted" }, "Loading…")); return; }
    if (!this.built) this.build();
    this.renderHead();
    if (this.dirtyAll) {
      this.itemEls = new Map();
      this.runEls = new Map();
      // The box of items outside this thread's runs (a fork's inherited ones) is made
      // anew too: the old one still holds the elements of the items placed again below.
      this.looseBox = null;
      fill(this.runsBox);
      this.dirtyAll = false;
      this.touched = new Set(this.order);
      this.dirtyRuns = true;
    }
    if (this.dirtyRuns) { for (const r of this.runs.values()) this.runSection(r); this.dirtyRuns = false; }
    if (this.dirtyItems) { for (const id of this.order) if (this.items.get(id).type === "approval_request") this.touch(id); this.dirtyItems = false; }
    for (const id of this.touched || []) this.placeItem(this.items.get(id));
    this.touched = new Set();
    this.renderComposer();
    this.olderBtn.hidden = this.olderBefore == null;
    this.olderBtn.textContent = `Show older items (${this.total - this.order.length} more)`;
    document.body.dataset.items = String(this.main.querySelectorAll(".item").length);
    // For tests: the view as rendered once its execution graph is known (items re-placed).
    document.body.dataset.graph = this.graphRead ? this.id : "";
  }
  build() {
    this.head = h("div", {});
    this.runsBox = h("div", { id: "runs" });
    this.msg = h("span", { class: "error-line", role: "alert" });
    this.text = h("textarea", { id: "composer-text", "aria-label": "message", placeholder: "Message (Ctrl+Enter sends)",
      onkeydown: (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); this.send(this.active() ? "steer" : "queue"); } } });
    this.sendBtn = h("button", { class: "primary", id: "send", onclick: () => this.send("queue") }, "Send");
    this.steerBtn = h("button", { id: "steer", onclick: () => this.send("steer") }, "Steer");
    this.interruptBtn = h("button", { id: "interrupt", class: "danger", onclick: () => this.interrupt() }, "Interrupt");
    this.composer = h("div", { class: "composer" }, this.text, h("div", { class: "row" }, this.sendBtn, this.steerBtn, this.interruptBtn, this.msg));
    this.olderBtn = h("button", { id: "older", onclick: () => this.older() }, "Show older items");
    fill(this.main, this.head, this.olderBtn, this.runsBox, this.composer);
    this.built = true;
    this.dirtyAll = true;
  }
  active() {
    return [...this.runs.values()].filter((r) => RUN_ACTIVE.has(r.status)).sort((a, b) => b.ordinal - a.ordinal)[0] || null;
  }
  renderHead() {
    const t = this.thread;
    const sel = h("select", { id: "switch-provider", "aria-label": "provider for later runs" },
      ...PROVIDERS.map((p) => h("option", { value: p, selected: p === t.defaultProvider }, p)));
    const key = JSON.stringify([t.title, t.defaultProvider, t.cwd, t.updatedAt, this.usage]);
    if (this.headKey === key) return;
    this.headKey = key;
    fill(this.head, 
      h("p", {}, h("a", { href: "#/" }, "← Threads")),
      h("h1", {}, t.title || t.id),
      h("p", { class: "muted" }, `${t.defaultProvider} · `, h("span", { class: "mono" }, t.cwd),
        t.lineage && t.lineage.parentThreadId ? h("span", {}, " · forked from ", h("a", { href: `#/thread/${t.lineage.parentThreadId}` }, t.lineage.parentThreadId)) : null),
      h("div", { class: "row" },
        h("button", { id: "fork", onclick: () => this.fork() }, "Fork"),
        sel, h("button", { id: "switch", onclick: () => this.switchProvider(sel.value) }, "Switch provider")));
  }
  runSection(run) {
    let sec = this.runEls.get(run.id);
    if (!sec) {
      const hdr = h("header", {});
      const why = h("div", { class: "why", hidden: true });
      const items = h("div", { class: "items" });
      sec = { el: h("section", { class: "run", "data-run": run.id, "aria-label": `run ${run.ordinal}` }, hdr, why, items), hdr, why, items };
      this.runEls.set(run.id, sec);
      const after = [...this.runEls.entries()].map(([id, s]) => [this.runs.get(id), s]).filter(([r]) => r && r.ordinal > run.ordinal).sort((a, b) => a[0].ordinal - b[0].ordinal)[0];
      this.runsBox.insertBefore(sec.el, after ? after[1].el : null);
    }
    fill(sec.hdr, h("strong", {}, `Run ${run.ordinal}`), badge(run.status), h("span", { class: "muted" }, run.provider),
      ...(run.usage ? [h("span", { class: "muted hide-narrow" }, tokens(run.usage))] : []));
    const failed = run.status === "failed" || (run.status === "interrupted" && run.lastError);
    sec.why.hidden = !failed;
    sec.why.textContent = failed ? `Why: ${run.lastError || "the provider gave no reason"}` : "";
    return sec;
  }
  container(item) {
    if (item.hidden) {
      // Hidden from the thread view: a subagent's own work is nested under the
      // subagent item whose node it hangs under; the rest (a provider's echo of the
      // user's message, say) is not shown.
      const bySubagentNode = new Map();
      for (const i of this.items.values()) if (i.type === "subagent" && i.nodeId) bySubagentNode.set(i.nodeId, i.id);
      let node = this.nodes.get(item.nodeId);
      for (let depth = 0; node && depth < 64; depth++) {
        const parent = bySubagentNode.get(node);
        if (parent && this.itemEls.has(parent)) return this.itemEls.get(parent).children;
        node = this.nodes.get(node);
      }
      return null;
    }
    const run = item.runId && this.runs.get(item.runId);
    if (run) return (this.runEls.get(run.id) || this.runSection(run)).items;
    if (!this.looseBox) this.looseBox = h("div", { class: "items", id: "thread-items" });
    if (!this.runsBox.contains(this.looseBox)) this.runsBox.prepend(this.looseBox);
    return this.looseBox;
  }
  placeItem(item) {
    if (!item) return;
    let rec = this.itemEls.get(item.id);
    if (!rec) {
      const box = this.container(item);
      if (!box) return;
      rec = { el: h("div", { class: `item ${item.type}`, "data-item": item.id }), children: h("div", { class: "children" }) };
      this.itemEls.set(item.id, rec);
      box.append(rec.el);
    }
    fill(rec.el, ...this.itemBody(this.withLive(item)));
    if (item.type === "subagent") {
      rec.el.append(rec.children);
      // Its own items that came before it could be placed.
      for (const [id, i] of this.items) if (i.hidden && !this.itemEls.has(id)) this.placeItem(i);
    }
  }
  itemBody(i) {
    const who = (label) => h("div", { class: "who" }, label, i.status && i.status !== "completed" ? ` · ${i.status}` : "");
    switch (i.type) {
      case "user_message": return [who("you"), h("div", { class: "text" }, i.text)];
      case "assistant_message": return [who("assistant"), h("div", { class: "text" }, i.text)];
      case "reasoning": return [h("details", {}, h("summary", {}, "reasoning"), h("div", { class: "text muted" }, i.summary || i.text))];
      case "plan": return [who("plan"), h("pre", {}, i.markdown)];
      case "command_execution": return [who("command"), h("pre", { class: "cmd" }, `$ ${i.input}`, i.output ? `\n${i.output}` : ""),
        i.exitCode != null ? h("div", { class: `exit ${i.exitCode ? "bad" : ""}` }, `exit code ${i.exitCode}`) : null];
      case "file_change": {
        const counts = i.additions != null ? ` +${i.additions} −${i.deletions ?? 0}` : "";
        const changes = i.changes && i.changes.length ? i.changes : [{ path: i.fileName, kind: "update", diff: i.diffStr }];
        return [who("file change"), h("div", { class: "mono" }, `${i.fileName}${counts}`),
          ...changes.map((c) => h("pre", { class: "diff", "aria-label": `${c.kind} ${c.path}` },
            h("span", { class: "muted" }, `${c.kind} ${c.path}\n`), ...diffLines(c)))];
      }
      case "file_search": case "web_search": return [who(i.type.replace("_", " ")), h("div", { class: "mono" }, i.query), i.output ? h("pre", {}, i.output) : null];
      case "approval_request": {
        const req = this.requests.get(i.requestId) || state.pending.get(i.requestId) ||
          { id: i.requestId, kind: i.requestKind, status: i.decision ? "resolved" : i.status, decision: i.decision, detail: { command: i.summary }, threadId: this.id };
        return [who("approval"), requestCard(req, { withThread: false })];
      }
      case "checkpoint": return [who("checkpoint"), h("div", { class: "mono" }, i.ref)];
      case "subagent": return [who(`subagent${i.agentType ? ` (${i.agentType})` : ""}`), h("div", {}, i.description || i.prompt || i.toolName),
        i.output ? h("pre", {}, typeof i.output === "string" ? i.output : JSON.stringify(i.output, null, 1)) : null];
      case "handoff": return [who("handoff"), h("div", { class: "muted" }, `${i.fromProviders.join(", ")} → ${i.toProvider} (${i.strategy})`)];
      case "fork": return [who("fork"), h("div", {}, i.title, " from ", h("a", { href: `#/thread/${i.sourceThreadId}` }, i.sourceThreadId))];
      case "compaction": return [who("compaction"), h("div", { class: "muted" }, i.title)];
      case "dynamic_tool": return [who(`tool ${i.toolName || ""}`),
        i.input != null ? h("pre", {}, typeof i.input === "string" ? i.input : JSON.stringify(i.input, null, 1)) : null,
        i.output != null ? h("pre", {}, typeof i.output === "string" ? i.output : JSON.stringify(i.output, null, 1)) : null];
      default: return [who(i.type.replace(/_/g, " ")), h("pre", {}, JSON.stringify(i.output ?? i.input ?? "", null, 1))];
    }
  }
  async older() {
    // The snapshot holds the newest items; older ones are paged in ahead of them.
    const page = await this.act(() => api.call("view.read", {
      topic: "threadDetail", threadId: this.id, beforePosition: this.olderBefore, limit: 200 }));
    if (!page) return;
    const d = page.data;
    const fresh = [...d.visibleTurnItems, ...d.turnItems.filter((t) => t.hidden)].filter((i) => !this.items.has(i.id));
    for (const i of fresh) this.items.set(i.id, i);
    this.order = [...fresh.map((i) => i.id), ...this.order];
    for (const r of d.runs) if (!this.runs.has(r.id)) this.runs.set(r.id, r);
    this.olderBefore = d.olderBeforePosition;
    this.dirtyAll = true;
    changed();
  }
  renderComposer() {
    const run = this.active();
    this.steerBtn.hidden = !run;
    this.interruptBtn.hidden = !run;
  }
  async act(fn) {
    this.msg.textContent = "";
    try { return await fn(); } catch (err) { this.msg.textContent = err.message; return null; }
  }
  async send(mode) {
    const text = this.text.value.trim();
    if (!text) return;
    const res = await this.act(() => api.call("run.send", { commandId: commandId("send"), threadId: this.id, text, mode }));
    if (res) this.text.value = "";
  }
  interrupt() {
    const run = this.active();
    if (run) this.act(() => api.call("run.interrupt", { commandId: commandId("interrupt"), runId: run.id }));
  }
  async fork() {
    const res = await this.act(() => api.call("thread.fork", { commandId: commandId("fork"), threadId: this.id }));
    if (res) location.hash = `#/thread/${res.result.threadId}`;
  }
  async switchProvider(provider) {
    const res = await this.act(() => api.call("thread.switchProvider", { commandId: commandId("switch"), threadId: this.id, provider }));
    if (res) this.msg.textContent = `Later runs use ${provider}.`;
  }
}

// -- start ----------------------------------------------------------------------------

api.onstate = (s) => {
  const el = document.getElementById("conn");
  el.className = `conn ${s}`;
  el.textContent = s === "live" ? "live" : s === "unauthorized" ? "not logged in" : "reconnecting…";
  if (s === "unauthorized") {
    fill(document.getElementById("main"), h("div", { class: "notice", role: "alert" },
      h("h1", {}, "Not logged in"), h("p", {}, "Run ", h("code", {}, "t3orch web"), " and open the URL it prints.")));
    render = () => {};
  }
  document.body.dataset.conn = s;
};
api.add(shell);
api.add(pendingFeed);
api.add(sessionsFeed);
window.addEventListener("hashchange", navigate);
navigate();
api.connect();
