// api.js — the page's only door to `qkv serve` (docs/serve.md): JSON in and
// out, float32 rows, and Server-Sent Events read from a fetch body (so a
// POST can stream and an AbortController can cancel it). Every failure
// becomes an Error carrying the server's one-line message.

async function fail(res) {
  let msg = `${res.status} ${res.statusText}`;
  try {
    const body = await res.json();
    if (body && body.error) msg = `${res.status}: ${body.error}`;
  } catch (_) { /* not JSON: keep the status line */ }
  return new Error(msg);
}

export async function getJSON(path, signal) {
  const res = await fetch(path, { signal });
  if (!res.ok) throw await fail(res);
  return res.json();
}

export async function sendJSON(method, path, body, signal) {
  const res = await fetch(path, {
    method,
    headers: { 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
  });
  if (!res.ok) throw await fail(res);
  return res.json();
}

// GET a row as little-endian float32 (&format=f32): a Float32Array.
export async function getF32(path, signal) {
  const res = await fetch(path, { signal });
  if (!res.ok) throw await fail(res);
  const buf = await res.arrayBuffer();
  if (buf.byteLength % 4) throw new Error(`row of ${buf.byteLength} bytes is not float32`);
  return new Float32Array(buf);
}

// POST with Accept: text/event-stream; onEvent(name, data) for each event.
// Resolves with the data of the event named `last` (e.g. "session");
// an "error" event rejects. signal aborts the request (the server then
// cancels the work and frees what it held).
export async function postStream(path, body, last, onEvent, signal) {
  const res = await fetch(path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Accept: 'text/event-stream' },
    body: JSON.stringify(body),
    signal,
  });
  if (!res.ok) throw await fail(res);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  let result = null;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true }).replace(/\r\n?/g, '\n');
    let end;
    while ((end = buf.indexOf('\n\n')) >= 0) {
      const ev = parseEvent(buf.slice(0, end));
      buf = buf.slice(end + 2);
      if (!ev) continue;
      if (ev.name === 'error') throw new Error(ev.data && ev.data.error ? ev.data.error : 'stream error');
      if (ev.name === last) result = ev.data;
      else onEvent(ev.name, ev.data);
    }
  }
  if (result === null) throw new Error(`the stream ended without a "${last}" event`);
  return result;
}

// One SSE block ("event: x\ndata: {...}") -> {name, data}; comments skipped.
function parseEvent(block) {
  let name = 'message';
  const data = [];
  for (const line of block.split('\n')) {
    if (line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
    if (field === 'event') name = value;
    else if (field === 'data') data.push(value);
  }
  if (!data.length) return null;
  return { name, data: JSON.parse(data.join('\n')) };
}

// The session's URL prefix and a query string from an object.
export const sessionPath = (id, what) => `api/sessions/${encodeURIComponent(id)}${what ? '/' + what : ''}`;
export const query = (params) => '?' + Object.entries(params)
  .filter(([, v]) => v !== undefined && v !== null && v !== '')
  .map(([k, v]) => `${k}=${encodeURIComponent(v)}`).join('&');
