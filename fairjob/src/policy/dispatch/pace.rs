//! A tenant's pace: GCRA on the queue's clock with the catch-up credit and
//! the window of its last starts, and the tenants waiting out of the order
//! for their rate (the twin of `broker/scripts/lib/dispatch/pace.lua`; the
//! rule is in the [module doc](super)).

use super::Call;
use super::settings::TenantSettings;

/// A tenant whose next start is further away than this (µs) after a
/// dispatch waits out of the order at once (so spent tenants never pile up
/// at its head); a sooner one stays in and is judged when it reaches the head.
pub const PARK_AFTER_US: u64 = 1000;

/// When a window of `starts` (oldest first) lets the tenant start again:
/// `None` while it holds fewer than the `window` its rate checks.
pub fn window_due(starts: Option<&[u64]>, interval: u64, window: u64) -> Option<u64> {
    let starts = starts?;
    let w = window as usize;
    (starts.len() >= w).then(|| starts[starts.len() - w] + window * interval)
}

impl<J> Call<'_, J> {
    /// Takes `t` (at the head of the order as member `m` with `pass`) out of
    /// the order until `at` (µs), when its rate allows its next start; its
    /// pass and member are kept.
    pub fn rate_park(&mut self, t: &str, m: &str, pass: f64, at: u64) {
        self.state.ready.remove(m);
        self.state.floorq.remove(m);
        self.state.rmember.remove(t);
        self.state
            .pace_mut(t, |p| p.kept = Some((pass, m.to_owned())));
        self.state.rwait.add(t, at as f64);
    }

    /// Brings a tenant waiting for its rate back: into the order with the
    /// member and pass it had (at least vt), if it is runnable; its pass
    /// remembered otherwise. True when it entered the order.
    pub fn rate_unpark(&mut self, t: &str) -> bool {
        self.state.rwait.remove(t);
        let kept = self.state.pace_mut(t, |p| p.kept.take());
        let pass = kept.as_ref().map_or(0.0, |k| k.0).max(self.state.vt);
        if !self.runnable(t) || self.state.rmember.contains_key(t) {
            self.remember(t, Some(pass));
            return false;
        }
        let Some((_, m)) = kept else {
            self.enready(t, pass);
            return true;
        };
        self.state.ready.add(&m, pass);
        self.state.rmember.insert(t.to_owned(), m.clone());
        if (self.state.running(t) as f64) < self.settings(t).floor {
            self.state.floorq.add(&m, pass);
        }
        true
    }

    /// Brings back (at most `max`) tenants whose rate allows a start again.
    pub fn rate_wake(&mut self, max: usize) {
        for t in self.state.rwait.up_to(self.now as f64, max) {
            self.rate_unpark(&t);
        }
    }

    /// When `t`'s rate next allows a start (`None`: now, or it has no rate).
    /// Never more than one interval of its current rate away: a state left
    /// by a slower rate is cut to one interval (a changed rate applies from
    /// the next start).
    pub fn rate_wait(&mut self, t: &str, p: &TenantSettings) -> Option<u64> {
        let (interval, window) = p.rate?;
        let now = self.now;
        let (mut tat, starts) = self
            .state
            .pace
            .get(t)
            .map_or((None, None), |p| (p.tat, p.starts.clone()));
        if let Some(v) = tat
            && v > now + interval
        {
            tat = Some(now + interval);
            self.state.pace_mut(t, |p| p.tat = tat);
        }
        let mut due = window_due(starts.as_deref(), interval, window);
        if let Some(v) = tat
            && due.is_none_or(|d| v > d)
        {
            due = Some(v);
        }
        due.filter(|d| *d > now)
    }

    /// Counts a start of `t` against its rate; returns how long (µs) until
    /// its rate allows the next one, and when (`None`: it has no rate).
    pub fn rate_count(&mut self, t: &str, p: &TenantSettings) -> Option<(u64, u64)> {
        let (interval, window) = p.rate?;
        let now = self.now;
        let (tat, starts) = self.state.pace_mut(t, |pace| {
            let credit = interval / 2;
            let tat = pace.tat.unwrap_or(now).max(now - credit) + interval;
            let mut starts = pace.starts.take().unwrap_or_default();
            starts.push(now);
            if starts.len() as u64 > window {
                starts.drain(..starts.len() - window as usize);
            }
            pace.tat = Some(tat);
            pace.starts = Some(starts.clone());
            (tat, starts)
        });
        let due = match window_due(Some(&starts), interval, window) {
            Some(d) if tat <= d => d,
            _ => tat,
        };
        Some((due - now, due))
    }

    /// Drops `t`'s pace once it can no longer hold back a start.
    pub fn rate_forget(&mut self, t: &str) {
        let Some(pace) = self.state.pace.get(t).cloned() else {
            return;
        };
        if pace.tat.is_none() && pace.starts.is_none() {
            return;
        }
        let rate = self.settings(t).rate;
        let now = self.now;
        self.state.pace_mut(t, |p| {
            if let Some(tat) = p.tat
                && rate.is_none_or(|_| tat <= now)
            {
                p.tat = None;
            }
            if let Some(last) = p.starts.as_ref().and_then(|s| s.last().copied())
                && rate.is_none_or(|(interval, window)| last + window * interval <= now)
            {
                p.starts = None;
            }
        });
    }
}
