// edit.js — what the reader changes: heads to zero (picked in the grid) and
// keys to hide (clicked tokens). Both apply to the last query only (as
// `qkv ablate --scope last`), through POST /edit, which answers the
// next-token distribution before and after, their KL and the row the edit
// recomputes.

export class Edit {
  constructor() {
    this.zeroed = new Set(); // "layer,head"
    this.hidden = new Set(); // key positions
  }

  toggleHead(l, h) {
    const k = `${l},${h}`;
    if (!this.zeroed.delete(k)) this.zeroed.add(k);
  }

  toggleKey(i) {
    if (!this.hidden.delete(i)) this.hidden.add(i);
    return this.hidden.has(i);
  }

  clear() {
    this.zeroed.clear();
    this.hidden.clear();
  }

  empty() { return !this.zeroed.size && !this.hidden.size; }

  // The request body: the edit, and the row of (layer, head) (head: a number or 'mean') to recompute.
  body(layer, head, k) {
    return {
      zero_heads: [...this.zeroed].map((s) => s.split(',').map(Number)),
      exclude: [...this.hidden].sort((a, c) => a - c),
      k, layer, head,
    };
  }

  describeHeads() {
    return this.zeroed.size ? [...this.zeroed].map((s) => `L${s.replace(',', ' h')}`).join(', ') : 'none (pick in the grid)';
  }

  describeKeys(tokens) {
    if (!this.hidden.size) return 'none (click tokens in “hide” mode)';
    return [...this.hidden].sort((a, c) => a - c).map((i) => `#${i} ${tokens[i].piece}`).join(', ');
  }
}
