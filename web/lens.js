// lens.js — the next-token distribution (top-k as bars) and the logit lens
// grid: layers down, positions across (the prompt's tokens as labels), each
// cell the top-1 piece coloured by its probability (white 0, blue 1, as
// `qkv lens --html`), its top-k in the hover title. `lens` holds the fields
// of `qkv lens --json` (GET .../lens), of a window from lens.pos0 when it has
// one; `positions` are the columns to show, within it.

import { blue, css, ink } from './color.js';

// top: [{id, piece, p, logit}] -> a list of bars.
export function renderTop(el, top) {
  el.textContent = '';
  for (const t of top) {
    const li = document.createElement('li');
    li.dataset.id = t.id;
    li.dataset.p = t.p;
    const bar = document.createElement('span');
    bar.className = 'bar';
    bar.style.width = `${Math.max(1, Math.round(t.p * 120))}px`;
    const piece = document.createElement('span');
    piece.className = 'piece';
    piece.textContent = t.piece;
    const p = document.createElement('span');
    p.className = 'num';
    p.textContent = t.p.toFixed(4);
    li.append(bar, piece, p);
    li.title = `id ${t.id}, logit ${t.logit}`;
    el.appendChild(li);
  }
}

export function renderLens(table, lens, positions) {
  const o = lens.pos0 || 0; // the arrays' first position
  table.textContent = '';
  const head = table.createTHead().insertRow();
  head.insertCell().textContent = 'layer';
  for (const p of positions) {
    const th = head.insertCell();
    th.textContent = lens.tokens[p - o] ? lens.tokens[p - o].piece : `${p}`;
    th.title = `position ${p}`;
  }
  const body = table.createTBody();
  for (let l = 0; l < lens.n_layer; l++) {
    const tr = body.insertRow();
    const name = tr.insertCell();
    name.className = 'ln';
    name.textContent = `L${l}`;
    for (const p of positions) {
      const td = tr.insertCell();
      const pieces = lens.top_pieces[l][p - o];
      const probs = lens.top_probs[l][p - o];
      const c = blue(probs[0]);
      td.className = 'lcell';
      td.style.background = css(c);
      td.style.color = ink(c);
      td.textContent = pieces[0];
      td.dataset.layer = l;
      td.dataset.pos = p;
      td.dataset.id = lens.top_ids[l][p - o][0];
      td.dataset.p = probs[0];
      td.title = `layer ${l}, position ${p}\n` +
        pieces.map((s, i) => `${s}  ${probs[i].toFixed(4)}`).join('\n') +
        (lens.target_prob ? `\np(target ${lens.target ? lens.target.piece : ''}) ${lens.target_prob[l][p - o].toFixed(4)}` : '');
    }
  }
}
