// overview.js — one head's whole map, binned in C (GET /overview: the max
// of each block x block square of weights, row = query block), drawn on a
// canvas; dragging (or clicking) a region asks for the exact weights of its
// rows (GET /rows, at most MAX_ROWS x MAX_KEYS) and draws them beside it.
// Colours are the square root of the weight, so small weights stay visible
// next to the sink's.

import { heat } from './color.js';

export const MAX_ROWS = 256;
export const MAX_KEYS = 4096;

// Fill canvas with values [rows][cols] (rows down, cols across), one pixel each.
export function drawMatrix(canvas, values, masked) {
  const rows = values.length;
  const cols = rows ? values[0].length : 0;
  canvas.width = Math.max(1, cols);
  canvas.height = Math.max(1, rows);
  const ctx = canvas.getContext('2d');
  const img = ctx.createImageData(canvas.width, canvas.height);
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) {
      const o = 4 * (r * cols + c);
      const [R, G, B] = masked && masked(r, c) ? [238, 238, 238] : heat(Math.sqrt(values[r][c]));
      img.data[o] = R;
      img.data[o + 1] = G;
      img.data[o + 2] = B;
      img.data[o + 3] = 255;
    }
  }
  ctx.putImageData(img, 0, 0);
}

// The region of tokens a drag from bin (r0, c0) to bin (r1, c1) covers,
// clipped to the causal triangle and to what one /rows request may ask.
export function regionOf(ov, r0, c0, r1, c1) {
  const b = ov.block;
  let q0 = Math.min(r0, r1) * b;
  let q1 = Math.min(ov.n, (Math.max(r0, r1) + 1) * b);
  let k0 = Math.min(c0, c1) * b;
  let k1 = Math.min(ov.n, (Math.max(c0, c1) + 1) * b);
  if (q1 - q0 > MAX_ROWS) q1 = q0 + MAX_ROWS;
  k1 = Math.min(k1, q1); // keys after the last query row are all masked
  if (k0 >= k1) k0 = Math.max(0, k1 - 1);
  if (k1 - k0 > MAX_KEYS) k1 = k0 + MAX_KEYS;
  return { q0, q1, k0, k1 };
}

// Turn pointer events on the overview canvas into bin drags.
export function onDrag(canvas, bins, done) {
  let start = null;
  const bin = (e) => { // offsetX/Y: from the canvas's content edge (no border)
    const x = Math.floor((e.offsetX / canvas.clientWidth) * bins());
    const y = Math.floor((e.offsetY / canvas.clientHeight) * bins());
    const clamp = (v) => Math.max(0, Math.min(bins() - 1, v));
    return [clamp(y), clamp(x)];
  };
  canvas.addEventListener('pointerdown', (e) => { start = bin(e); });
  canvas.addEventListener('pointerup', (e) => {
    if (!start) return;
    const [r1, c1] = bin(e);
    done(start[0], start[1], r1, c1);
    start = null;
  });
}
