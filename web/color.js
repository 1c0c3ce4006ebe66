// color.js — the page's colour scales, one place for all of them.

// t in [0, 1] -> white to deep orange (attention weights, as the tokens' w0..w15).
export function heat(t) {
  t = Math.max(0, Math.min(1, t));
  const r = Math.round(255 - t * (255 - 201));
  const g = Math.round(255 - t * (255 - 52));
  const b = Math.round(255 - t * 255);
  return [r, g, b];
}

// t in [0, 1] -> white to blue (probabilities: the lens, as qkv lens --html).
export function blue(t) {
  t = Math.max(0, Math.min(1, t));
  return [Math.round(255 - t * 230), Math.round(255 - t * 155), 255 - Math.round(t * 30)];
}

// Recovery: red towards +1, blue below 0, saturating at +-1 (as qkv patch --html).
export function diverging(v) {
  if (v === null || Number.isNaN(v)) return [230, 230, 230];
  const t = Math.max(-1, Math.min(1, v));
  const a = Math.abs(t);
  return t >= 0
    ? [255, Math.round(255 - a * 190), Math.round(255 - a * 190)]
    : [Math.round(255 - a * 190), Math.round(255 - a * 130), 255];
}

export const css = ([r, g, b]) => `rgb(${r},${g},${b})`;

// Dark text on light cells, light text on dark ones.
export const ink = ([r, g, b]) => (0.299 * r + 0.587 * g + 0.114 * b < 140 ? '#fff' : '#1d1d1f');
