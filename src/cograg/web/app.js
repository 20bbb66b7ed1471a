// The cograg page: ask (with the workflow streamed as Server-Sent Events), read the verified
// answer, open a citation's passage, manage documents. Plain JavaScript, no build step.
"use strict";

const state = { messages: {}, lang: (navigator.language || "en").toLowerCase().startsWith("zh") ? "zh" : "en",
                citations: [] };
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

async function api(path, options) {
  const resp = await fetch(path, options);
  const body = await resp.json().catch(() => ({ error: "error", detail: resp.statusText }));
  if (!resp.ok) throw new Error(body.detail || body.error || resp.statusText);
  return body;
}

// ------------------------------------------------------------------ documents
async function loadDocuments() {
  const list = $("#documents");
  const docs = await api("/api/documents");
  list.innerHTML = docs.length ? "" : `<li class="hint">${esc(t("web.no_documents"))}</li>`;
  for (const d of docs) {
    const li = document.createElement("li");
    li.innerHTML = `<span title="${esc(d.doc_id)}">${esc(d.source)} <small>${d.chunk_count} ${esc(t("web.chunks"))}</small></span>`;
    const del = document.createElement("button");
    del.type = "button";
    del.textContent = t("web.delete");
    del.onclick = async () => { await api(`/api/documents/${encodeURIComponent(d.doc_id)}`, { method: "DELETE" }); loadDocuments(); };
    li.appendChild(del);
    list.appendChild(li);
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
    status.textContent = `${t("web.error")}: ${err.message}`;
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
    case "PLAN_READY": return `${data.tasks}`;
    case "TASK_DONE": return [data.id, data.description || data.status].filter(Boolean).join(" · ");
    case "SENTENCE_VERIFIED": return data.sentence || "";
    case "VERIFIED": return `${data.supported}/${data.total}`;
    case "REFUSED": case "FALLBACK": return data.reason || "";
    default: return "";
  }
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
  $("#citations").innerHTML = "";
  $("#answer-meta").textContent = "";
  const answer = $("#answer");
  answer.className = "";
  answer.dataset.state = "working";
  answer.textContent = t("web.working");
  $("#passage").innerHTML = `<p class="hint">${esc(t("web.passage_hint"))}</p>`;
  const body = { question };
  if ($("#mode").value) body.mode = $("#mode").value;
  try {
    const resp = await fetch("/api/agent/qa/v2/stream", {
      method: "POST", headers: { "content-type": "application/json", accept: "text/event-stream" },
      body: JSON.stringify(body) });
    if (!resp.ok) {
      const err = await resp.json().catch(() => ({ detail: resp.statusText }));
      throw new Error(err.detail || resp.statusText);
    }
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n/g, "\n");
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const message = parseSSE(buffer.slice(0, cut));
        buffer = buffer.slice(cut + 2);
        if (!message) continue;
        if (message.event === "answer") showAnswer(message.data);
        else if (message.event === "error") throw new Error(message.data.detail);
        else addProgress(message.event, message.data.data,
          message.event === "SENTENCE_VERIFIED" ? "verified" : (message.event === "REFUSED" ? "refused" : ""));
      }
    }
  } catch (err) {
    answer.dataset.state = "error";
    answer.textContent = `${t("web.error")}: ${err.message}`;
    addProgress("error", { reason: err.message }, "error");
  } finally {
    button.disabled = false;
  }
}

// ------------------------------------------------------------------ the answer and its sources
function showAnswer(res) {
  state.citations = res.citations;
  const answer = $("#answer");
  answer.className = res.fallback ? "fallback" : "";
  answer.innerHTML = esc(res.answer).replace(/\[(\d+)\]/g, (m, n) =>
    res.citations.some((c) => c.citation_id === n) ? `<a class="cite" data-cite="${n}" href="#">[${n}]</a>` : m);
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
}

function highlighted(text, quote) {
  const at = quote ? text.indexOf(quote) : -1;
  if (at < 0) return esc(text);
  return esc(text.slice(0, at)) + `<mark>${esc(quote)}</mark>` + esc(text.slice(at + quote.length));
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
      (chunk.snippet_visible ? `<div class="text">${highlighted(chunk.text, c.snippet)}</div>`
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
  $("#lang-toggle").onclick = () => { state.lang = state.lang === "zh" ? "en" : "zh"; applyLanguage(); loadDocuments(); };
  $("#ask-form").addEventListener("submit", ask);
  $("#upload-form").addEventListener("submit", upload);
  await loadDocuments();
  document.body.dataset.ready = "1";
}

start();
