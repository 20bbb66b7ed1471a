// The cograg page: ask (with the workflow streamed as Server-Sent Events and drawn as a graph of
// its stages), read the verified answer with the verifier's verdict per sentence and the grader's
// per document, open a citation's passage, see and prune the session's fact ledger, manage
// documents. Plain JavaScript, no build step.
"use strict";

const state = { messages: {}, lang: (navigator.language || "en").toLowerCase().startsWith("zh") ? "zh" : "en",
                citations: [], documents: [], nodes: [], route: null };
const $ = (sel) => document.querySelector(sel);

function t(key, fallback) {
  const entry = state.messages[key];
  return entry ? (entry[state.lang] || entry.en) : (fallback !== undefined ? fallback : key);
}

function esc(text) {
  return String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

function applyLanguage() {
  document.documentElement.lang = state.lang === "zh" ? "zh-CN" : "en";
  document.querySelectorAll("[data-msg]").forEach((el) => { el.textContent = t(el.dataset.msg, el.textContent); });
  document.querySelectorAll("[data-placeholder]").forEach((el) => { el.placeholder = t(el.dataset.placeholder, ""); });
  document.title = t("web.title", "cograg");
}

// the API key (optional) lives in this tab only; every request carries it
function authHeaders(extra) {
  const key = sessionStorage.getItem("cograg.key") || "";
  return Object.assign({}, extra || {}, key ? { authorization: `Bearer ${key}` } : {});
}

async function api(path, options) {
  const opts = Object.assign({}, options || {});
  opts.headers = authHeaders(opts.headers);
  const resp = await fetch(path, opts);
  const body = await resp.json().catch(() => ({ error: "error", detail: resp.statusText }));
  if (!resp.ok) throw httpError(resp.status, body.detail || body.error || resp.statusText);
  return body;
}

function httpError(status, message) {
  const err = new Error(message);
  err.status = status;
  return err;
}

// what a failed request tells the reader: a 401 (the server takes no anonymous callers, or the key
// entered is unknown) asks for a key under Settings; anything else shows the server's reason
function errorText(err) {
  return err.status === 401 ? t("web.need_key") : `${t("web.error")}: ${err.message}`;
}

// a panel's line for the outcome of its last action (a delete, a forget); empty hides it
function showStatus(sel, text) {
  const box = $(sel);
  box.textContent = text || "";
  box.hidden = !text;
}

// ------------------------------------------------------------------ documents
function baseName(path) {
  return String(path || "").split(/[\\/]/).pop();
}

function renderScope(docs) {
  const box = $("#scope");
  const checked = new Set([...box.querySelectorAll("input:checked")].map((i) => i.value));
  box.innerHTML = "";
  for (const d of docs) {
    const label = document.createElement("label");
    label.className = "check";
    label.innerHTML = `<input type="checkbox" value="${esc(d.doc_id)}"${checked.has(d.doc_id) ? " checked" : ""}> ${esc(d.source)}`;
    box.appendChild(label);
  }
}

function scopeDocIds() {
  return [...document.querySelectorAll("#scope input:checked")].map((i) => i.value);
}

// never throws: a list that cannot be loaded says why in its place (a key needed, the server's error)
async function loadDocuments() {
  const list = $("#documents");
  let docs;
  try {
    docs = await api("/api/documents");
  } catch (err) {
    state.documents = [];
    renderScope([]);
    list.innerHTML = `<li class="hint error">${esc(errorText(err))}</li>`;
    return;
  }
  state.documents = docs;
  renderScope(docs);
  list.innerHTML = docs.length ? "" : `<li class="hint">${esc(t("web.no_documents"))}</li>`;
  for (const d of docs) {
    const li = document.createElement("li");
    // a document the corpus policy keeps out of answers is listed, and says so
    const outside = d.in_answers === false ? ` <small class="not-in-answers">${esc(t("web.not_in_answers"))}</small>` : "";
    li.innerHTML = `<span title="${esc(d.doc_id)}">${esc(d.source)} <small>${d.chunk_count} ${esc(t("web.chunks"))}</small>${outside}</span>`;
    list.appendChild(li);
    // only a document this key uploaded may be deleted here; the corpus is the operator's (the CLI)
    if (!d.deletable) continue;
    const del = document.createElement("button");
    del.type = "button";
    del.textContent = t("web.delete");
    del.onclick = async () => {
      showStatus("#documents-status", "");
      try {
        await api(`/api/documents/${encodeURIComponent(d.doc_id)}`, { method: "DELETE" });
      } catch (err) {
        // a 404: the document is gone already (deleted elsewhere); the list shown is out of date
        showStatus("#documents-status", errorText(err));
      }
      loadDocuments();
    };
    li.appendChild(del);
  }
}

async function upload(event) {
  event.preventDefault();
  const files = $("#upload-files").files;
  if (!files.length) return;
  const form = new FormData();
  for (const f of files) form.append("files", f);
  const status = $("#upload-status");
  status.textContent = t("web.uploading");
  try {
    const result = await api("/api/documents", { method: "POST", body: form });
    const skipped = result.skipped.map((s) => `${s.file}: ${s.reason}`).join("; ");
    status.textContent = `${t("web.uploaded")}: ${result.documents.map((d) => d.source).join(", ")}${skipped ? " — " + skipped : ""}`;
    $("#upload-files").value = "";
    loadDocuments();
  } catch (err) {
    status.textContent = errorText(err);
  }
}

// ------------------------------------------------------------------ the workflow
function eventDetail(name, data) {
  switch (name) {
    case "ROUTE_DECIDED": return `${data.route} · ${data.mode}`;
    case "RETRIEVED": case "EVIDENCE_SELECTED":
      return `${data.hits} ${t("web.hits")}` + (data.query ? ` · “${data.query}”` : "");
    case "GRADED": return data.pass_rate !== undefined ? `${data.pass_count}/${data.total_count} (${Math.round(data.pass_rate * 100)}%)` : "";
    case "QUERY_REWRITTEN": return data.rewritten_query || data.query || "";
    case "ANSWER_RETRIED": return data.documents !== undefined ? `${data.documents} ${t("web.hits")}` : "";
    case "PLAN_READY": return `${data.tasks}`;
    case "TASK_DONE": return [data.id, data.description || data.status].filter(Boolean).join(" · ");
    case "SENTENCE_VERIFIED": return data.sentence || "";
    case "VERIFIED": return `${data.supported}/${data.total}`;
    case "REFUSED": case "FALLBACK": return data.reason || "";
    default: return "";
  }
}

function duration(ms) {
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`;
}

// The stages of the turn as they run: a node per state the orchestrator enters (an R2 loop enters
// RETRIEVING and GRADING again, so its rounds show as repeated nodes), each with its duration and
// the outcome of the event that ended it.
function trackStage(ev) {
  const nodes = state.nodes;
  const last = nodes[nodes.length - 1];
  if (last && last.state === ev.state) {
    last.end = ev.at_ms;
    last.events.push(ev);
  } else {
    if (last) { last.end = ev.at_ms; last.events.push(ev); last.closed = true; }
    nodes.push({ state: ev.state, start: ev.at_ms, end: ev.at_ms, events: last ? [] : [ev], closed: false });
  }
  if (ev.name === "ROUTE_DECIDED") state.route = ev.data;
  renderGraph(false);
}

function renderGraph(finished, failed) {
  const graph = $("#workflow-graph");
  graph.innerHTML = "";
  state.nodes.forEach((node, i) => {
    const li = document.createElement("li");
    const terminal = ["DONE", "REFUSED", "BLOCKED", "CANCELLED", "REQUESTING_CLARIFICATION"].includes(node.state);
    const running = !finished && i === state.nodes.length - 1 && !terminal;
    li.className = `node ${running ? "active" : "done"}${failed && i === state.nodes.length - 1 ? " failed" : ""}` +
      (["REFUSED", "BLOCKED", "FALLING_BACK"].includes(node.state) ? " warn" : "");
    li.dataset.state = node.state;
    const closing = node.events[node.events.length - 1];
    const detail = closing ? eventDetail(closing.name, closing.data || {}) : "";
    li.innerHTML = `<span class="label">${esc(t("web.state." + node.state, node.state))}</span>` +
      (terminal ? "" : `<span class="time">${esc(duration(node.end - node.start))}</span>`) +
      (detail ? `<span class="detail" title="${esc(detail)}">${esc(detail)}</span>` : "");
    graph.appendChild(li);
  });
  const route = state.route;
  $("#decision-path").innerHTML = route ? `<b>${esc(t("web.decision_path"))}:</b> ${esc(route.route)} → ${esc(route.mode)}` +
    (route.reasons && route.reasons.length ? ` <span class="hint">(${esc(route.reasons.join("; "))})</span>` : "") : "";
}

function addProgress(name, data, cls) {
  const li = document.createElement("li");
  li.dataset.event = name;
  if (cls) li.className = cls;
  const detail = eventDetail(name, data || {});
  li.innerHTML = `${esc(t("web.event." + name, name))}${detail ? `<span class="detail">${esc(detail)}</span>` : ""}`;
  $("#progress").appendChild(li);
}

function parseSSE(block) {
  let event = "message", data = "";
  for (const line of block.split("\n")) {
    if (line.startsWith("event:")) event = line.slice(6).trim();
    else if (line.startsWith("data:")) data += line.slice(5).replace(/^ /, "");
  }
  return data ? { event, data: JSON.parse(data) } : null;
}

async function ask(event) {
  event.preventDefault();
  const question = $("#question").value.trim();
  if (!question) return;
  const button = $("#ask-button");
  button.disabled = true;
  $("#progress").innerHTML = "";
  $("#workflow-graph").innerHTML = "";
  $("#decision-path").innerHTML = "";
  $("#verification tbody").innerHTML = "";
  $("#grading tbody").innerHTML = "";
  $("#grading-box").hidden = true;
  state.nodes = [];
  state.route = null;
  $("#citations").innerHTML = "";
  $("#answer-meta").textContent = "";
  const answer = $("#answer");
  answer.className = "";
  answer.dataset.state = "working";
  answer.textContent = t("web.working");
  $("#passage").innerHTML = `<p class="hint">${esc(t("web.passage_hint"))}</p>`;
  const body = { question, session: currentSession() };
  if ($("#mode").value) body.mode = $("#mode").value;
  if ($("#model").value) body.model = $("#model").value;
  const scope = scopeDocIds();
  if (scope.length) body.doc_ids = scope;
  try {
    const resp = await fetch("/api/agent/qa/v2/stream", {
      method: "POST", headers: authHeaders({ "content-type": "application/json", accept: "text/event-stream" }),
      body: JSON.stringify(body) });
    if (!resp.ok) {
      const err = await resp.json().catch(() => ({ detail: resp.statusText }));
      throw httpError(resp.status, err.detail || resp.statusText);
    }
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    // SSE ends a line with CRLF, LF or CR. A CRLF can arrive split across two reads: a read ending
    // in CR is held back until the next one says whether an LF follows, so the pair stays one line end
    let buffer = "", held = "", finished = false;
    const take = (text) => {
      text = held + text;
      held = text.endsWith("\r") ? "\r" : "";
      buffer += (held ? text.slice(0, -1) : text).replace(/\r\n?/g, "\n");
    };
    for (;;) {
      let chunk;
      // a connection that breaks mid-stream (a killed worker, a proxy timeout): reported below
      try { chunk = await reader.read(); } catch (err) { break; }
      if (chunk.done) break;
      take(decoder.decode(chunk.value, { stream: true }));
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const message = parseSSE(buffer.slice(0, cut));
        buffer = buffer.slice(cut + 2);
        if (!message) continue;
        if (message.event === "answer") { finished = true; showAnswer(message.data); }
        else if (message.event === "error") { finished = true; throw new Error(message.data.detail); }
        else {
          trackStage(message.data);
          addProgress(message.event, message.data.data,
            message.event === "SENTENCE_VERIFIED" ? "verified" : (message.event === "REFUSED" ? "refused" : ""));
        }
      }
    }
    // the stream ended without its answer or error event (a server restart, a killed worker, a
    // proxy's timeout): the turn failed, it is not still running
    if (!finished) throw new Error(t("web.stream_cut"));
  } catch (err) {
    answer.dataset.state = "error";
    answer.textContent = errorText(err);
    addProgress("error", { reason: err.message }, "error");
    renderGraph(true, true);
  } finally {
    button.disabled = false;
  }
}

// ------------------------------------------------------------------ the answer and its sources
// a sentence of the answer as written (escaped), but for the Markdown emphasis (**…**) the model
// copies from a Markdown source, which shows as bold
function emphasisHtml(text) {
  return esc(text).replace(/\*\*(?=\S)(.+?)(?<=\S)\*\*/g, "<strong>$1</strong>");
}

// the answer (emphasisHtml) with its markers as links to their citations
function answerHtml(text, citations) {
  return emphasisHtml(text)
    .replace(/\[(\d+)\]/g, (m, n) =>
      citations.some((c) => c.citation_id === n) ? `<a class="cite" data-cite="${n}" href="#">[${n}]</a>` : m);
}

function showAnswer(res) {
  state.citations = res.citations;
  const answer = $("#answer");
  answer.className = res.fallback ? "fallback" : "";
  answer.innerHTML = answerHtml(res.answer, res.citations);
  answer.dataset.state = "done";
  answer.dataset.traceId = res.trace_id;
  const grounded = res.grounded ? `<span class="ok">${esc(t("web.grounded"))}</span>` : `<span class="no">${esc(t("web.not_grounded"))}</span>`;
  $("#answer-meta").innerHTML = `${esc(t("web.route"))}: ${esc(res.route)} · ${esc(t("web.mode"))}: ${esc(res.mode || "")} · ` +
    `${esc(t("web.confidence"))}: ${Number(res.confidence).toFixed(2)} · ${grounded} · ` +
    `<a href="/api/traces/${encodeURIComponent(res.trace_id)}" target="_blank">${esc(t("web.trace"))}</a>`;
  const list = $("#citations");
  list.innerHTML = "";
  for (const c of res.citations) {
    const li = document.createElement("li");
    li.value = Number(c.citation_id) || undefined;
    li.innerHTML = `<a class="cite" data-cite="${esc(c.citation_id)}" href="#">${esc(c.source)}</a>` +
      (c.snippet ? ` <span class="snippet">“${esc(c.snippet)}”</span>` : "");
    list.appendChild(li);
  }
  renderGraph(true);
  showVerification(res.claims || []);
  showGrading(res.trace_id);
  loadFacts();
}

// the verifier's verdict on each sentence of the draft: kept sentences make the answer
function showVerification(claims) {
  const body = $("#verification tbody");
  body.innerHTML = "";
  for (const c of claims) {
    const tr = document.createElement("tr");
    tr.dataset.verdict = c.verdict;
    const sim = c.similarity === null || c.similarity === undefined ? "" : ` · ${Number(c.similarity).toFixed(2)}`;
    tr.innerHTML = `<td>${emphasisHtml(c.sentence)}</td>` +
      `<td><span class="verdict v-${esc(String(c.verdict).toLowerCase())}">${esc(c.verdict)}</span>` +
      (c.kept === false ? ` <small class="no">${esc(t("web.dropped"))}</small>` : "") + `</td>` +
      `<td class="hint">${esc(c.method || "")}${esc(sim)}${c.reason ? ` · ${esc(c.reason)}` : ""}</td>`;
    body.appendChild(tr);
  }
}

// the grader's verdict on each retrieved document (R2), from the turn's trace
async function showGrading(traceId) {
  let trace;
  try { trace = await api(`/api/traces/${encodeURIComponent(traceId)}`); } catch (err) { return; }
  const loop = trace.loop || {};
  const grades = loop.grades || [];
  const body = $("#grading tbody");
  body.innerHTML = "";
  $("#grading-box").hidden = !grades.length;
  const sources = Object.fromEntries(state.documents.map((d) => [d.doc_id, d.source]));
  for (const g of grades) {
    const tr = document.createElement("tr");
    tr.dataset.relevant = g.is_relevant ? "1" : "0";
    tr.innerHTML = `<td>${esc(sources[g.doc_id] || g.doc_id || "")} <small>${esc(t("web.attempt"))} ${esc(g.attempt || 0)}</small></td>` +
      `<td><span class="verdict ${g.is_relevant ? "v-supported" : "v-unsupported"}">${esc(t(g.is_relevant ? "web.relevant" : "web.not_relevant"))}</span>` +
      ` <small>${Number(g.confidence || 0).toFixed(2)}</small></td><td class="hint">${esc(g.reasoning || "")}</td>`;
    body.appendChild(tr);
  }
  if (loop.decision_path && loop.decision_path.length) {
    $("#decision-path").insertAdjacentHTML("beforeend", ` <span class="loop">· ${esc(loop.decision_path.join(" → "))}</span>`);
  }
}

// ------------------------------------------------------------------ the session and its fact ledger
function newSessionId() {
  return "web-" + Math.random().toString(36).slice(2, 10);
}

function currentSession() {
  let id = $("#session").value.trim();
  if (!id) { id = newSessionId(); $("#session").value = id; }
  localStorage.setItem("cograg.session", id);
  return id;
}

let factsLoad = 0;  // loads can overlap (ask, session change, forget): only the latest one renders

async function loadFacts() {
  const id = currentSession();
  const load = ++factsLoad;
  $("#facts-session").textContent = id;
  const list = $("#facts");
  let facts = [], failed = null;
  // a session not stored yet answers 404: an empty ledger; a 401 asks for a key
  try { facts = await api(`/api/sessions/${encodeURIComponent(id)}/facts`); } catch (err) { facts = []; failed = err; }
  // an older request answering late would show a ledger from before a change (a forgotten fact)
  if (load !== factsLoad) return;
  list.innerHTML = failed && failed.status === 401 ? `<li class="hint error">${esc(errorText(failed))}</li>`
    : (facts.length ? "" : `<li class="hint">${esc(t("web.no_facts"))}</li>`);
  for (const f of facts) {
    const li = document.createElement("li");
    li.dataset.factId = f.fact_id;
    li.className = f.valid ? "" : "invalid";
    li.innerHTML = `<span class="statement">${emphasisHtml(f.statement)}</span>` +
      `<small>${esc(baseName(f.source) || f.kind)}${f.valid ? "" : ` · ${esc(t("web.fact_invalid"))}${f.invalid_reason ? ": " + esc(f.invalid_reason) : ""}`}</small>`;
    const forget = document.createElement("button");  // forgetting deletes the fact from the ledger
    forget.type = "button";
    forget.className = "forget";
    forget.textContent = t("web.forget");
    forget.onclick = async () => {
      showStatus("#facts-status", "");
      try {
        await api(`/api/sessions/${encodeURIComponent(id)}/facts/${encodeURIComponent(f.fact_id)}`, { method: "DELETE" });
      } catch (err) {
        showStatus("#facts-status", errorText(err));  // a 404: forgotten already (another tab)
      }
      loadFacts();
    };
    li.appendChild(forget);
    list.appendChild(li);
  }
}

// the passage with its quote marked; `shown` is the text as a reader takes it (the API's
// `reflowed`: a hard-wrapped file's lines run on), as long as `text`, so the quote found in `text`
// is marked at the same place in it
function highlighted(text, quote, shown) {
  const view = shown && shown.length === text.length ? shown : text;
  const at = quote ? text.indexOf(quote) : -1;
  if (at < 0) return esc(view);
  return esc(view.slice(0, at)) + `<mark>${esc(view.slice(at, at + quote.length))}</mark>` +
    esc(view.slice(at + quote.length));
}

async function openCitation(id) {
  const c = state.citations.find((x) => x.citation_id === id);
  if (!c) return;
  document.querySelectorAll("a.cite").forEach((a) => a.classList.toggle("active", a.dataset.cite === id));
  const box = $("#passage");
  box.dataset.chunkId = c.chunk_id;
  try {
    const chunk = await api(`/api/chunks/${encodeURIComponent(c.chunk_id)}`);
    const where = [chunk.title, ...(chunk.heading_path || [])].filter((x, i, a) => x && a.indexOf(x) === i).join(" › ");
    box.innerHTML = `<div class="source">[${esc(id)}] ${esc(chunk.source)}${chunk.page ? " p." + chunk.page : ""}</div>` +
      `<div class="where">${esc(where)}</div>` +
      (chunk.snippet_visible ? `<div class="text">${highlighted(chunk.text, c.snippet, chunk.reflowed)}</div>`
                             : `<p class="hint">${esc(t("web.snippet_hidden"))}</p>`);
  } catch (err) {
    box.innerHTML = `<div class="source">[${esc(id)}] ${esc(c.source)}</div>` +
      (c.snippet ? `<div class="text"><mark>${esc(c.snippet)}</mark></div>` : `<p class="hint">${esc(err.message)}</p>`);
  }
}

document.addEventListener("click", (event) => {
  const link = event.target.closest("a.cite");
  if (!link) return;
  event.preventDefault();
  openCitation(link.dataset.cite);
});

async function start() {
  try { state.messages = await api("/api/messages"); } catch (err) { state.messages = {}; }
  applyLanguage();
  $("#lang-toggle").onclick = () => {
    state.lang = state.lang === "zh" ? "en" : "zh"; applyLanguage(); loadDocuments(); loadFacts(); renderGraph(true);
  };
  $("#ask-form").addEventListener("submit", ask);
  $("#upload-form").addEventListener("submit", upload);
  $("#session").value = localStorage.getItem("cograg.session") || newSessionId();
  // an input fires "change" again when it loses focus (a click on a fact's Forget button, say):
  // the ledger of the session already shown is not loaded again, so the button clicked is not
  // swapped for a new one between the press and the release, and the click not lost
  $("#session").addEventListener("change", () => {
    if ($("#session").value.trim() !== $("#facts-session").textContent) loadFacts();
  });
  $("#new-session").onclick = () => { $("#session").value = newSessionId(); loadFacts(); };
  $("#api-key").value = sessionStorage.getItem("cograg.key") || "";
  $("#api-key").addEventListener("change", () => {
    // a session belongs to the key that made it: another key starts a session of its own
    sessionStorage.setItem("cograg.key", $("#api-key").value.trim());
    $("#session").value = newSessionId();
    loadDocuments(); loadFacts();
  });
  // a server that takes no anonymous callers answers 401 here: the panels say a key is needed, and
  // the page is ready all the same (the key field is what the reader needs next)
  try {
    await loadDocuments();
    await loadFacts();
  } catch (err) {
    showStatus("#documents-status", errorText(err));
  } finally {
    document.body.dataset.ready = "1";
  }
}

start();
