//! The order of one observation's notifications (RFC 7641 §3.4): the last Observe number taken and when.
//!
//! One owner for both notification paths (issue 29 #6): the lane ([`crate::observe_lane`]'s caller) moves it on
//! for each notification it takes, the Python path asks it about each one it takes, and the store keeps a copy of
//! it for whichever node serves the device next. [`newer`] is the rule, written once.

/// RFC 7641 §3.4: 128 seconds after the last notification any Observe number is taken as newer.
pub const FRESHNESS: f64 = 128.0;

/// RFC 7641 §3.4: is Observe number `seq`, received at `now`, newer than `last`, received at `last_at`?
/// "(V1 < V2 and V2 - V1 < 2^23) or (V1 > V2 and V1 - V2 > 2^23) or (T2 > T1 + 128 seconds)". None for `last`:
/// nothing taken yet, any number is newer.
pub fn newer(last: Option<u32>, last_at: f64, seq: u32, now: f64) -> bool {
    let Some(last) = last else { return true };
    (last < seq && seq - last < 1 << 23)
        || (last > seq && last - seq > 1 << 23)
        || now > last_at + FRESHNESS
}

/// The last Observe number taken of one observation's stream and when it was received.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ObserveOrder {
    last: Option<u32>,
    last_at: f64,
}

impl ObserveOrder {
    /// The order as it was left (a stored observation taken up again); None: nothing taken yet.
    pub fn new(last: Option<u32>, last_at: f64) -> Self {
        Self { last, last_at }
    }

    /// The last number taken, None until the first one of the stream.
    pub fn last(&self) -> Option<u32> {
        self.last
    }

    /// When the last number was taken (or the stream started).
    pub fn last_at(&self) -> f64 {
        self.last_at
    }

    /// Take `seq`, received at `now`, if it is [`newer`]: it becomes the last. A stale one leaves the order as it
    /// was and returns false (the caller acknowledges it and drops its value).
    pub fn advance(&mut self, seq: u32, now: f64) -> bool {
        if !newer(self.last, self.last_at, seq, now) {
            return false;
        }
        self.last = Some(seq);
        self.last_at = now;
        true
    }

    /// A new stream starts at `now` (a re-registration, RFC 7641 §4.1): its first number is `seq` whatever the old
    /// stream's last one was (None: not known yet, any number is taken next).
    pub fn restart(&mut self, seq: Option<u32>, now: f64) {
        self.last = seq;
        self.last_at = now;
    }
}

#[cfg(test)]
mod tests;
