"use strict";
const $ = (id) => document.getElementById(id);
fetch("/api/model").then((r) => r.json()).then((m) => {
  $("model").textContent = `${m.name || m.arch}: ${m.n_layer} layers, ${m.n_head} heads, context ${m.ctx}`;
});
$("form").addEventListener("submit", async (e) => {
  e.preventDefault();
  $("status").textContent = "Prefilling…";
  $("status").className = "";
  const r = await fetch("/api/sessions", {method: "POST", headers: {"Content-Type": "application/json"},
                                          body: JSON.stringify({text: $("text").value})});
  const s = await r.json();
  if (!r.ok) { $("status").textContent = s.error; $("status").className = "error"; return; }
  $("status").textContent = `session ${s.id}: ${s.n_tokens} tokens, ${s.bytes} bytes; next: ${s.top[0].piece}`;
  $("tokens").replaceChildren(...s.tokens.map((t) => {
    const span = document.createElement("span");
    span.textContent = t.piece;
    span.title = `id ${t.id}`;
    return span;
  }));
});
