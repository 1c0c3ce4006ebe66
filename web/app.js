// app.js — the page's state and wiring: a session (prefilled from text, a
// file or token ids, its progress streamed, cancellable), the row of the
// chosen query / layer / head painted over its tokens, the heads grid, the
// overview, the next-token distribution and the lens, edits, patching and
// generation. The modules beside it each draw one of these; this file
// decides what to fetch when. window.qkv exposes the state to the browser
// tests (tests/python/test_serve_browser.py): `busy` counts requests in
// flight, `errors` every failure shown, `row` the row painted last and
// `rowId` its number (the data-row of the chunks that show it), `paintMs` /
// `frameMs` its paint time: the DOM update with the style and layout it
// forces, and until the next frame.

import { getJSON, sendJSON, getF32, postStream, sessionPath, query } from './api.js';
import { TokenView, topKeys } from './tokens.js';
import { renderGrid } from './grid.js';
import { drawMatrix, regionOf, onDrag } from './overview.js';
import { renderTop, renderLens } from './lens.js';
import { renderHeadOut, renderResid } from './patch.js';
import { Edit } from './edit.js';

const $ = (id) => document.getElementById(id);
// the lens grid shows at most this many positions, ending at the query: GET /lens
// reads only that window (the prompt run again up to the query, then L x 48
// unembeddings), read by itself with the session up to this many tokens
const LENS_COLUMNS = 48;
const TOP_KEYS = 12;

const st = {
  ready: false, busy: 0, errors: [],
  model: null, session: null, tokens: [],
  query: 0, layer: 0, head: 'mean', row: null, rowId: 0, paintMs: null, frameMs: null,
  metric: 'sink', key: 1, grid: null, overview: null, zoom: null, lens: null, patch: null,
  edit: new Edit(), editResult: null, generatedFrom: {}, abort: null,
};
window.qkv = st;

const view = new TokenView($('tokens'), onToken);

// ---- plumbing -----------------------------------------------------------

function status(msg, error = false) {
  $('status').textContent = msg;
  $('status').classList.toggle('error', error);
}

// Run fn with the busy count held; a failure is shown and recorded, never thrown.
async function task(fn) {
  st.busy++;
  try {
    return await fn();
  } catch (e) {
    if (e.name === 'AbortError') status('cancelled');
    else {
      st.errors.push(e.message);
      status(e.message, true);
    }
    return undefined;
  } finally {
    st.busy--;
  }
}

const sid = () => st.session.id;
const headNum = () => (st.head === 'mean' ? 0 : st.head);
const marks = () => ({ hidden: st.edit.hidden, generatedFrom: st.generatedFrom[sid()] });

// ---- the model and the sessions -----------------------------------------

async function loadModel() {
  const m = await getJSON('api/model');
  st.model = m;
  $('model-info').textContent = `${m.name} (${m.arch}): ${m.n_layer} layers × ${m.n_head} heads ` +
    `(${m.n_head_kv} KV), head dim ${m.head_dim}, context ${m.ctx}`;
  $('layer').textContent = '';
  m.windows.forEach((w, l) => $('layer').add(new Option(`L${l} ${w ? `sliding ${w}` : 'global'}`, l)));
  $('head').textContent = '';
  $('head').add(new Option('mean of heads', 'mean'));
  for (let h = 0; h < m.n_head; h++) $('head').add(new Option(`h${h}`, h));
}

async function refreshSessions() {
  const list = await getJSON('api/sessions');
  const sel = $('sessions');
  sel.textContent = '';
  for (const s of list.sessions) {
    sel.add(new Option(`${s.id}: ${s.n_tokens} tokens, ${(s.bytes / 1048576).toFixed(1)} MiB`, s.id));
  }
  if (st.session) sel.value = sid();
  $('delete-session').disabled = !list.sessions.length;
}

function showSession(s) {
  st.session = s;
  st.tokens = s.tokens;
  st.query = s.n_tokens - 1;
  st.edit.clear();
  st.editResult = null;
  st.lens = null;
  view.render(s.tokens, 0, st.generatedFrom[s.id]);
  renderTop($('next'), s.top);
  $('lens').textContent = '';
  $('lens-info').textContent = s.n_tokens > LENS_COLUMNS
    ? `reads the ${LENS_COLUMNS} positions up to the selected token (the prompt runs again up to it)`
    : '';
  showEdit();
  status(`${s.id}: ${s.n_tokens} tokens, ${(s.bytes / 1048576).toFixed(1)} MiB held by the session`);
  task(refreshSessions);
  task(showRow);
  task(loadGrid);
  task(loadOverview);
  if (s.n_tokens <= LENS_COLUMNS) task(loadLens);
}

async function prefill() {
  const kind = $('input-kind').value;
  let body;
  if (kind === 'tokens') {
    const ids = $('prompt').value.split(/[\s,]+/).filter(Boolean).map(Number);
    if (!ids.length || ids.some((x) => !Number.isInteger(x))) throw new Error('token ids: integers separated by commas');
    body = { tokens: ids };
  } else {
    body = { text: $('prompt').value, chat: $('chat').checked };
  }
  const ctl = new AbortController();
  st.abort = ctl;
  $('cancel').disabled = false;
  $('prefill').disabled = true;
  $('progress').value = 0;
  status('prefilling…');
  try {
    const s = await postStream('api/sessions', body, 'session', (name, d) => {
      if (name !== 'progress') return;
      $('progress').max = d.total;
      $('progress').value = d.done;
      status(`prefilling: ${d.done} of ${d.total} tokens`);
    }, ctl.signal);
    $('progress').value = $('progress').max;
    showSession(s);
  } finally {
    st.abort = null;
    $('cancel').disabled = true;
    $('prefill').disabled = false;
  }
}

async function generate() {
  const n0 = st.session.n_tokens;
  const live = st.tokens.slice();
  const id = sid();
  if (st.generatedFrom[id] === undefined) st.generatedFrom[id] = n0;
  const body = { n: Number($('gen-n').value), temperature: Number($('gen-temp').value), seed: Number($('gen-seed').value) };
  const ctl = new AbortController();
  st.abort = ctl;
  $('cancel').disabled = false;
  $('generate').disabled = true;
  try {
    const s = await postStream(sessionPath(id, 'generate'), body, 'session', (name, d) => {
      if (name !== 'token') return; // {token: {id, piece}, n_tokens}
      live.push(d.token);
      view.render(live, live.length - 1, st.generatedFrom[id]);
      status(`generated ${live.length - n0} of ${body.n}`);
    }, ctl.signal);
    showSession(s);
  } catch (e) {
    if (e.name !== 'AbortError') throw e;
    showSession(await getJSON(sessionPath(id))); // the server keeps what it generated
    status('generation cancelled');
  } finally {
    st.abort = null;
    $('cancel').disabled = true;
    $('generate').disabled = false;
  }
}

// ---- the row ------------------------------------------------------------

let rowSeq = 0;

async function showRow() {
  const seq = ++rowSeq;
  const q = st.query, l = st.layer, h = st.head;
  const w = await getF32(sessionPath(sid(), 'attention') + query({ layer: l, head: h, query: q, format: 'f32' }));
  if (seq !== rowSeq) return; // a newer click won
  if (w.length !== q + 1) throw new Error(`row of ${w.length} weights for query ${q}`);
  paintRow(w, q, l, h, '');
}

function paintRow(w, q, l, h, label) {
  st.row = { weights: w, query: q, layer: l, head: h, label };
  const t0 = performance.now();
  st.paintMs = view.paint(w, q, st.model.windows[l], marks());
  st.rowId = view.rowId;
  requestAnimationFrame(() => setTimeout(() => {
    st.frameMs = performance.now() - t0;
    $('paint-ms').textContent = `painted ${q + 1} weights in ${st.paintMs.toFixed(1)} ms ` +
      `(${st.frameMs.toFixed(1)} ms to the next frame)`;
  }, 0));
  const piece = st.tokens[q].piece;
  const head = h === 'mean' ? 'the mean of its heads' : `head ${h}`;
  const win = st.model.windows[l] ? `, sliding window ${st.model.windows[l]}` : ', global';
  $('row-title').textContent = `${label}query #${q} ${piece}: layer ${l}${win}, ${head}`;
  $('sink').textContent = w[0].toFixed(4);
  $('sink').dataset.w = w[0];
  const ol = $('top-keys');
  ol.textContent = '';
  for (const { key, w: v } of topKeys(w, q, TOP_KEYS)) {
    const li = document.createElement('li');
    li.dataset.key = key;
    li.dataset.w = v;
    li.textContent = `#${key} ${st.tokens[key].piece}  ${v.toFixed(4)}`;
    li.addEventListener('click', () => view.scrollTo(key));
    ol.appendChild(li);
  }
}

function onToken(i) {
  const mode = document.querySelector('input[name=mode]:checked').value;
  if (mode === 'hide') {
    const on = st.edit.toggleKey(i);
    view.setHidden(i, on);
    showEdit();
  } else if (mode === 'key') {
    st.key = i;
    st.metric = 'key';
    $('metric').value = 'key';
    task(loadGrid);
  } else {
    st.query = i;
    task(showRow);
    task(loadGrid);
  }
}

// Hover: the token's position, id and painted weight.
$('tokens').addEventListener('mouseover', (e) => {
  const s = e.target.closest('span.t');
  if (!s) return;
  const i = Number(s.dataset.i);
  s.title = `#${i} id ${st.tokens[i].id}` + (s.dataset.w !== undefined ? `\nweight ${s.dataset.w}` : '');
});

function openHead(l, h) {
  st.layer = l;
  st.head = h;
  $('layer').value = l;
  $('head').value = h;
  task(showRow);
  task(loadOverview);
  if (st.grid) drawGrid();
}

// ---- the heads grid -----------------------------------------------------

async function loadGrid() {
  const q = st.query;
  const params = { query: q, metric: st.metric };
  if (st.metric === 'key') params.key = Math.min(st.key, q);
  const g = await getJSON(sessionPath(sid(), 'grid') + query(params));
  if (q !== st.query) return;
  st.grid = g;
  $('grid-key').textContent = st.metric === 'key'
    ? `key #${params.key} ${st.tokens[params.key].piece} (pick another token in “grid” mode)` : '';
  drawGrid();
}

function drawGrid() {
  renderGrid($('grid'), st.grid, st.model, {
    query: st.query,
    selected: st.head === 'mean' ? null : { layer: st.layer, head: st.head },
    zeroed: st.edit.zeroed,
    onCell: (l, h) => {
      if ($('zero-mode').checked) {
        st.edit.toggleHead(l, h);
        drawGrid();
        showEdit();
      } else {
        openHead(l, h);
      }
    },
  });
}

// ---- the overview and its zoom -----------------------------------------

// Loaded while its pane is open (and when it opens).
async function loadOverview() {
  if (!$('overview-pane').open || !st.session) return;
  const l = st.layer, h = headNum();
  const ov = await getJSON(sessionPath(sid(), 'overview') + query({ layer: l, head: h }));
  st.overview = { ...ov, layer: l, head: h };
  $('overview-title').textContent = `layer ${l} head ${h}: ${ov.n} tokens in ${ov.bins} × ${ov.bins} blocks of ${ov.block}` +
    (st.head === 'mean' ? ' (choose a head to see another)' : '');
  drawMatrix($('overview'), ov.values, (r, c) => c > r);
  $('zoom-title').textContent = '';
}

async function zoom(r0, c0, r1, c1) {
  const ov = st.overview;
  if (!ov) return;
  const { q0, q1, k0, k1 } = regionOf(ov, r0, c0, r1, c1);
  const res = await getJSON(sessionPath(sid(), 'rows') +
    query({ layer: ov.layer, head: ov.head, q0, q1, k0, k1 }));
  const canvas = $('zoom');
  drawMatrix(canvas, res.values, (r, c) => k0 + c > q0 + r);
  const aspect = (k1 - k0) / (q1 - q0);
  canvas.style.width = `${aspect >= 1 ? 320 : Math.max(40, 320 * aspect)}px`;
  canvas.style.height = `${aspect >= 1 ? Math.max(40, 320 / aspect) : 320}px`;
  $('zoom-title').textContent = `queries ${q0}..${q1 - 1} × keys ${k0}..${k1 - 1}, exact weights`;
  st.zoom = { layer: ov.layer, head: ov.head, q0, q1, k0, k1, values: res.values };
}

// ---- next token and the lens --------------------------------------------

async function loadLens() {
  const n = st.session.n_tokens;
  const last = Math.min(st.query, n - 1);
  const first = Math.max(0, last - LENS_COLUMNS + 1);
  $('lens-info').textContent = 'reading…';
  const lens = await getJSON(sessionPath(sid(), 'lens') + query({ k: 5, pos0: first, pos1: last + 1 }));
  st.lens = lens;
  const positions = [];
  for (let p = first; p <= last; p++) positions.push(p);
  renderLens($('lens'), lens, positions);
  $('lens-info').textContent = `positions ${first}..${last}: each cell the top-1 reading of that layer's residual ` +
    `(hover for the top ${lens.k})`;
}

// ---- edits --------------------------------------------------------------

function showEdit() {
  $('zero-list').textContent = st.edit.describeHeads();
  $('hidden-list').textContent = st.edit.describeKeys(st.tokens);
}

async function applyEdit() {
  const res = await sendJSON('POST', sessionPath(sid(), 'edit'), st.edit.body(st.layer, st.head, 10));
  st.editResult = res;
  renderTop($('edit-before'), res.before.top);
  renderTop($('edit-after'), res.after.top);
  $('kl').textContent = res.kl.toPrecision(6);
  $('kl').dataset.kl = res.kl;
  paintEditRow();
}

function paintEditRow() {
  const r = st.editResult && st.editResult.row;
  if (!r) return;
  const which = document.querySelector('input[name=edit-row]:checked').value;
  const q = st.session.n_tokens - 1;
  st.query = q;
  rowSeq++; // any row request in flight is now stale
  paintRow(Float32Array.from(r[which]), q, r.layer, r.head, `edited (${which}): `);
  if (st.grid && st.grid.query !== q) task(loadGrid);
}

// ---- patching -----------------------------------------------------------

async function runPatch() {
  // the two maps the page draws (qkv patch's sweeps of the same names)
  const body = { corrupt: $('corrupt').value, metric: $('patch-metric').value, sweeps: ['head_out', 'resid_pre'] };
  if (body.metric === 'logit-diff') {
    body.answer = $('answer').value;
    body.wrong = $('wrong').value;
  }
  $('patch-info').textContent = 'patching…';
  const res = await sendJSON('POST', sessionPath(sid(), 'patch'), body);
  st.patch = res;
  $('patch-info').textContent = `metric ${res.metric}: clean ${res.clean}, corrupt ${res.corrupt}; click a head to open it`;
  renderHeadOut($('head-out'), res, (l, h) => {
    st.query = st.session.n_tokens - 1;
    openHead(l, h);
    task(loadGrid);
  });
  renderResid($('resid'), res);
}

// ---- controls -----------------------------------------------------------

function needSession(fn) {
  return () => (st.session ? task(fn) : status('prefill a prompt first', true));
}

$('prefill').addEventListener('click', () => task(prefill));
$('cancel').addEventListener('click', () => st.abort && st.abort.abort());
$('file').addEventListener('change', async () => {
  const f = $('file').files[0];
  if (f) $('prompt').value = await f.text();
});
$('layer').addEventListener('change', () => openHead(Number($('layer').value), st.head));
$('head').addEventListener('change', () => {
  const v = $('head').value;
  openHead(st.layer, v === 'mean' ? 'mean' : Number(v));
});
$('metric').addEventListener('change', () => {
  st.metric = $('metric').value;
  needSession(loadGrid)();
});
$('apply-edit').addEventListener('click', needSession(applyEdit));
$('clear-edit').addEventListener('click', () => {
  st.edit.clear();
  if (st.session) {
    view.clear(marks());
    showEdit();
    if (st.grid) drawGrid();
    task(showRow);
  }
});
for (const r of document.querySelectorAll('input[name=edit-row]')) r.addEventListener('change', paintEditRow);
$('load-lens').addEventListener('click', needSession(loadLens));
$('run-patch').addEventListener('click', needSession(runPatch));
$('generate').addEventListener('click', needSession(generate));
$('sessions').addEventListener('change', () => task(async () => {
  showSession(await getJSON(sessionPath($('sessions').value)));
}));
$('delete-session').addEventListener('click', () => task(async () => {
  await sendJSON('DELETE', sessionPath($('sessions').value));
  await refreshSessions();
  if ($('sessions').value) showSession(await getJSON(sessionPath($('sessions').value)));
  else {
    st.session = null;
    st.tokens = [];
    view.render([]);
    status('no session: prefill a prompt');
  }
}));
$('overview-pane').addEventListener('toggle', () => task(loadOverview));
onDrag($('overview'), () => (st.overview ? st.overview.bins : 1), (r0, c0, r1, c1) => task(() => zoom(r0, c0, r1, c1)));

task(async () => {
  await loadModel();
  await refreshSessions();
}).then(() => { st.ready = true; });
