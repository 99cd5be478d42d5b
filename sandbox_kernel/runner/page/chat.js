// The agent server's page. Everything a run produced comes from untrusted code (values,
// column names, messages, the code itself): it is only ever set as text (textContent, never
// innerHTML), and the server's Content-Security-Policy allows no inline script at all.
"use strict";

const $ = (id) => document.getElementById(id);

function text(tag, value, attributes = {}) {
  const node = document.createElement(tag);
  node.textContent = value === null || value === undefined ? "" : String(value);
  for (const [name, v] of Object.entries(attributes)) node.setAttribute(name, v);
  return node;
}

function cell(value) {
  if (value === null) return "null";
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}

async function loadDatasets() {
  const answer = await fetch("/datasets", { credentials: "same-origin" });
  if (!answer.ok) return showError(`could not list the datasets (HTTP ${answer.status})`);
  const { datasets, problem } = await answer.json();
  if (problem) showError(problem);
  const select = $("dataset");
  for (const dataset of datasets) {
    const tables = dataset.tables.map((t) => t.name).join(", ");
    select.append(text("option", `${dataset.id}: ${tables}`, { value: dataset.id }));
  }
}

function showError(message) {
  const node = $("error");
  node.textContent = message;
  node.hidden = false;
}

function clear() {
  for (const id of ["statuses", "result", "details"]) $(id).replaceChildren();
  $("summary").textContent = "";
  $("error").hidden = true;
  $("stdout").hidden = true;
  showFigure(null);
}

// A Python run's chart: base64 PNG the server checked (its signature, its size), shown as an
// image, never as markup.
function showFigure(png) {
  const figure = $("figure");
  figure.hidden = !png;
  if (png) figure.src = `data:image/png;base64,${png}`;
  else figure.removeAttribute("src");
}

function addStatus(event, data) {
  let note = "";
  if (event === "planning") note = data.mode === "explicit" ? "as written" : `model ${data.model ?? "?"}`;
  if (event === "validating") note = `${data.query_type}: ${data.allowed ? "allowed" : "refused"}`;
  if (event === "executing") note = data.waiting ? `${data.waiting} waiting` : "";
  if (event === "result") note = data.status;
  if (event === "error") note = `${data.type}: ${data.message}`;
  if (event === "done") note = `${data.elapsed_ms} ms`;
  $("statuses").append(text("li", note ? `${event} (${note})` : event, { "data-event": event }));
}

function showTable(response) {
  const table = $("result");
  const head = document.createElement("tr");
  for (const column of response.columns) head.append(text("th", column));
  const thead = document.createElement("thead");
  thead.append(head);
  const tbody = document.createElement("tbody");
  for (const row of response.rows) {
    const line = document.createElement("tr");
    for (const value of row) line.append(text("td", cell(value)));
    tbody.append(line);
  }
  table.replaceChildren(thead, tbody);
  const total = response.total_rows ?? response.row_count;
  const cut = response.truncated ? ` (cut: ${response.limits_hit.join(", ")})` : "";
  $("summary").textContent = `${response.row_count} of ${total} rows${cut}`;
  const printed = [response.stdout_trunc, response.stderr_trunc].filter(Boolean).join("\n");
  $("stdout").textContent = printed;
  $("stdout").hidden = !printed;
  showFigure(response.figure_png);
}

function detail(term, value, pre = false) {
  const list = $("details");
  list.append(text("dt", term));
  const dd = document.createElement("dd");
  dd.append(text(pre ? "pre" : "span", value));
  list.append(dd);
}

async function showDetails(runId, plan) {
  if (plan) {
    detail("query_type", plan.query_type);
    detail(plan.query_type === "sql" ? "SQL" : "Python code", plan.code, true);
    detail("planned by", plan.source === "model" ? `model ${plan.model ?? "?"}` : "the user");
    if (plan.explanation) detail("model's note", plan.explanation, true);
  }
  if (!runId) return;
  const answer = await fetch(`/capsules/${encodeURIComponent(runId)}`, { credentials: "same-origin" });
  if (!answer.ok) return detail("run", `${runId} (details unavailable: HTTP ${answer.status})`);
  const capsule = await answer.json();
  detail("run id", capsule.id);
  detail("guard", verdict(capsule.policy_report, plan), true);
  const timings = Object.entries(capsule.timings_ms).map(([k, v]) => `${k} ${v} ms`).join(", ");
  detail("timings", timings);
  detail("limits hit", capsule.limits_hit.length ? capsule.limits_hit.join(", ") : "none");
  const limits = Object.entries(capsule.sandbox)
    .filter(([, v]) => typeof v !== "object").map(([k, v]) => `${k} ${v}`).join(", ");
  detail("limits", limits);
}

function verdict(report, plan) {
  // Python: the AST check's report, as recorded; SQL: the statement check, as streamed.
  if (report) {
    return report.allowed
      ? "allowed (AST policy check)"
      : report.violations.map((v) => `line ${v.line}: ${v.message}`).join("\n");
  }
  if (!plan) return "not reached";
  return plan.allowed ? "allowed (SQL statement check)" : plan.violations.join("\n");
}

function* events(buffer) {
  // Complete events in `buffer.text`; what is left waits for more bytes.
  let end;
  while ((end = buffer.text.indexOf("\n\n")) >= 0) {
    const block = buffer.text.slice(0, end);
    buffer.text = buffer.text.slice(end + 2);
    let name = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (line.startsWith("event: ")) name = line.slice(7);
      else if (line.startsWith("data: ")) data.push(line.slice(6));
    }
    if (data.length) yield [name, JSON.parse(data.join("\n"))];
  }
}

async function ask(form) {
  clear();
  $("send").disabled = true;
  let plan = null;
  let runId = null;
  let finished = false;
  try {
    const body = JSON.stringify({ message: form.message.value, dataset_id: form.dataset_id.value });
    const answer = await fetch("/chat", {
      method: "POST",
      credentials: "same-origin",
      headers: { "content-type": "application/json" },
      body,
    });
    if (!answer.ok) {
      const failure = await answer.json().catch(() => ({}));
      return showError(failure.error ? `${failure.error.type}: ${failure.error.message}` : `HTTP ${answer.status}`);
    }
    const reader = answer.body.pipeThrough(new TextDecoderStream()).getReader();
    const buffer = { text: "" };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer.text += value;
      for (const [event, data] of events(buffer)) {
        addStatus(event, data);
        if (event === "validating") plan = data;
        if (event === "result") { showTable(data); runId = data.run_id; }
        if (event === "error") showError(`${data.type}: ${data.message}`);
        if (event === "done") finished = true;
      }
    }
    if (!finished) {
      // The server went away mid-answer (a replica stopped): say so, never a silent page.
      return showError("the server stopped before it finished answering: ask again");
    }
    await showDetails(runId, plan);
  } catch (failure) {
    showError(`the connection failed: ${failure}`);
  } finally {
    $("send").disabled = false;
    document.body.dataset.state = "idle";
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("ask").addEventListener("submit", (event) => {
    event.preventDefault();
    document.body.dataset.state = "busy";
    ask(event.target);
  });
  loadDatasets().then(() => { document.body.dataset.state = "idle"; });
});
