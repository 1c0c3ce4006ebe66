// grid.js — the layer x head grid for one query: per head the weight on a
// chosen key, the row's entropy (nats) or its sink mass (weight on token 0),
// from GET /grid. Each layer's row is labelled sliding (its window) or
// global, and a bar draws how much of the prefix the window sees from this
// query. Clicking a cell opens that head, or (in zeroing mode) adds it to
// or removes it from the edit's zeroed heads.

import { heat, css, ink } from './color.js';

export function renderGrid(table, data, model, opts) {
  const { query, selected, zeroed, onCell } = opts;
  const L = data.values.length;
  const H = L ? data.values[0].length : 0;
  const windows = data.windows || model.windows;
  let max = 0;
  for (const row of data.values) for (const v of row) if (v > max) max = v;
  if (data.metric === 'entropy') max = Math.max(max, Math.log(query + 1));
  table.textContent = '';
  const head = table.createTHead().insertRow();
  head.insertCell().textContent = 'layer';
  head.insertCell().textContent = 'window';
  for (let h = 0; h < H; h++) head.insertCell().textContent = `h${h}`;
  const body = table.createTBody();
  for (let l = 0; l < L; l++) {
    const tr = body.insertRow();
    const w = windows[l];
    tr.className = w ? 'sliding' : 'global';
    const name = tr.insertCell();
    name.className = 'ln';
    name.textContent = `L${l}`;
    const win = tr.insertCell();
    win.className = 'win';
    win.title = w ? `sliding: the last ${w} keys` : 'global: every key';
    win.appendChild(windowBar(w, query));
    for (let h = 0; h < H; h++) {
      const v = data.values[l][h];
      const td = tr.insertCell();
      const c = heat(max > 0 ? v / max : 0);
      td.className = 'cell';
      td.style.background = css(c);
      td.style.color = ink(c);
      td.dataset.layer = l;
      td.dataset.head = h;
      td.dataset.v = v;
      td.textContent = v.toFixed(data.metric === 'entropy' ? 2 : 3);
      td.title = `layer ${l} head ${h}: ${data.metric} ${v}`;
      if (selected && selected.layer === l && selected.head === h) td.classList.add('sel');
      if (zeroed.has(`${l},${h}`)) td.classList.add('z');
      td.addEventListener('click', () => onCell(l, h));
    }
  }
}

// A bar the width of the prefix 0..query, its visible part shaded.
function windowBar(window, query) {
  const bar = document.createElement('div');
  bar.className = 'wbar';
  const seen = document.createElement('div');
  const n = query + 1;
  const frac = window > 0 ? Math.min(1, window / n) : 1;
  seen.style.width = `${(frac * 100).toFixed(1)}%`;
  bar.appendChild(seen);
  const label = document.createElement('span');
  label.textContent = window > 0 ? `${window}` : 'global';
  bar.appendChild(label);
  return bar;
}
