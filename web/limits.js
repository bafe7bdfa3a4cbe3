// web/limits.js — the shared rate limits (GET /rate_limits), read every few
// seconds while the server has any: the overview shows each limit's use,
// and a run's detail says when it waits for its type's limit. A server
// without limits is asked again only once a minute.
import { api } from './api.js';

const PERIOD_MS = 3000;
const IDLE_MS = 60000;

export class Limits {
  constructor(onChange) {
    this.list = [];
    this.byType = new Map(); // run type → limit
    this.onChange = onChange;
  }

  start() {
    const tick = async () => {
      try {
        const { body } = await api('/rate_limits');
        this.list = body.rate_limits;
        this.byType = new Map();
        for (const l of this.list) for (const t of l.run_types) this.byType.set(t, l);
        this.onChange(this.list);
      } catch {
        /* no read scope, or the database away: keep what was shown */
      }
      setTimeout(tick, this.list.length ? PERIOD_MS : IDLE_MS);
    };
    tick();
  }

  // The limit a run of this type waits for now (none left), or null.
  spentFor(type) {
    const l = this.byType.get(type);
    return l && l.next_unit_at ? l : null;
  }
}
