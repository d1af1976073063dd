//! Text that came from the other end (a remote file name, a server's error
//! message, a session id), made safe to print on a terminal, and cut to a
//! number of terminal cells.
//!
//! [`escape`] is the one way such text reaches a terminal: every character
//! a terminal could act on instead of showing is written as a visible
//! escape, so no remote string can move the cursor, retitle the window,
//! rewrite the clipboard (OSC 52) or reorder what is shown (bidi
//! overrides). A process's own output under `exec`/`attach` is not text of
//! this kind: it is passed through untouched, as `ssh` does.
//!
//! Pure: nothing here writes anywhere.

use std::borrow::Cow;
use std::fmt::Write as _;

use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

/// What marks a cut.
const ELLIPSIS: char = '…';

/// How `c` is shown when a terminal must not see it raw; `None` for a
/// character shown as itself.
///
/// - `\t`, `\n`, `\r` as those two characters;
/// - the other C0 controls (ESC included) and DEL as `\xNN`;
/// - the C1 controls (U+0080–U+009F, e.g. the one-byte CSI U+009B) and the
///   invisible formatting characters that change what is shown or where
///   (bidi embeddings, overrides, isolates and marks; zero-width spaces and
///   joiners; the word joiner; line and paragraph separators; the BOM) as
///   `\u{XXXX}`.
fn escaped(c: char) -> Option<String> {
    match c {
        '\t' => Some("\\t".to_owned()),
        '\n' => Some("\\n".to_owned()),
        '\r' => Some("\\r".to_owned()),
        '\0'..='\x1f' | '\x7f' => Some(format!("\\x{:02x}", u32::from(c))),
        '\u{80}'..='\u{9f}'
        | '\u{061c}'
        | '\u{200b}'..='\u{200f}'
        | '\u{2028}'..='\u{202e}'
        | '\u{2060}'..='\u{2064}'
        | '\u{2066}'..='\u{2069}'
        | '\u{feff}' => Some(format!("\\u{{{:x}}}", u32::from(c))),
        _ => None,
    }
}

/// `text` with every character a terminal could act on written as a
/// visible escape (see `escaped`); borrowed when there is none.
pub fn escape(text: &str) -> Cow<'_, str> {
    if text.chars().any(|c| escaped(c).is_some()) {
        Cow::Owned(Escaped(text).to_string())
    } else {
        Cow::Borrowed(text)
    }
}

/// Formats as [`escape`] of the wrapped text: `format!("{}", Escaped(s))`.
#[derive(Debug, Clone, Copy)]
pub struct Escaped<'a>(pub &'a str);

impl std::fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for c in self.0.chars() {
            match escaped(c) {
                Some(shown) => f.write_str(&shown)?,
                None => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// Terminal cells `text` takes (East Asian wide characters two, combining
/// marks none). Meant for escaped text, which holds no control character.
pub fn width(text: &str) -> usize {
    UnicodeWidthStr::width(text)
}

/// Which part of a text a cut keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// The start, with a trailing `…`.
    Start,
    /// The end (for a path, the file name), behind a leading `…`.
    End,
}

/// `text` cut to at most `cells` terminal cells, keeping the part `keep`
/// names; unchanged when it fits.
pub fn fit(text: &str, cells: usize, keep: Keep) -> Cow<'_, str> {
    if width(text) <= cells {
        return Cow::Borrowed(text);
    }
    let Some(room) = cells.checked_sub(1) else {
        return Cow::Borrowed("");
    };
    let mut used = 0;
    let mut fits = |c: char| {
        let cell = c.width().unwrap_or(0);
        let fit = used + cell <= room;
        if fit {
            used += cell;
        }
        fit
    };
    Cow::Owned(match keep {
        Keep::Start => {
            let end = text
                .char_indices()
                .take_while(|&(_, c)| fits(c))
                .last()
                .map_or(0, |(at, c)| at + c.len_utf8());
            format!("{}{ELLIPSIS}", text.get(..end).unwrap_or_default())
        }
        Keep::End => {
            let start = text
                .char_indices()
                .rev()
                .take_while(|&(_, c)| fits(c))
                .last()
                .map_or(text.len(), |(at, _)| at);
            format!("{ELLIPSIS}{}", text.get(start..).unwrap_or_default())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_escape_sequences_become_visible() {
        assert_eq!(escape("plain name.txt"), Cow::Borrowed("plain name.txt"));
        assert_eq!(escape("a\x1b[2Jb"), "a\\x1b[2Jb");
        assert_eq!(escape("t\x1b]0;pwned\x07"), "t\\x1b]0;pwned\\x07");
        assert_eq!(escape("x\x1b]52;c;Zm9v\x1b\\"), "x\\x1b]52;c;Zm9v\\x1b\\");
        assert_eq!(escape("\u{9b}31m red"), "\\u{9b}31m red");
        assert_eq!(
            escape("line\nnext\r\tend\x7f\0"),
            "line\\nnext\\r\\tend\\x7f\\x00"
        );
        assert_eq!(escape("exe\u{202e}txt.sh"), "exe\\u{202e}txt.sh");
        assert_eq!(
            escape("\u{2066}a\u{2069}\u{200b}\u{feff}"),
            "\\u{2066}a\\u{2069}\\u{200b}\\u{feff}"
        );
        assert_eq!(escape("héllo 日本 ✓"), "héllo 日本 ✓");
        assert_eq!(Escaped("a\x1bb").to_string(), escape("a\x1bb"));
    }

    #[test]
    fn nothing_escaped_holds_a_control_character() {
        let every: String = (0u32..0x3000).filter_map(char::from_u32).collect();
        let shown = escape(&every);
        assert!(!shown.chars().any(|c| c.is_control()), "{shown:?}");
        assert!(!shown.contains('\u{202e}') && !shown.contains('\u{2067}'));
    }

    fn fit_end(text: &str, cells: usize) -> Cow<'_, str> {
        fit(text, cells, Keep::End)
    }

    fn fit_start(text: &str, cells: usize) -> Cow<'_, str> {
        fit(text, cells, Keep::Start)
    }

    #[test]
    fn cuts_count_terminal_cells_not_bytes() {
        assert_eq!(width("日本語"), 6);
        assert_eq!(width("e\u{301}"), 1);
        assert_eq!(fit_end("short", 10), Cow::Borrowed("short"));
        assert_eq!(fit_end("dir/sub/file.txt", 9), "…file.txt");
        assert_eq!(fit_end("日本語.txt", 7), "…語.txt");
        assert_eq!(width(&fit_end("日本語日本語", 6)), 5);
        assert_eq!(fit_end("abc", 0), "");
        assert_eq!(fit_start("progress line", 9), "progress…");
        assert_eq!(fit_start("日本語", 4), "日…");
        for cells in 0..20 {
            assert!(width(&fit_end("a/日本/b\u{301}c/長い名前.bin", cells)) <= cells);
            assert!(width(&fit_start("a/日本/b\u{301}c/長い名前.bin", cells)) <= cells);
        }
    }
}
