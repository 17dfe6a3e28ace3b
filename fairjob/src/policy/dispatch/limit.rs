//! A tenant's running limit: cap, burst while alone, fair yield's share hold
//! (the twin of `broker/scripts/lib/dispatch/limit.lua`).

use super::Call;

impl<J> Call<'_, J> {
    /// Another tenant than `t` is in the dispatch order.
    pub fn others_ready(&self, t: &str) -> bool {
        let mut n = self.state.ready.len();
        if n == 0 {
            return false;
        }
        if self.state.rmember.contains_key(t) {
            n -= 1;
        }
        n > 0
    }

    /// `t`'s running limit now: its cap, or its burst (when above the cap)
    /// while no other tenant is in the order; while another is, also at
    /// most its share hold. `None`: none.
    pub fn limit(&self, t: &str) -> Option<f64> {
        let p = self.settings(t);
        if let Some(hold) = p.hold
            && self.others_ready(t)
        {
            return Some(match p.cap {
                Some(cap) if cap <= hold => cap,
                _ => hold,
            });
        }
        if let (Some(cap), Some(burst)) = (p.cap, p.burst)
            && burst > cap
            && !self.others_ready(t)
        {
            return Some(burst);
        }
        p.cap
    }

    /// Pending jobs, under its running limit (a cap of 0 pauses) and not
    /// waiting for its rate.
    pub fn runnable(&self, t: &str) -> bool {
        if let Some(limit) = self.limit(t)
            && self.state.running(t) as f64 >= limit
        {
            return false;
        }
        if self.state.rwait.score(t).is_some() {
            return false;
        }
        self.state.pending(t) > 0
    }
}
