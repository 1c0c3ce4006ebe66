// patch.js — activation patching's recovery heatmaps from the keys of
// `qkv patch --json`: head_out as a layer x head table (click a head to open
// its attention), resid_pre as layer x position (the tokens as labels, a→b
// where the prompts differ). Red is recovery towards 1, blue below 0,
// saturating at +-1, as `qkv patch --html`; null (no recovery defined) is grey.

import { diverging, css, ink } from './color.js';

function cell(tr, v, title) {
  const td = tr.insertCell();
  const c = diverging(v);
  td.className = 'pcell';
  td.style.background = css(c);
  td.style.color = ink(c);
  td.textContent = v === null ? '–' : v.toFixed(2);
  td.dataset.v = v === null ? '' : v;
  td.title = `${title}: recovery ${v}`;
  return td;
}

export function renderHeadOut(table, res, onHead) {
  table.textContent = '';
  if (!res.head_out) return;
  const head = table.createTHead().insertRow();
  head.insertCell().textContent = 'layer';
  for (let h = 0; h < res.n_head; h++) head.insertCell().textContent = `h${h}`;
  const body = table.createTBody();
  res.head_out.forEach((row, l) => {
    const tr = body.insertRow();
    const name = tr.insertCell();
    name.className = 'ln';
    name.textContent = `L${l}`;
    row.forEach((v, h) => {
      const td = cell(tr, v, `layer ${l} head ${h}`);
      td.dataset.layer = l;
      td.dataset.head = h;
      td.addEventListener('click', () => onHead(l, h));
    });
  });
}

export function renderResid(table, res) {
  table.textContent = '';
  if (!res.resid_pre) return;
  const labels = res.clean_tokens.map((t, i) => {
    const c = res.corrupt_tokens[i];
    return t.id === c.id ? t.piece : `${t.piece}→${c.piece}`;
  });
  const head = table.createTHead().insertRow();
  head.insertCell().textContent = 'layer';
  labels.forEach((s, p) => {
    const th = head.insertCell();
    th.textContent = s;
    th.title = `position ${p}`;
    if (s.includes('→')) th.className = 'diff';
  });
  const body = table.createTBody();
  res.resid_pre.forEach((row, l) => {
    const tr = body.insertRow();
    const name = tr.insertCell();
    name.className = 'ln';
    name.textContent = `L${l}`;
    row.forEach((v, p) => cell(tr, v, `layer ${l} position ${p} (${labels[p]})`));
  });
}
