//! The command lines the front ends print for a person to run next (`To
//! continue: codexbox attach …`, what `exec --detach` prints, `ps`'s
//! template): complete — the flags naming the server come along — and
//! pasteable: every word is quoted for a POSIX shell when it needs to be,
//! then escaped for the terminal (a server's string cannot move the cursor;
//! a word holding a control character is then shown, not pasteable).

use std::borrow::Cow;
use std::fmt;

use crate::terminal_text::Escaped;

/// `word` as one word for `sh`: as it is when every character is safe,
/// otherwise in single quotes (a `'` written `'\''`).
pub fn shell_quote(word: &str) -> Cow<'_, str> {
    let safe = |c: char| c.is_ascii_alphanumeric() || "@%+=:,./_-".contains(c);
    if !word.is_empty() && word.chars().all(safe) {
        return Cow::Borrowed(word);
    }
    Cow::Owned(format!("'{}'", word.replace('\'', r"'\''")))
}

/// Words quoted with [`shell_quote`] and joined with spaces.
pub fn shell_words<S: AsRef<str>>(words: &[S]) -> String {
    words
        .iter()
        .map(|word| shell_quote(word.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `codexbox attach` for one process of a session, from a seq or not.
#[derive(Debug, Clone)]
pub struct AttachCommand<'a> {
    /// The flags naming the server ([`super::target::TargetArgs::flags`]).
    pub target: &'a [String],
    pub session: &'a str,
    pub process: &'a str,
    /// `--after-seq N`; `None` follows from now on.
    pub after_seq: Option<u64>,
    pub tty: bool,
    pub stdin: bool,
}

impl AttachCommand<'_> {
    /// The words after `codexbox`.
    fn words(&self) -> Vec<String> {
        let mut words = vec!["attach".to_owned()];
        words.extend(self.target.iter().cloned());
        words.extend([
            "--session".to_owned(),
            self.session.to_owned(),
            "--process".to_owned(),
            self.process.to_owned(),
        ]);
        if let Some(seq) = self.after_seq {
            words.extend(["--after-seq".to_owned(), seq.to_string()]);
        }
        if self.tty {
            words.push("-t".to_owned());
        }
        if self.stdin {
            words.push("-i".to_owned());
        }
        words
    }
}

/// The whole line, `codexbox …`, quoted and escaped.
impl fmt::Display for AttachCommand<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "codexbox {}", Escaped(&shell_words(&self.words())))
    }
}

/// A duration for people: `45 s`, `30 min`, `1 h 30 min`, `2 d 3 h`.
pub fn human_duration(secs: u64) -> String {
    let (days, hours, minutes, seconds) = (
        secs / 86_400,
        secs % 86_400 / 3600,
        secs % 3600 / 60,
        secs % 60,
    );
    let parts: Vec<String> = [(days, "d"), (hours, "h"), (minutes, "min"), (seconds, "s")]
        .into_iter()
        .skip_while(|(value, _)| *value == 0)
        .take(2)
        .filter(|(value, _)| *value > 0)
        .map(|(value, unit)| format!("{value} {unit}"))
        .collect();
    if parts.is_empty() {
        "0 s".to_owned()
    } else {
        parts.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `sh` makes of a line: its words.
    fn words_of(line: &str) -> Vec<String> {
        let out = std::process::Command::new("sh")
            .args([
                "-c",
                &format!("for w in {line}; do printf '%s\\0' \"$w\"; done"),
            ])
            .output()
            .expect("sh");
        out.stdout
            .split(|&b| b == 0)
            .filter(|w| !w.is_empty())
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect()
    }

    #[test]
    fn quoted_words_come_back_from_the_shell_unchanged() {
        let words = [
            "plain",
            "ws://127.0.0.1:8765",
            "with space",
            "it's",
            "$HOME",
            "`id`",
            "a;b|c&d",
            "*",
            "--x=\"y\"",
            "tab\there",
            "ünïcode",
        ];
        assert_eq!(words_of(&shell_words(&words)), words);
        assert_eq!(shell_quote("plain"), "plain");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn an_attach_command_names_the_server_and_everything_else() {
        let target = ["--url".to_owned(), "ws://127.0.0.1:1".to_owned()];
        let line = AttachCommand {
            target: &target,
            session: "s 1",
            process: "p",
            after_seq: Some(7),
            tty: true,
            stdin: false,
        }
        .to_string();
        assert_eq!(
            line,
            "codexbox attach --url ws://127.0.0.1:1 --session 's 1' --process p --after-seq 7 -t"
        );
        // A control character is shown escaped, never raw.
        let hostile = AttachCommand {
            target: &target,
            session: "s\u{1b}[2J",
            process: "p",
            after_seq: None,
            tty: false,
            stdin: false,
        }
        .to_string();
        assert!(
            !hostile.contains('\u{1b}') && hostile.contains("\\x1b"),
            "{hostile}"
        );
    }

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(human_duration(0), "0 s");
        assert_eq!(human_duration(45), "45 s");
        assert_eq!(human_duration(3600), "1 h");
        assert_eq!(human_duration(5400), "1 h 30 min");
        assert_eq!(human_duration(86_400 + 3 * 3600 + 5), "1 d 3 h");
        assert_eq!(human_duration(90), "1 min 30 s");
    }
}
