//! The progress line `codexbox cp` draws on a terminal: bytes done of the
//! total, rate, time left and the file being copied, redrawn at most ten
//! times a second. When stderr is not a terminal it draws nothing.

use std::io::Write;
use std::time::{Duration, Instant};

/// Least time between two redraws.
const REDRAW_EVERY: Duration = Duration::from_millis(100);
/// Width of the bar, in cells.
const BAR_CELLS: usize = 24;

/// The progress of one copy.
pub struct Progress {
    enabled: bool,
    total: u64,
    done: u64,
    started: Instant,
    last_draw: Option<Instant>,
    label: String,
}

impl Progress {
    /// A progress line over `total` bytes, drawn only when `enabled`.
    pub fn new(enabled: bool, total: u64) -> Self {
        Self {
            enabled,
            total,
            done: 0,
            started: Instant::now(),
            last_draw: None,
            label: String::new(),
        }
    }

    /// Names the file being copied now.
    pub fn start_file(&mut self, label: &str) {
        self.label = label.to_owned();
        self.draw(false);
    }

    /// Counts `bytes` more as copied.
    pub fn advance(&mut self, bytes: u64) {
        self.done = self.done.saturating_add(bytes);
        self.draw(false);
    }

    /// Erases the line (before a message, and at the end).
    pub fn clear(&mut self) {
        if self.enabled && self.last_draw.is_some() {
            let mut stderr = std::io::stderr().lock();
            let _ = write!(stderr, "\r\x1b[K");
            let _ = stderr.flush();
            self.last_draw = None;
        }
    }

    /// Draws the final state and ends the line with a summary.
    pub fn finish(&mut self, files: u64) {
        if !self.enabled {
            return;
        }
        self.clear();
        let elapsed = self.started.elapsed();
        eprintln!(
            "copied {files} file(s), {} in {:.1} s ({}/s)",
            bytes(self.done),
            elapsed.as_secs_f64(),
            bytes(rate(self.done, elapsed))
        );
    }

    fn draw(&mut self, force: bool) {
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        if !force
            && self
                .last_draw
                .is_some_and(|last| now.duration_since(last) < REDRAW_EVERY)
        {
            return;
        }
        self.last_draw = Some(now);
        let line = render(
            self.done,
            self.total,
            now.duration_since(self.started),
            &self.label,
        );
        let mut stderr = std::io::stderr().lock();
        let _ = write!(stderr, "\r\x1b[K{line}");
        let _ = stderr.flush();
    }
}

/// Bytes per second over `elapsed`.
fn rate(done: u64, elapsed: Duration) -> u64 {
    let seconds = elapsed.as_secs_f64();
    if seconds <= 0.0 {
        return 0;
    }
    // Saturating float-to-int conversion: no wrap, no panic.
    (done as f64 / seconds) as u64
}

/// `12.3 MiB`.
fn bytes(count: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = count as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    let name = UNITS.get(unit).copied().unwrap_or("B");
    if unit == 0 {
        format!("{count} B")
    } else {
        format!("{value:.1} {name}")
    }
}

/// `m:ss` (or `h:mm:ss`).
fn clock(duration: Duration) -> String {
    let seconds = duration.as_secs();
    let (hours, minutes, seconds) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    if hours > 0 {
        format!("{hours}:{minutes:02}:{seconds:02}")
    } else {
        format!("{minutes}:{seconds:02}")
    }
}

/// One progress line: bar, percentage, bytes, rate, time left, label.
pub fn render(done: u64, total: u64, elapsed: Duration, label: &str) -> String {
    let fraction = if total == 0 {
        1.0
    } else {
        (done as f64 / total as f64).clamp(0.0, 1.0)
    };
    let filled = ((fraction * BAR_CELLS as f64) as usize).min(BAR_CELLS);
    let bar: String = (0..BAR_CELLS)
        .map(|cell| if cell < filled { '#' } else { '.' })
        .collect();
    let per_second = rate(done, elapsed);
    let eta = if per_second == 0 {
        "--:--".to_owned()
    } else {
        clock(Duration::from_secs(
            total.saturating_sub(done) / per_second.max(1),
        ))
    };
    format!(
        "[{bar}] {:>3}% {}/{} {}/s ETA {eta} {label}",
        (fraction * 100.0) as u32,
        bytes(done),
        bytes(total),
        bytes(per_second),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_shows_bytes_rate_and_time_left() {
        let line = render(
            50 * 1024 * 1024,
            200 * 1024 * 1024,
            Duration::from_secs(5),
            "big.iso",
        );
        assert_eq!(
            line,
            "[######..................]  25% 50.0 MiB/200.0 MiB 10.0 MiB/s ETA 0:15 big.iso"
        );
        let start = render(0, 10, Duration::ZERO, "x");
        assert!(start.contains("  0% 0 B/10 B 0 B/s ETA --:-- x"), "{start}");
        let empty = render(0, 0, Duration::from_secs(1), "");
        assert!(empty.contains("100%"), "{empty}");
    }

    #[test]
    fn long_durations_get_hours() {
        assert_eq!(clock(Duration::from_secs(3725)), "1:02:05");
        assert_eq!(clock(Duration::from_secs(65)), "1:05");
    }
}
