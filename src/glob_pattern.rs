//! Glob patterns matched against text, the one matcher of the tree: the
//! sandbox's deny globs against relative paths ([`glob_match`], with the
//! gitignore rule for globs without `/`) and the network policy's domain
//! patterns against host names ([`TextGlob`]).
//!
//! Rules: `*` and `?` never cross `/`, `**` spans directories, `[...]` is a
//! class (`!`/`^` negate, `a-z` ranges), and a `[` that opens no class is a
//! literal. Matching runs as a set of pattern positions advanced one
//! character at a time: linear in the product of the lengths, nothing
//! recurses, so a pattern from outside cannot make it exponential. Walking
//! the filesystem for matches is the sandbox's (`sandbox::glob`).

/// Index of the `]` closing the class opened at `start`, if any.
pub(crate) fn class_end(p: &[char], start: usize) -> Option<usize> {
    let mut i = start + 1;
    if i < p.len() && (p[i] == '!' || p[i] == '^') {
        i += 1;
    }
    if i < p.len() && p[i] == ']' {
        i += 1;
    }
    while i < p.len() {
        if p[i] == ']' {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// Matches `text` (a relative path) against a gitignore-style glob with
/// literal separators. A glob without `/` matches the basename at any depth.
///
/// Runs as a set of pattern positions advanced one character at a time, so
/// the time is at most the product of the two lengths and nothing recurses:
/// a policy's glob (outside input) cannot make matching exponential or
/// exhaust the stack.
pub fn glob_match(glob: &str, text: &str) -> bool {
    let pattern: Vec<char> = if glob.contains('/') {
        glob.trim_start_matches('/').chars().collect()
    } else {
        format!("**/{glob}").chars().collect()
    };
    matches_whole(&compile(&pattern), text)
}

/// A glob matched against the whole of a text as it is, without the rule
/// for globs without `/` (used for host names, which have no `/`); compiled
/// once, matched many times. Linear like [`glob_match`]: a policy's domain
/// pattern is outside input too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextGlob(Vec<GlobToken>);

impl TextGlob {
    /// Compiles `glob`.
    pub fn new(glob: &str) -> Self {
        let pattern: Vec<char> = glob.chars().collect();
        Self(compile(&pattern))
    }

    /// Whether the whole of `text` matches.
    pub fn matches(&self, text: &str) -> bool {
        matches_whole(&self.0, text)
    }
}

fn matches_whole(tokens: &[GlobToken], text: &str) -> bool {
    let mut run = GlobRun::new(tokens);
    for c in text.chars() {
        if run.accepts_anything || !run.step(c) {
            break;
        }
    }
    run.accepts_anything || run.normal.last().copied().unwrap_or(false)
}

/// One element of a compiled glob.
#[derive(Debug, Clone, PartialEq, Eq)]
enum GlobToken {
    /// This character (also an escaped one, or a `[` that opens no class).
    Literal(char),
    /// `?`: one character other than `/`.
    AnyChar,
    /// `[…]`: one character other than `/` in the class (its body).
    Class(Vec<char>),
    /// `*`: any run of characters other than `/`.
    Star,
    /// `**` (with the `/` after it): any number of whole components.
    Globstar,
}

fn compile(p: &[char]) -> Vec<GlobToken> {
    let mut tokens = Vec::new();
    let mut i = 0;
    while let Some(&c) = p.get(i) {
        match c {
            '*' if p.get(i + 1) == Some(&'*') => {
                i += 2;
                if p.get(i) == Some(&'/') {
                    i += 1;
                }
                tokens.push(GlobToken::Globstar);
            }
            '*' => {
                tokens.push(GlobToken::Star);
                i += 1;
            }
            '?' => {
                tokens.push(GlobToken::AnyChar);
                i += 1;
            }
            '[' => match class_end(p, i) {
                Some(end) => {
                    tokens.push(GlobToken::Class(
                        p.get(i + 1..end).unwrap_or_default().to_vec(),
                    ));
                    i = end + 1;
                }
                None => {
                    tokens.push(GlobToken::Literal('['));
                    i += 1;
                }
            },
            '\\' if i + 1 < p.len() => {
                tokens.push(GlobToken::Literal(p.get(i + 1).copied().unwrap_or('\\')));
                i += 2;
            }
            c => {
                tokens.push(GlobToken::Literal(c));
                i += 1;
            }
        }
    }
    tokens
}

/// The positions a glob can be at after the characters read so far.
/// Position `tokens.len()` is the end of the pattern.
struct GlobRun<'a> {
    tokens: &'a [GlobToken],
    /// Positions at a token boundary.
    normal: Vec<bool>,
    /// `**` positions in the middle of a component: they may only move on
    /// after the next `/`.
    inside_globstar: Vec<bool>,
    /// A trailing `**` was reached: the rest of the text is matched.
    accepts_anything: bool,
    /// Cleared buffers the next step fills (no allocation per character).
    next_normal: Vec<bool>,
    next_inside_globstar: Vec<bool>,
}

impl<'a> GlobRun<'a> {
    fn new(tokens: &'a [GlobToken]) -> Self {
        let mut run = Self {
            tokens,
            normal: vec![false; tokens.len() + 1],
            inside_globstar: vec![false; tokens.len() + 1],
            accepts_anything: false,
            next_normal: vec![false; tokens.len() + 1],
            next_inside_globstar: vec![false; tokens.len() + 1],
        };
        run.enter(0);
        run
    }

    /// Adds position `at` and every position reachable from it without
    /// reading a character (`*` and `**` may match nothing).
    fn enter(&mut self, mut at: usize) {
        loop {
            match self.normal.get(at) {
                Some(false) => {}
                _ => return,
            }
            if let Some(slot) = self.normal.get_mut(at) {
                *slot = true;
            }
            match self.tokens.get(at) {
                Some(GlobToken::Globstar) if at + 1 == self.tokens.len() => {
                    self.accepts_anything = true;
                    return;
                }
                Some(GlobToken::Star | GlobToken::Globstar) => at += 1,
                _ => return,
            }
        }
    }

    /// Reads one character; false when no position is left.
    fn step(&mut self, c: char) -> bool {
        let mut normal = std::mem::take(&mut self.next_normal);
        std::mem::swap(&mut normal, &mut self.normal);
        let mut inside = std::mem::take(&mut self.next_inside_globstar);
        std::mem::swap(&mut inside, &mut self.inside_globstar);
        let mut alive = false;
        for (at, token) in self.tokens.iter().enumerate() {
            let at_boundary = normal.get(at).copied().unwrap_or(false);
            let in_globstar = inside.get(at).copied().unwrap_or(false);
            if !at_boundary && !in_globstar {
                continue;
            }
            let next = match token {
                GlobToken::Literal(l) => (at_boundary && *l == c).then_some(at + 1),
                GlobToken::AnyChar => (at_boundary && c != '/').then_some(at + 1),
                GlobToken::Class(body) => {
                    (at_boundary && c != '/' && class_matches(body, c)).then_some(at + 1)
                }
                GlobToken::Star => (c != '/').then_some(at),
                GlobToken::Globstar if c == '/' => Some(at),
                GlobToken::Globstar => {
                    if let Some(slot) = self.inside_globstar.get_mut(at) {
                        *slot = true;
                    }
                    alive = true;
                    None
                }
            };
            if let Some(next) = next {
                self.enter(next);
                alive = true;
            }
        }
        normal.fill(false);
        inside.fill(false);
        self.next_normal = normal;
        self.next_inside_globstar = inside;
        alive || self.accepts_anything
    }
}

fn class_matches(class: &[char], c: char) -> bool {
    let (negate, body) = match class.first() {
        Some('!' | '^') => (true, &class[1..]),
        _ => (false, class),
    };
    let mut found = false;
    let mut i = 0;
    while i < body.len() {
        if i + 2 < body.len() && body[i + 1] == '-' {
            if body[i] <= c && c <= body[i + 2] {
                found = true;
            }
            i += 3;
        } else {
            if body[i] == c {
                found = true;
            }
            i += 1;
        }
    }
    found != negate
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_matching_rules() {
        assert!(glob_match("*.env", "a/b/.env"));
        assert!(glob_match("*.env", "x.env"));
        assert!(glob_match("**/*.env", "x.env"));
        assert!(glob_match("**/*.env", "a/b/x.env"));
        assert!(!glob_match("src/*.rs", "src/a/b.rs"));
        assert!(glob_match("src/**/*.rs", "src/a/b.rs"));
        assert!(glob_match("secret?.txt", "secret1.txt"));
        assert!(!glob_match("secret?.txt", "secret/.txt"));
        assert!(glob_match("key[0-9].pem", "key7.pem"));
        assert!(!glob_match("key[!0-9].pem", "key7.pem"));
        assert!(glob_match("a[b", "a[b"));
        assert!(glob_match("docs/**", "docs/x/y"));
    }
}
