//! The one reconnect backoff of every loop that dials again after a
//! failure (the remote executor, a harness's stream, `connect`, the
//! reconnecting client): exponential with full jitter. Attempt `n` waits a
//! uniformly random time in `[0, min(cap, first × 2ⁿ)]`, so peers that lost
//! the same server at the same moment (a rendezvous restart) come back
//! spread over the interval instead of in lockstep; a success starts over
//! at `first`.
//!
//! The randomness is a small SplitMix64 generator seeded from the kernel
//! (or from a given seed, so tests see a fixed sequence); it only spreads
//! timing and guards nothing.

use std::time::Duration;

/// A SplitMix64 generator: enough to spread delays, nothing more.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// A seed from the kernel's generator, else from the clock and the pid.
fn os_seed() -> u64 {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_ok() {
        return u64::from_le_bytes(bytes);
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    u64::from(nanos) ^ (u64::from(std::process::id()) << 32)
}

/// Exponential backoff with full jitter.
#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    cap: Duration,
    /// Failures since the last [`reset`](Self::reset).
    attempt: u32,
    rng: SplitMix64,
}

impl Backoff {
    /// Delays up to `first`, doubling per attempt up to `cap`, seeded from
    /// the kernel.
    pub fn new(first: Duration, cap: Duration) -> Self {
        Self::seeded(first, cap, os_seed())
    }

    /// The same with a fixed seed (the same seed gives the same delays).
    pub fn seeded(first: Duration, cap: Duration, seed: u64) -> Self {
        Self {
            first,
            cap: cap.max(first),
            attempt: 0,
            rng: SplitMix64(seed),
        }
    }

    /// The longest the next delay can be: `min(cap, first × 2^attempt)`.
    pub fn ceiling(&self) -> Duration {
        let factor = 1u32 << self.attempt.min(31);
        self.first.saturating_mul(factor).min(self.cap)
    }

    /// The next delay, uniform in `[0, ceiling]`; the ceiling then doubles.
    pub fn next_delay(&mut self) -> Duration {
        let ceiling = u64::try_from(self.ceiling().as_nanos()).unwrap_or(u64::MAX);
        let delay = match ceiling.checked_add(1) {
            Some(span) => self.rng.next() % span,
            None => self.rng.next(),
        };
        self.attempt = self.attempt.saturating_add(1);
        Duration::from_nanos(delay)
    }

    /// Sleeps for [`next_delay`](Self::next_delay).
    pub async fn wait(&mut self) {
        tokio::time::sleep(self.next_delay()).await;
    }

    /// After a success: the next delay is at most `first` again.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIRST: Duration = Duration::from_millis(100);
    const CAP: Duration = Duration::from_secs(5);

    #[test]
    fn ceilings_double_up_to_the_cap() {
        let mut backoff = Backoff::seeded(FIRST, CAP, 1);
        let mut ceilings = Vec::new();
        for _ in 0..10 {
            ceilings.push(backoff.ceiling().as_millis());
            backoff.next_delay();
        }
        assert_eq!(
            ceilings,
            vec![100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000, 5000]
        );
        // Far past the cap nothing overflows.
        for _ in 0..100 {
            assert!(backoff.next_delay() <= CAP);
        }
    }

    #[test]
    fn every_delay_lies_within_its_ceiling_and_they_spread_over_it() {
        let mut samples = Vec::new();
        for seed in 0..2000u64 {
            let mut backoff = Backoff::seeded(FIRST, CAP, seed);
            for attempt in 0..8 {
                let ceiling = backoff.ceiling();
                let delay = backoff.next_delay();
                assert!(delay <= ceiling, "seed {seed} attempt {attempt}: {delay:?}");
                if attempt == 3 {
                    samples.push(delay.as_secs_f64() / ceiling.as_secs_f64());
                }
            }
        }
        // Full jitter: uniform over [0, ceiling], not bunched at its top.
        let mean = samples.iter().sum::<f64>() / samples.len() as f64;
        assert!((0.45..0.55).contains(&mean), "mean fraction {mean}");
        for (low, high) in [(0.0, 0.1), (0.45, 0.55), (0.9, 1.0)] {
            let share = samples.iter().filter(|s| (low..high).contains(*s)).count();
            let fraction = share as f64 / samples.len() as f64;
            assert!(
                (0.06..0.14).contains(&fraction),
                "{fraction} of the delays in [{low}, {high})"
            );
        }
    }

    #[test]
    fn peers_with_different_seeds_do_not_move_in_lockstep() {
        let delays = |seed| {
            let mut backoff = Backoff::seeded(FIRST, CAP, seed);
            (0..6).map(|_| backoff.next_delay()).collect::<Vec<_>>()
        };
        assert_eq!(delays(7), delays(7), "a seed fixes the sequence");
        assert_ne!(delays(7), delays(8));
    }

    #[test]
    fn a_success_starts_over_at_the_first_ceiling() {
        let mut backoff = Backoff::seeded(FIRST, CAP, 3);
        for _ in 0..5 {
            backoff.next_delay();
        }
        assert_eq!(backoff.ceiling(), Duration::from_millis(3200));
        backoff.reset();
        assert_eq!(backoff.ceiling(), FIRST);
        assert!(backoff.next_delay() <= FIRST);
        assert_eq!(backoff.ceiling(), 2 * FIRST);
    }

    #[test]
    fn a_cap_below_the_first_delay_is_the_first_delay() {
        let mut backoff = Backoff::seeded(CAP, FIRST, 9);
        assert_eq!(backoff.ceiling(), CAP);
        backoff.next_delay();
        assert_eq!(backoff.ceiling(), CAP);
    }
}
