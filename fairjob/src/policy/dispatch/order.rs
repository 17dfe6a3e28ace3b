//! The stride order: passes, vt, `lastpass`, members and `floorq` (the twin of
//! `broker/scripts/lib/dispatch/order.lua`).

use super::Call;
use super::state::member_of;

/// The order's key: `(pass, member)` before `(pass', member')`. Members
/// compare by their sequence number (their first 15 digits; they always
/// differ in it), as Redis compares them by bytes.
pub fn before(a: (f64, &str), b: (f64, &str)) -> bool {
    if a.0 != b.0 {
        return a.0 < b.0;
    }
    a.1 < b.1
}

/// The pass after a dispatch at `pass` of a tenant of this weight.
pub fn next_pass(pass: f64, weight: f64) -> f64 {
    pass + 1.0 / weight
}

impl<J> Call<'_, J> {
    /// A dispatch in share order (not from `floorq`) at `pass`: vt moves up to it.
    pub fn advance(&mut self, pass: f64) {
        if pass > self.state.vt {
            self.state.vt = pass;
            self.vt_moved = true;
        }
    }

    /// Takes `t` out of the order (also the entry `m`, when given: one found
    /// in `ready` that `rmember` may not know); returns the pass it had.
    pub fn unready(&mut self, t: &str, m: Option<&str>) -> Option<f64> {
        let known = self.state.rmember.get(t).cloned();
        let floored = self.settings(t).floor > 0.0;
        let mut pass = None;
        let mut drop = |st: &mut super::ShardState<J>, member: &str| {
            pass = pass.or_else(|| st.ready.score(member));
            st.ready.remove(member);
            if floored {
                st.floorq.remove(member);
            }
        };
        if let Some(m) = m {
            drop(self.state, m);
        }
        if let Some(k) = known.as_deref().filter(|k| Some(*k) != m) {
            drop(self.state, k);
        }
        if known.is_some() {
            self.state.rmember.remove(t);
        }
        pass
    }

    /// Keeps `pass` as `t`'s last pass while it can still matter (ahead of vt).
    pub fn remember(&mut self, t: &str, pass: Option<f64>) {
        match pass {
            Some(p) if p > self.state.vt => self.state.lastpass.add(t, p),
            _ => {
                self.state.lastpass.remove(t);
            }
        }
    }

    /// Puts `t` into the order at `max(pass, vt)`, behind the tenants already there.
    pub fn enready(&mut self, t: &str, pass: f64) {
        let pass = pass.max(self.state.vt);
        self.state.seq += 1;
        let m = member_of(self.state.seq, t);
        self.state.ready.add(&m, pass);
        self.state.rmember.insert(t.to_owned(), m.clone());
        let floor = self.settings(t).floor;
        if floor > 0.0 && (self.state.running(t) as f64) < floor {
            self.state.floorq.add(&m, pass);
        }
    }
}
