// web/chart.js — completions per second by outcome, the last 60 seconds,
// as stacked bars on a canvas, and each outcome's total in the 60 seconds
// in the legend below it (#n-<outcome>). Written by hand rather than
// vendored: one chart of one kind needs about 90 lines, where a charting
// library would be several times the size of the rest of the page.
export const OUTCOMES = ['succeeded', 'partially_succeeded', 'failed', 'cancelled', 'timed_out'];
const SECONDS = 60;

export class Chart {
  constructor(canvas) {
    this.canvas = canvas;
    this.buckets = new Map(); // second → {outcome: count}
    this.colors = {};
    const css = getComputedStyle(document.documentElement);
    for (const o of OUTCOMES) this.colors[o] = css.getPropertyValue('--' + o).trim() || '#888';
    this.muted = css.getPropertyValue('--line').trim() || '#ccc';
    this.totals = {};
    for (const o of OUTCOMES) this.totals[o] = document.getElementById('n-' + o);
    setInterval(() => this.draw(), 1000);
    window.addEventListener('resize', () => this.draw());
  }

  // What the server counted before the page was open (GET
  // /stats/completions): its seconds are moved onto this page's clock by
  // the server's "end", so a skewed clock does not shift the bars.
  seed(body) {
    const skew = Date.now() - Date.parse(body.end);
    for (const c of body.counts) {
      const s = Math.floor((Date.parse(c.at) + skew) / 1000);
      let b = this.buckets.get(s);
      if (!b) this.buckets.set(s, (b = {}));
      b[c.outcome] = (b[c.outcome] || 0) + c.n;
    }
    this.draw();
  }

  // A run reached status completed with outcome (counted in this second).
  add(outcome) {
    const s = Math.floor(Date.now() / 1000);
    let b = this.buckets.get(s);
    if (!b) this.buckets.set(s, (b = {}));
    b[outcome] = (b[outcome] || 0) + 1;
  }

  draw() {
    const c = this.canvas;
    const dpr = window.devicePixelRatio || 1;
    const w = Math.max(100, Math.round(c.clientWidth * dpr));
    const h = Math.max(40, Math.round(c.clientHeight * dpr));
    if (c.width !== w) c.width = w;
    if (c.height !== h) c.height = h;
    const ctx = c.getContext('2d');
    const now = Math.floor(Date.now() / 1000);
    for (const s of this.buckets.keys()) if (s <= now - SECONDS) this.buckets.delete(s);
    let max = 1;
    const totals = {};
    for (const [, b] of this.buckets) {
      let t = 0;
      for (const o of OUTCOMES) {
        t += b[o] || 0;
        totals[o] = (totals[o] || 0) + (b[o] || 0);
      }
      max = Math.max(max, t);
    }
    const pad = 14 * dpr;
    const bw = (w - pad) / SECONDS;
    ctx.clearRect(0, 0, w, h);
    ctx.fillStyle = this.muted;
    ctx.font = `${10 * dpr}px system-ui, sans-serif`;
    ctx.fillText(String(max), 2 * dpr, 10 * dpr);
    ctx.fillRect(pad, h - 1, w - pad, 1);
    for (let i = 0; i < SECONDS; i++) {
      const b = this.buckets.get(now - SECONDS + 1 + i);
      if (!b) continue;
      let y = h - 1;
      for (const o of OUTCOMES) {
        const n = b[o] || 0;
        if (!n) continue;
        const bh = (n / max) * (h - 14 * dpr);
        ctx.fillStyle = this.colors[o];
        ctx.fillRect(pad + i * bw + 1, y - bh, Math.max(1, bw - 2), bh);
        y -= bh;
      }
    }
    for (const o of OUTCOMES) {
      const n = String(totals[o] || 0);
      if (this.totals[o] && this.totals[o].textContent !== n) this.totals[o].textContent = n;
    }
    const text = OUTCOMES.filter((o) => totals[o]).map((o) => `${totals[o]} ${o}`).join(', ');
    c.setAttribute('aria-label', 'Completions in the last 60 s: ' + (text || 'none'));
  }
}
