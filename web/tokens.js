// tokens.js — the text as tokens, and an attention row painted over it.
//
// 32K tokens stay responsive because the browser lays out and paints only
// what is on screen: tokens live in chunks of CHUNK spans, each chunk
// `content-visibility: auto` (style.css), so off-screen chunks cost no
// layout or paint. Painting a row sets one class per token (w0..w15: the
// weight quantised against the row's largest weight off token 0) and its
// exact weight in data-w, and nothing else; the colours are CSS.
// Token 0 (the attention sink) is not in the scale: it gets class `sink`,
// and its weight is shown apart by the caller.

export const CHUNK = 512;
export const LEVELS = 16;

export class TokenView {
  constructor(root, onClick) {
    this.root = root;
    this.spans = [];
    this.chunks = [];
    root.addEventListener('click', (e) => {
      const s = e.target.closest('span.t');
      if (s) onClick(Number(s.dataset.i), e);
    });
  }

  // tokens: [{id, piece}]; from: keep spans [0, from) (generation appends).
  render(tokens, from = 0, generatedFrom = Infinity) {
    if (from === 0) {
      this.root.textContent = '';
      this.spans = [];
      this.chunks = [];
    }
    for (let i = from; i < tokens.length; i++) {
      if (i % CHUNK === 0 || !this.chunks.length) {
        const c = document.createElement('div');
        c.className = 'chunk';
        this.chunks.push(c);
        this.root.appendChild(c);
      }
      const chunk = this.chunks[this.chunks.length - 1];
      const s = document.createElement('span');
      s.className = 't';
      s.dataset.i = i;
      s.textContent = tokens[i].piece;
      if (i >= generatedFrom) s.classList.add('gen');
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
    const scale = max > 0 ? LEVELS / max : 0;
    const first = window > 0 ? Math.max(0, query - window + 1) : 0;
    const spans = this.spans;
    for (let i = 0; i < spans.length; i++) {
      const s = spans[i];
      let c = this.baseClass(i, marks);
      if (i === query) c += ' q';
      if (i > query) {
        s.className = c + ' after';
        if (s.dataset.w !== undefined) delete s.dataset.w;
        continue;
      }
      const w = weights[i];
      if (i === 0) c += ' sink';
      else if (i < first) c += ' out';
      else c += ' w' + Math.min(LEVELS - 1, Math.floor(w * scale));
      s.className = c;
      s.dataset.w = w;
    }
    void this.root.offsetHeight; // style and layout now, inside the measurement
    return performance.now() - t0;
  }

  // Remove any painted row, keeping the marks.
  clear(marks = {}) {
    for (let i = 0; i < this.spans.length; i++) {
      this.spans[i].className = this.baseClass(i, marks);
      delete this.spans[i].dataset.w;
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
