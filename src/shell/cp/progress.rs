//! The progress line `codexbox cp` draws on a terminal: bytes done of the
//! total, rate, time left and the file being copied, redrawn at most ten
//! times a second, never wider than the terminal (the file name, escaped
//! as every remote string is by [`crate::terminal_text`], is cut first,
//! keeping its end). When stderr is not a terminal it draws nothing.

use std::io::Write;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use crate::terminal_text::{self, fit, Keep};

/// Least time between two redraws.
const REDRAW_EVERY: Duration = Duration::from_millis(100);
/// Width of the bar, in cells.
const BAR_CELLS: usize = 24;
/// The narrowest the bar gets to make room for the label.
const MIN_BAR_CELLS: usize = 8;
/// Label cells the bar shrinks for.
const LABEL_CELLS: usize = 24;
/// Columns assumed when the terminal does not say.
const DEFAULT_COLUMNS: usize = 80;

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

    /// Names the file being copied now (a remote name: escaped here).
    pub fn start_file(&mut self, label: &str) {
        self.label = terminal_text::escape(label).into_owned();
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
        let mut stderr = std::io::stderr().lock();
        let columns = crate::process::pty::size_of(stderr.as_fd())
            .ok()
            .map(|size| usize::from(size.cols))
            .filter(|&cols| cols > 0)
            .unwrap_or(DEFAULT_COLUMNS);
        let line = render(
            self.done,
            self.total,
            now.duration_since(self.started),
            &self.label,
            columns,
        );
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

/// One progress line: bar, percentage, bytes, rate, time left, label (an
/// escaped name), in fewer than `columns` cells. On a narrow terminal the
/// bar shrinks (down to [`MIN_BAR_CELLS`]) to leave the label up to
/// [`LABEL_CELLS`]; then the label is cut, keeping its end; then the rest.
pub fn render(done: u64, total: u64, elapsed: Duration, label: &str, columns: usize) -> String {
    let fraction = if total == 0 {
        1.0
    } else {
        (done as f64 / total as f64).clamp(0.0, 1.0)
    };
    let per_second = rate(done, elapsed);
    let eta = if per_second == 0 {
        "--:--".to_owned()
    } else {
        clock(Duration::from_secs(
            total.saturating_sub(done) / per_second.max(1),
        ))
    };
    let stats = format!(
        "{:>3}% {}/{} {}/s ETA {eta}",
        (fraction * 100.0) as u32,
        bytes(done),
        bytes(total),
        bytes(per_second),
    );
    // The last column is left free: a line filling it makes some terminals
    // wrap before the next redraw.
    let cells = columns.saturating_sub(1);
    // "[", "] " and the space before the label.
    let fixed = terminal_text::width(&stats) + 4;
    let wanted_label = terminal_text::width(label).min(LABEL_CELLS);
    let bar_cells = cells
        .saturating_sub(fixed + wanted_label)
        .clamp(MIN_BAR_CELLS, BAR_CELLS);
    let filled = ((fraction * bar_cells as f64) as usize).min(bar_cells);
    let bar: String = (0..bar_cells)
        .map(|cell| if cell < filled { '#' } else { '.' })
        .collect();
    let head = format!("[{bar}] {stats}");
    let room = cells.saturating_sub(terminal_text::width(&head) + 1);
    let label = fit(label, room, Keep::End);
    let line = if label.is_empty() {
        head
    } else {
        format!("{head} {label}")
    };
    fit(&line, cells, Keep::Start).into_owned()
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
            120,
        );
        assert_eq!(
            line,
            "[######..................]  25% 50.0 MiB/200.0 MiB 10.0 MiB/s ETA 0:15 big.iso"
        );
        let start = render(0, 10, Duration::ZERO, "x", 80);
        assert!(start.contains("  0% 0 B/10 B 0 B/s ETA --:-- x"), "{start}");
        let empty = render(0, 0, Duration::from_secs(1), "", 80);
        assert!(empty.contains("100%"), "{empty}");
    }

    #[test]
    fn the_line_never_outgrows_the_terminal() {
        let label = "very/long/directory/names/一二三四五六七八九十/final-file.bin";
        for columns in [0, 1, 10, 40, 60, 80, 200] {
            let line = render(1, 2, Duration::from_secs(1), label, columns);
            assert!(
                terminal_text::width(&line) < columns.max(1),
                "{columns}: {line:?}"
            );
        }
        let line = render(1, 2, Duration::from_secs(1), label, 80);
        assert!(
            line.ends_with("/final-file.bin") && line.contains(" …"),
            "{line:?}"
        );
        assert!(
            line.starts_with("[############............]  50%"),
            "{line:?}"
        );
    }

    #[test]
    fn long_durations_get_hours() {
        assert_eq!(clock(Duration::from_secs(3725)), "1:02:05");
        assert_eq!(clock(Duration::from_secs(65)), "1:05");
    }
}
