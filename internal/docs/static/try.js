// The "try it" page: lists the caller's tools (GET /v1/tools), builds a form
// from each tool's arguments_schema, and calls :invoke and :stream. Streams
// are read with fetch and a ReadableStream (EventSource cannot POST); the
// page asks for Server-Sent Events and also reads newline-delimited JSON.
"use strict";

(function () {
  const keyStorage = "toolgate.docs.api-key";
  const maxPages = 50;

  // gRPC code numbers → names, for error displays.
  const grpcCodes = [
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
    "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
  ];

  // el builds an element: attrs become attributes (false/null/undefined
  // are left out), children are nodes or text. Text never goes through HTML
  // parsing, so descriptions from the registry cannot inject markup.
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === false || v === null || v === undefined) continue;
      node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  function apiKey() {
    return document.getElementById("api-key").value.trim();
  }

  function headers(extra) {
    const h = Object.assign({}, extra);
    const key = apiKey();
    if (key) h.Authorization = "Bearer " + key;
    return h;
  }

  // idPart makes a tool or argument name safe inside an id attribute.
  function idPart(s) {
    return String(s).replace(/[^A-Za-z0-9_-]/g, (c) => "_" + c.charCodeAt(0).toString(16));
  }

  // readError turns a failed response into {status, code, message, details}.
  async function readError(resp) {
    const text = await resp.text();
    let st = null;
    try { st = JSON.parse(text); } catch (e) { /* not JSON */ }
    if (st && typeof st === "object" && st.error && typeof st.error === "object") st = st.error;
    if (!st || typeof st !== "object") st = { message: text.trim() || resp.statusText };
    return Object.assign({ httpStatus: resp.status, httpText: resp.statusText }, st);
  }

  // describeError puts a readError result on one line.
  function describeError(err) {
    const parts = [];
    if (err.httpStatus) parts.push("HTTP " + err.httpStatus + (err.httpText ? " " + err.httpText : ""));
    if (typeof err.code === "number") parts.push(grpcCodes[err.code] || "code " + err.code);
    return parts.join(" · ") + ": " + (err.message || "(no message)");
  }

  // ---------- tool list ----------

  async function loadTools() {
    const status = document.getElementById("tools-status");
    const container = document.getElementById("tools");
    const index = document.getElementById("tool-index");
    setState(status, "loading", "Loading tools…");
    container.replaceChildren();
    index.hidden = true;
    const tools = [];
    let token = "";
    try {
      for (let page = 0; page < maxPages; page++) {
        const q = new URLSearchParams({ page_size: "100" });
        if (token) q.set("page_token", token);
        const resp = await fetch("/v1/tools?" + q, { headers: headers({ Accept: "application/json" }) });
        if (!resp.ok) {
          const err = await readError(resp);
          setState(status, "error", describeError(err) +
            (resp.status === 401 ? " (enter an API key above and load the tools again)" : ""));
          return;
        }
        const body = await resp.json();
        tools.push(...(body.tools || []));
        token = body.next_page_token || "";
        if (!token) break;
      }
    } catch (e) {
      setState(status, "error", "Could not reach the gateway: " + e.message);
      return;
    }
    tools.sort((a, b) => a.name.localeCompare(b.name));
    if (tools.length === 0) {
      setState(status, "ok", "No tools are visible to these credentials.");
      return;
    }
    setState(status, "ok", tools.length === 1 ? "1 tool." : tools.length + " tools.");
    const list = index.querySelector("ul");
    list.replaceChildren(...tools.map((t) =>
      el("li", {}, el("a", { href: "#tool-" + idPart(t.name) }, t.name))));
    index.hidden = false;
    container.replaceChildren(...tools.map(toolCard));
  }

  function setState(node, state, text) {
    node.dataset.state = state;
    node.textContent = text;
  }

  // ---------- one tool ----------

  // argumentList merges the tool's ordered "arguments" with the JSON Schema
  // of its arguments object: the schema decides types, the list the order.
  function argumentList(tool) {
    const schema = tool.arguments_schema || {};
    const props = schema.properties || {};
    const required = new Set(schema.required || []);
    const out = [];
    const seen = new Set();
    for (const a of tool.arguments || []) {
      const p = props[a.name] || {};
      out.push({
        name: a.name,
        schema: Object.assign({ type: a.type, description: a.description }, p),
        required: required.has(a.name) || !!a.required,
      });
      seen.add(a.name);
    }
    for (const [name, p] of Object.entries(props)) {
      if (!seen.has(name)) out.push({ name, schema: p, required: required.has(name) });
    }
    return out;
  }

  function schemaType(s) {
    let t = s.type;
    if (Array.isArray(t)) t = t.find((x) => x !== "null") || t[0];
    if (!t && s.enum) t = "string";
    return t || "any";
  }

  function toolCard(tool) {
    const id = "tool-" + idPart(tool.name);
    const args = argumentList(tool);
    const schema = tool.arguments_schema || {};
    const openEnded = schema.additionalProperties !== false && !tool.strict;

    const fields = args.map((a) => argumentField(tool, a));
    if (openEnded) {
      const fid = id + "-extra";
      fields.push(el("div", { class: "field" },
        el("label", { for: fid }, args.length ? "Other arguments " : "Any arguments ",
          el("span", { class: "hint" }, "(a JSON object, optional)")),
        el("textarea", {
          id: fid, rows: 3, spellcheck: "false", "data-arg-extra": true,
          placeholder: args.length ? '{"name": "value"}' : '{"mode": "stream", "n": 5}',
          "aria-describedby": fid + "-help",
        }),
        el("p", { id: fid + "-help", class: "hint" }, args.length
          ? "Merged into the call's arguments: this tool passes undeclared arguments on to its service."
          : "This tool declares no arguments and passes what it gets on to its service.")));
    }
    if (fields.length === 0) fields.push(el("p", { class: "hint" }, "This tool takes no arguments."));

    const timeoutId = id + "-timeout";
    const form = el("form", { class: "call", "data-tool": tool.name, novalidate: true },
      el("fieldset", {}, el("legend", {}, "Arguments"), fields),
      el("div", { class: "field timeout" },
        el("label", { for: timeoutId }, "Timeout ", el("span", { class: "hint" }, "(optional, e.g. 5s or 200ms)")),
        el("input", { id: timeoutId, type: "text", "data-field": "timeout", spellcheck: "false", size: 8 })),
      el("div", { class: "actions" },
        el("button", { type: "submit", id: id + "-invoke", "data-action": "invoke" }, "Invoke"),
        el("button", { type: "submit", id: id + "-stream", "data-action": "stream", class: "secondary" }, "Stream"),
        el("button", { type: "button", id: id + "-stop", "data-action": "stop", class: "secondary", disabled: true }, "Stop")));

    const result = el("div", { class: "result", "data-role": "result", hidden: true },
      el("p", { class: "status", "data-role": "status", role: "status", "aria-live": "polite", "data-state": "idle" }),
      el("div", { class: "error", "data-role": "error", role: "alert", hidden: true }),
      el("h4", { id: id + "-output-h" }, "Output"),
      el("pre", { class: "output", "data-role": "output", tabindex: 0, "aria-labelledby": id + "-output-h" }),
      el("div", { "data-role": "chunks-box", hidden: true },
        el("h4", {}, "Chunks as they arrived"),
        el("ol", { class: "chunks", "data-role": "chunks", start: 0 })),
      el("details", { class: "curl" }, el("summary", {}, "The same call with curl"),
        el("pre", { "data-role": "curl" })));

    const card = el("article", { class: "tool", id, "data-tool": tool.name, "aria-labelledby": id + "-h" },
      el("header", {},
        el("h3", { id: id + "-h" }, el("code", {}, tool.name)),
        el("p", { class: "meta" },
          tool.service ? el("span", {}, "service ", el("code", {}, tool.service)) : null,
          tool.strict ? el("span", { class: "badge" }, "strict") : null)),
      tool.description ? el("p", { class: "description" }, tool.description) : null,
      form, result);

    let controller = null;
    const stop = form.querySelector('[data-action="stop"]');
    stop.addEventListener("click", () => { if (controller) controller.abort(); });
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      if (controller) return;
      const action = ev.submitter && ev.submitter.dataset.action === "stream" ? "stream" : "invoke";
      const view = resultView(result);
      let body;
      try {
        body = callBody(form, args);
      } catch (e) {
        view.start(action);
        view.fail({ message: e.message, local: true });
        return;
      }
      controller = new AbortController();
      setBusy(form, true);
      view.start(action);
      view.curl(curlCommand(tool.name, action, body));
      try {
        if (action === "stream") await stream(tool.name, body, view, controller.signal);
        else await invoke(tool.name, body, view, controller.signal);
      } catch (e) {
        if (e.name === "AbortError") view.stopped();
        else if (e instanceof SyntaxError) view.fail({ message: "The gateway's answer is not valid JSON: " + e.message, local: true });
        else view.fail({ message: "Could not reach the gateway: " + e.message, local: true });
      } finally {
        controller = null;
        setBusy(form, false);
      }
    });
    return card;
  }

  function argumentField(tool, a) {
    const id = "arg-" + idPart(tool.name) + "-" + idPart(a.name);
    const s = a.schema || {};
    const type = schemaType(s);
    const common = {
      id, name: a.name, "data-arg": a.name, "data-type": type,
      "aria-required": a.required ? "true" : false,
      "aria-describedby": s.description ? id + "-help" : false,
    };
    let input;
    if (Array.isArray(s.enum)) {
      input = el("select", common, el("option", { value: "" }, a.required ? "(choose)" : "(not set)"),
        s.enum.map((v) => el("option", { value: JSON.stringify(v) }, String(v))));
      input.dataset.type = "enum";
    } else if (type === "boolean") {
      input = el("select", common,
        el("option", { value: "" }, a.required ? "(choose)" : "(not set)"),
        el("option", { value: "true" }, "true"),
        el("option", { value: "false" }, "false"));
    } else if (type === "integer" || type === "number") {
      input = el("input", Object.assign({ type: "number", step: type === "integer" ? "1" : "any", inputmode: type === "integer" ? "numeric" : "decimal" }, common));
    } else if (type === "object" || type === "array" || type === "any") {
      input = el("textarea", Object.assign({ rows: 3, spellcheck: "false", placeholder: type === "array" ? "[ … ] as JSON" : "JSON" }, common));
    } else {
      input = el("input", Object.assign({ type: "text", spellcheck: "false" }, common));
    }
    if (s.default !== undefined && input.tagName !== "SELECT") input.placeholder = "default: " + JSON.stringify(s.default);
    return el("div", { class: "field" + (a.required ? " required" : "") },
      el("label", { for: id }, el("code", {}, a.name), " ",
        el("span", { class: "type" }, type),
        a.required ? el("span", { class: "req" }, el("span", { "aria-hidden": "true" }, " *"), el("span", { class: "sr-only" }, " (required)")) : null),
      input,
      s.description ? el("p", { id: id + "-help", class: "hint" }, s.description) : null);
  }

  // callBody reads the form into {"arguments": {...}, "timeout": "..."};
  // it throws an Error naming the field when a value cannot be read.
  function callBody(form, args) {
    const out = {};
    for (const a of args) {
      const input = form.querySelector('[data-arg="' + CSS.escape(a.name) + '"]');
      if (!input) continue;
      const raw = input.value;
      if (raw.trim() === "") continue; // unset: the gateway reports missing required arguments
      const type = input.dataset.type;
      if (type === "enum") out[a.name] = JSON.parse(raw);
      else if (type === "boolean") out[a.name] = raw === "true";
      else if (type === "integer" || type === "number") {
        const n = Number(raw);
        if (!Number.isFinite(n)) throw new Error("Argument " + a.name + ": not a number.");
        out[a.name] = n;
      } else if (type === "object" || type === "array" || type === "any") {
        try { out[a.name] = JSON.parse(raw); } catch (e) {
          throw new Error("Argument " + a.name + ": not valid JSON (" + e.message + ").");
        }
      } else out[a.name] = raw;
    }
    const extra = form.querySelector("[data-arg-extra]");
    if (extra && extra.value.trim() !== "") {
      let more;
      try { more = JSON.parse(extra.value); } catch (e) {
        throw new Error("Other arguments: not valid JSON (" + e.message + ").");
      }
      if (!more || typeof more !== "object" || Array.isArray(more)) throw new Error("Other arguments: must be a JSON object.");
      Object.assign(out, more);
    }
    const body = { arguments: out };
    const timeout = form.querySelector('[data-field="timeout"]').value.trim();
    if (timeout) body.timeout = timeout;
    return body;
  }

  function setBusy(form, busy) {
    for (const b of form.querySelectorAll('button[type="submit"]')) b.disabled = busy;
    form.querySelector('[data-action="stop"]').disabled = !busy;
  }

  function callURL(name, action) {
    return "/v1/tools/" + encodeURIComponent(name) + ":" + action;
  }

  function shellQuote(s) {
    return "'" + s.replace(/'/g, "'\\''") + "'";
  }

  function curlCommand(name, action, body) {
    const parts = ["curl -sS"];
    if (action === "stream") parts.push("-N -H 'Accept: text/event-stream'");
    if (apiKey()) parts.push('-H "Authorization: Bearer $TOOLGATE_API_KEY"');
    parts.push("-X POST " + shellQuote(location.origin + callURL(name, action)));
    parts.push("-H 'Content-Type: application/json'");
    parts.push("-d " + shellQuote(JSON.stringify(body)));
    return parts.join(" \\\n     ");
  }

  // ---------- results ----------

  function resultView(box) {
    const status = box.querySelector('[data-role="status"]');
    const error = box.querySelector('[data-role="error"]');
    const output = box.querySelector('[data-role="output"]');
    const chunksBox = box.querySelector('[data-role="chunks-box"]');
    const chunks = box.querySelector('[data-role="chunks"]');
    const curl = box.querySelector('[data-role="curl"]');
    let t0 = 0;
    let count = 0;
    const elapsed = () => {
      const ms = performance.now() - t0;
      return ms < 1000 ? Math.round(ms) + " ms" : (ms / 1000).toFixed(2) + " s";
    };
    return {
      start(action) {
        t0 = performance.now();
        count = 0;
        box.hidden = false;
        box.dataset.action = action;
        error.hidden = true;
        error.replaceChildren();
        output.textContent = "";
        chunks.replaceChildren();
        chunksBox.hidden = action !== "stream";
        setState(status, "pending", action === "stream" ? "Opening the stream…" : "Calling…");
      },
      curl(text) { curl.textContent = text; },
      // ok shows a unary result.
      ok(httpStatus, body) {
        output.textContent = typeof body.output === "string" ? body.output : JSON.stringify(body, null, 2);
        setState(status, "ok", "HTTP " + httpStatus + " · " + elapsed());
      },
      // chunk shows one stream chunk as soon as it arrives.
      chunk(c) {
        count++;
        const text = typeof c.output === "string" ? c.output : JSON.stringify(c);
        output.textContent += text;
        chunks.append(el("li", { "data-index": c.index !== undefined ? c.index : count - 1 }, el("code", {}, text)));
        setState(status, "streaming", "Streaming… " + count + (count === 1 ? " chunk" : " chunks") + " · " + elapsed());
      },
      keepAlive() {
        if (status.dataset.state === "pending") setState(status, "streaming", "Streaming… waiting for the first chunk · " + elapsed());
      },
      // stopped: the caller pressed Stop. Not a failure: what arrived
      // stays on the page.
      stopped() {
        const got = box.dataset.action === "stream" ? " after " + count + (count === 1 ? " chunk" : " chunks") : "";
        setState(status, "stopped", "Stopped" + got + " · " + elapsed());
      },
      done(note) {
        setState(status, "ok", "Done · " + count + (count === 1 ? " chunk" : " chunks") + " · " + elapsed() + (note ? " · " + note : ""));
      },
      // fail shows a google.rpc.Status (with the HTTP status when there was
      // one) or a local problem.
      fail(err) {
        const lines = [];
        if (!err.local) {
          const parts = [];
          if (err.httpStatus) parts.push("HTTP " + err.httpStatus + (err.httpText ? " " + err.httpText : ""));
          if (typeof err.code === "number") parts.push((grpcCodes[err.code] || "code") + " (" + err.code + ")");
          lines.push(el("p", { class: "error-head", "data-role": "error-status" }, parts.join(" · ") || "Error"));
        }
        lines.push(el("p", { "data-role": "error-message" }, err.message || "(no message)"));
        const facts = [];
        for (const d of err.details || []) {
          const type = String(d["@type"] || "");
          if (type.endsWith("google.rpc.ErrorInfo")) {
            facts.push(["reason", el("code", { "data-role": "error-reason" }, d.reason || "")]);
            if (d.domain) facts.push(["domain", d.domain]);
            for (const [k, v] of Object.entries(d.metadata || {})) facts.push([k, v]);
          } else if (type.endsWith("google.rpc.RetryInfo")) {
            facts.push(["retry after", d.retry_delay || d.retryDelay || ""]);
          } else if (type.endsWith("google.rpc.BadRequest")) {
            for (const v of d.field_violations || d.fieldViolations || []) facts.push([v.field || "field", v.description || ""]);
          } else {
            facts.push([type.replace(/^.*\//, "") || "detail", JSON.stringify(d)]);
          }
        }
        if (facts.length) lines.push(el("dl", {}, facts.map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])));
        error.replaceChildren(...lines);
        error.hidden = false;
        const where = box.dataset.action === "stream" && count ? " after " + count + (count === 1 ? " chunk" : " chunks") : "";
        setState(status, "error", "Failed" + where + " · " + elapsed());
      },
    };
  }

  async function invoke(name, body, view, signal) {
    const resp = await fetch(callURL(name, "invoke"), {
      method: "POST", signal, body: JSON.stringify(body),
      headers: headers({ "Content-Type": "application/json", Accept: "application/json" }),
    });
    if (!resp.ok) {
      view.fail(await readError(resp));
      return;
    }
    view.ok(resp.status, await resp.json());
  }

  async function stream(name, body, view, signal) {
    const resp = await fetch(callURL(name, "stream"), {
      method: "POST", signal, body: JSON.stringify(body),
      headers: headers({ "Content-Type": "application/json", Accept: "text/event-stream" }),
    });
    if (!resp.ok) {
      view.fail(await readError(resp));
      return;
    }
    const sse = (resp.headers.get("Content-Type") || "").startsWith("text/event-stream");
    let finished = false;
    const onChunk = (c) => view.chunk(c);
    const onError = (st) => { finished = true; view.fail(st); };
    const onDone = () => { finished = true; view.done(); };
    const parser = sse
      ? sseParser((ev) => {
        if (ev.event === "chunk" || ev.event === "message") onChunk(JSON.parse(ev.data));
        else if (ev.event === "done") onDone();
        else if (ev.event === "error") onError(JSON.parse(ev.data));
      }, () => view.keepAlive())
      : ndjsonParser((obj) => {
        if (obj.error && typeof obj.error === "object") onError(obj.error);
        else if (obj.result && typeof obj.result === "object") onChunk(obj.result);
        else if (obj.output === undefined && typeof obj.code === "number") onError(obj);
        else onChunk(obj);
      });
    const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      parser.push(value);
      if (finished) { reader.cancel().catch(() => {}); return; }
    }
    parser.end();
    if (!finished) {
      if (sse) view.fail({ message: "The stream ended without a done or error event.", local: true });
      else view.done();
    }
  }

  // sseParser reads Server-Sent Events text as it arrives and calls onEvent
  // with {event, data} per event, onComment per comment line (keep-alives).
  function sseParser(onEvent, onComment) {
    let buf = "";
    let event = "";
    let data = [];
    function line(l) {
      if (l === "") {
        if (data.length || event) onEvent({ event: event || "message", data: data.join("\n") });
        event = "";
        data = [];
        return;
      }
      if (l[0] === ":") { onComment(l.slice(1)); return; }
      const i = l.indexOf(":");
      const field = i < 0 ? l : l.slice(0, i);
      let value = i < 0 ? "" : l.slice(i + 1);
      if (value[0] === " ") value = value.slice(1);
      if (field === "event") event = value;
      else if (field === "data") data.push(value);
    }
    return {
      push(text) {
        buf += text;
        for (;;) {
          const m = /\r\n|\r|\n/.exec(buf);
          if (!m) break;
          // A lone \r at the end may be the first half of \r\n.
          if (m[0] === "\r" && m.index === buf.length - 1) break;
          line(buf.slice(0, m.index));
          buf = buf.slice(m.index + m[0].length);
        }
      },
      end() {
        if (buf.endsWith("\r")) line(buf.slice(0, -1));
        buf = "";
      },
    };
  }

  // ndjsonParser reads newline-delimited JSON as it arrives.
  function ndjsonParser(onObject) {
    let buf = "";
    return {
      push(text) {
        buf += text;
        let i;
        while ((i = buf.indexOf("\n")) >= 0) {
          const l = buf.slice(0, i).trim();
          buf = buf.slice(i + 1);
          if (l) onObject(JSON.parse(l));
        }
      },
      end() {
        const l = buf.trim();
        buf = "";
        if (l) onObject(JSON.parse(l));
      },
    };
  }

  // ---------- start ----------

  document.addEventListener("DOMContentLoaded", () => {
    const key = document.getElementById("api-key");
    try { key.value = sessionStorage.getItem(keyStorage) || ""; } catch (e) { /* storage off */ }
    document.getElementById("credentials").addEventListener("submit", (ev) => {
      ev.preventDefault();
      try {
        if (apiKey()) sessionStorage.setItem(keyStorage, apiKey());
        else sessionStorage.removeItem(keyStorage);
      } catch (e) { /* storage off */ }
      loadTools();
    });
    loadTools();
  });
})();
