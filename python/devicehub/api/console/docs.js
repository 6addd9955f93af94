// Renders whatever /openapi.json holds: every path and method, parameters, request body, responses, schemas
// (with $ref resolved) and examples. No third-party code.
"use strict";

const el = (tag, props, ...children) => {
  const node = Object.assign(document.createElement(tag), props || {});
  for (const child of children) if (child != null) node.append(child);
  return node;
};

function resolve(spec, schema, depth, seen) {
  // a copy of `schema` with $refs replaced by their targets (a ref already being expanded stays a ref)
  if (schema == null || typeof schema !== "object" || depth > 8) return schema;
  if (Array.isArray(schema)) return schema.map((s) => resolve(spec, s, depth + 1, seen));
  if (typeof schema.$ref === "string") {
    if (seen.includes(schema.$ref)) return { $ref: schema.$ref };
    const target = schema.$ref.replace(/^#\//, "").split("/").reduce((o, k) => (o ? o[k] : undefined), spec);
    return { "x-ref": schema.$ref.split("/").pop(), ...resolve(spec, target, depth + 1, [...seen, schema.$ref]) };
  }
  const out = {};
  for (const [k, v] of Object.entries(schema)) out[k] = resolve(spec, v, depth + 1, seen);
  return out;
}

function json(value) { return el("pre", { className: "schema" }, JSON.stringify(value, null, 2)); }

function content(spec, body) {
  const box = el("div");
  for (const [type, media] of Object.entries(body.content || {})) {
    box.append(el("div", null, el("code", null, type)));
    if (media.schema) box.append(el("details", null, el("summary", null, "schema"), json(resolve(spec, media.schema, 0, []))));
    if (media.example !== undefined) box.append(el("div", null, "example:"), json(media.example));
    for (const [name, ex] of Object.entries(media.examples || {}))
      box.append(el("div", null, `example ${name}${ex.summary ? ": " + ex.summary : ""}`), json(ex.value));
  }
  return box;
}

function operation(spec, path, method, op, shared) {
  const section = el("section", { className: "operation" });
  section.dataset.search = `${method} ${path} ${(op.tags || []).join(" ")} ${op.summary || ""}`.toLowerCase();
  section.id = `${method}-${path}`.replace(/[^A-Za-z0-9_-]+/g, "-");
  section.append(el("h3", null, el("span", { className: "method" }, method.toUpperCase()), " ", el("code", null, path)));
  if (op.summary) section.append(el("p", null, op.summary));
  if (op.description) section.append(el("p", { className: "muted" }, op.description));
  if (op.deprecated) section.append(el("p", { className: "error" }, "deprecated"));
  const params = [...(shared || []), ...(op.parameters || [])].map((p) => resolve(spec, p, 0, []));
  if (params.length) {
    const table = el("table", { className: "params" },
      el("thead", null, el("tr", null, ...["name", "in", "required", "type", "description"].map((h) => el("th", null, h)))));
    const body = el("tbody");
    for (const p of params) {
      const type = p.schema ? [p.schema.type, p.schema.format].filter(Boolean).join("/") || JSON.stringify(p.schema) : "";
      body.append(el("tr", null, el("td", null, el("code", null, p.name)), el("td", null, p.in),
        el("td", null, p.required ? "yes" : "no"), el("td", null, type), el("td", null, p.description || "")));
    }
    table.append(body);
    section.append(el("h4", null, "Parameters"), table);
  }
  if (op.requestBody) {
    const rb = resolve(spec, op.requestBody, 0, []);
    section.append(el("h4", null, `Request body${rb.required ? " (required)" : ""}`));
    if (rb.description) section.append(el("p", null, rb.description));
    section.append(content(spec, rb));
  }
  section.append(el("h4", null, "Responses"));
  const responses = el("dl", { className: "responses" });
  for (const [status, raw] of Object.entries(op.responses || {})) {
    const r = resolve(spec, raw, 0, []);
    responses.append(el("dt", null, el("code", { className: "status" }, status), " ", r.description || ""));
    responses.append(el("dd", null, content(spec, r)));
  }
  section.append(responses);
  if (op.security) section.append(el("p", { className: "muted" }, "auth: " + op.security.map((s) => Object.keys(s).join("+")).join(" or ")));
  return section;
}

fetch("/openapi.json").then((r) => r.json()).then((spec) => {
  const info = spec.info || {};
  document.getElementById("api-info").textContent =
    `${info.title || "API"} ${info.version || ""} · OpenAPI ${spec.openapi || "?"} · ${info.description || ""}`;
  const ops = document.getElementById("operations");
  const toc = document.getElementById("toc");
  let count = 0;
  for (const [path, item] of Object.entries(spec.paths || {})) {
    for (const method of Object.keys(item)) {  // the document's own order
      if (!["get", "put", "post", "delete", "patch", "head", "options", "trace"].includes(method)) continue;
      const section = operation(spec, path, method, item[method], item.parameters);
      ops.append(section);
      toc.append(el("a", { href: "#" + section.id, className: "toc" }, `${method.toUpperCase()} ${path}`), " ");
      count += 1;
    }
  }
  ops.dataset.operations = String(count);
  const schemas = (spec.components || {}).schemas || {};
  if (Object.keys(schemas).length) {
    ops.append(el("h2", null, "Schemas"));
    for (const [name, schema] of Object.entries(schemas))
      ops.append(el("details", { className: "component", id: "schema-" + name }, el("summary", null, name), json(resolve(spec, schema, 0, []))));
  }
  document.getElementById("docs-filter").addEventListener("input", (e) => {
    const needle = e.target.value.trim().toLowerCase();
    for (const s of ops.querySelectorAll("section.operation")) s.hidden = needle && !s.dataset.search.includes(needle);
  });
});
