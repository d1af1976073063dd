//! The rendezvous's admission rate for registrations: a token bucket
//! refilled at N per second and holding at most N, so that executors
//! returning all at once (a replica died, the fleet restarted) are admitted
//! at a steady rate and the rest are told when to come back (`429` with
//! `Retry-After`) instead of queueing.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::sync::lock;

/// A token bucket.
#[derive(Debug)]
pub struct RateLimit {
    per_second: f64,
    state: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    refilled_at: Instant,
}

impl RateLimit {
    /// `per_second` admissions a second, with as many at once after a calm
    /// spell; 0 admits everything.
    pub fn new(per_second: u32) -> Self {
        Self::starting_at(per_second, Instant::now())
    }

    fn starting_at(per_second: u32, now: Instant) -> Self {
        Self {
            per_second: f64::from(per_second),
            state: Mutex::new(Bucket {
                tokens: f64::from(per_second),
                refilled_at: now,
            }),
        }
    }

    /// Takes one admission now, or says how long until one is free.
    pub fn take(&self) -> Result<(), Duration> {
        self.take_at(Instant::now())
    }

    fn take_at(&self, now: Instant) -> Result<(), Duration> {
        if self.per_second <= 0.0 {
            return Ok(());
        }
        let mut bucket = lock(&self.state);
        let elapsed = now.saturating_duration_since(bucket.refilled_at);
        bucket.tokens =
            (bucket.tokens + elapsed.as_secs_f64() * self.per_second).min(self.per_second);
        bucket.refilled_at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        let missing = 1.0 - bucket.tokens;
        Err(Duration::from_secs_f64(missing / self.per_second))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_admitted_up_to_the_rate_then_one_per_interval() {
        let start = Instant::now();
        let limit = RateLimit::starting_at(4, start);
        for _ in 0..4 {
            assert_eq!(limit.take_at(start), Ok(()));
        }
        let wait = limit.take_at(start).unwrap_err();
        assert_eq!(wait, Duration::from_millis(250));
        assert!(limit.take_at(start + Duration::from_millis(249)).is_err());
        assert_eq!(limit.take_at(start + Duration::from_millis(250)), Ok(()));
        // A long calm spell refills no more than one second's worth.
        let later = start + Duration::from_secs(60);
        for _ in 0..4 {
            assert_eq!(limit.take_at(later), Ok(()));
        }
        assert!(limit.take_at(later).is_err());
    }

    #[test]
    fn zero_admits_everything() {
        let limit = RateLimit::new(0);
        for _ in 0..10_000 {
            assert_eq!(limit.take(), Ok(()));
        }
    }
}
