// tokens.js — the text as tokens, and an attention row painted over it.
//
// 32K tokens stay responsive because only what is on screen costs work:
// tokens live in chunks of CHUNK spans, each chunk `content-visibility:
// auto` (style.css), so the browser lays out and paints only the chunks near
// the viewport, and a row is painted chunk by chunk: paint() does the chunks
// an IntersectionObserver reports near the view (and the query's own), and
// a chunk scrolled into view later is painted then. A painted chunk carries
// data-row = the row's number (`rowId`), so a chunk still showing an older
// row is never mistaken for the current one. Painting a span sets one class
// (w0..w15: the weight quantised against the row's largest weight off token
// 0) and its exact weight in data-w; the colours are CSS. Token 0 (the
// attention sink) is not in the scale: it gets class `sink`, and its weight
// is shown apart by the caller.

export const CHUNK = 512;
export const LEVELS = 16;

export class TokenView {
  constructor(root, onClick) {
    this.root = root;
    this.spans = [];
    this.chunks = [];
    this.near = new Set(); // chunks the observer last saw near the view
    this.row = null; // {weights, query, window, marks}
    this.rowId = 0;
    this.observer = new IntersectionObserver((entries) => {
      for (const e of entries) {
        const c = Number(e.target.dataset.chunk);
        if (!e.isIntersecting) {
          this.near.delete(c);
          continue;
        }
        this.near.add(c);
        if (e.target.dataset.row !== String(this.rowId)) this.paintChunk(c);
      }
    }, { root, rootMargin: '100% 0px' });
    root.addEventListener('click', (e) => {
      const s = e.target.closest('span.t');
      if (s) onClick(Number(s.dataset.i), e);
    });
  }

  // tokens: [{id, piece}]; from: keep spans [0, from) (generation appends).
  render(tokens, from = 0, generatedFrom = Infinity) {
    if (from === 0) {
      this.observer.disconnect();
      this.root.textContent = '';
      this.spans = [];
      this.chunks = [];
      this.near.clear();
      this.row = null;
    }
    for (let i = from; i < tokens.length; i++) {
      if (i % CHUNK === 0 || !this.chunks.length) {
        const c = document.createElement('div');
        c.className = 'chunk';
        c.dataset.chunk = this.chunks.length;
        this.chunks.push(c);
        this.root.appendChild(c);
        this.observer.observe(c);
      }
      const chunk = this.chunks[this.chunks.length - 1];
      const s = document.createElement('span');
      s.className = i >= generatedFrom ? 't gen' : 't';
      s.dataset.i = i;
      s.textContent = tokens[i].piece;
      this.spans.push(s);
      chunk.appendChild(s);
      if (tokens[i].piece.includes('\u21b5')) chunk.appendChild(document.createElement('br'));
    }
  }

  // The class list every span carries besides its weight level.
  baseClass(i, marks) {
    let c = 't';
    if (marks.generatedFrom !== undefined && i >= marks.generatedFrom) c += ' gen';
    if (marks.hidden && marks.hidden.has(i)) c += ' hid';
    return c;
  }

  // Paint weights (keys 0..query) over the tokens. window: the layer's
  // sliding window (0 = global): keys before query - window + 1 are marked
  // `out`. Returns the milliseconds the DOM update and the style and layout
  // it forces took (performance.now() around both).
  paint(weights, query, window, marks = {}) {
    const t0 = performance.now();
    let max = 0;
    for (let k = 1; k <= query; k++) if (weights[k] > max) max = weights[k];
    this.row = {
      weights, query, marks,
      scale: max > 0 ? LEVELS / max : 0,
      first: window > 0 ? Math.max(0, query - window + 1) : 0,
    };
    this.rowId++;
    this.paintChunk(Math.floor(query / CHUNK));
    for (const c of this.near) this.paintChunk(c);
    void this.root.offsetHeight; // style and layout now, inside the measurement
    return performance.now() - t0;
  }

  // Remove any painted row, keeping the marks.
  clear(marks = {}) {
    this.row = { marks, weights: null };
    this.rowId++;
    for (const c of this.near) this.paintChunk(c);
  }

  paintChunk(c) {
    const chunk = this.chunks[c];
    if (!chunk || !this.row) return;
    chunk.dataset.row = this.rowId;
    const { weights, query, marks, scale, first } = this.row;
    const end = Math.min(this.spans.length, (c + 1) * CHUNK);
    for (let i = c * CHUNK; i < end; i++) {
      const s = this.spans[i];
      let cls = this.baseClass(i, marks);
      if (!weights || i > query) {
        s.className = weights ? cls + ' after' : cls;
        delete s.dataset.w;
        continue;
      }
      const w = weights[i];
      if (i === query) cls += ' q';
      if (i === 0) cls += ' sink';
      else if (i < first) cls += ' out';
      else cls += ' w' + Math.min(LEVELS - 1, Math.floor(w * scale));
      s.className = cls;
      s.dataset.w = w;
    }
  }

  // Mark (or unmark) hidden keys without repainting the row.
  setHidden(i, on) { this.spans[i].classList.toggle('hid', on); }

  scrollTo(i) { this.spans[i].scrollIntoView({ block: 'center' }); }
}

// The n largest weights of keys 1..query: [{key, w}], largest first.
export function topKeys(weights, query, n) {
  const idx = [];
  for (let k = 1; k <= query; k++) idx.push(k);
  idx.sort((a, b) => weights[b] - weights[a]);
  return idx.slice(0, n).map((key) => ({ key, w: weights[key] }));
}
