//! Paths on the wire (docs/protocol.md): every path is accepted either as an absolute
//! native path (`/home/u/x`, the seed dialect) or as a `file:` URI
//! (`file:///home/u/x`, the reference client's dialect). A [`WirePath`]
//! remembers which dialect it arrived in so results can answer in kind.
//!
//! URIs are rendered like the WHATWG URL serialisation of a file URL: bytes
//! outside the unreserved path set (and `%` itself) are percent-encoded, so a
//! non-UTF-8 Unix path round-trips losslessly.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The form a path took on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PathDialect {
    /// An absolute native path: `/home/u/x`.
    #[default]
    Native,
    /// A `file:` URI: `file:///home/u/x`.
    FileUri,
}

/// Why a wire path was refused. The message always names the path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("path `{0}` is not absolute")]
    NotAbsolute(String),
    #[error("unsupported path URI scheme `{scheme}` in `{uri}`")]
    UnsupportedScheme { scheme: String, uri: String },
    #[error("'{0}' is invalid on 'linux'")]
    ForeignHost(String),
    #[error("path URI `{0}` must not carry a query or fragment")]
    QueryOrFragment(String),
    #[error("path URI `{0}` has an invalid percent-encoding")]
    BadEncoding(String),
    #[error("path `{0}` contains a NUL byte")]
    Nul(String),
}

/// An absolute path received on the wire, with the dialect it came in.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WirePath {
    path: PathBuf,
    dialect: PathDialect,
}

impl WirePath {
    /// A native-dialect wire path. `path` must be absolute.
    pub fn native(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            dialect: PathDialect::Native,
        }
    }

    /// A wire path for `path` rendered in `dialect`.
    pub fn with_dialect(path: impl Into<PathBuf>, dialect: PathDialect) -> Self {
        Self {
            path: path.into(),
            dialect,
        }
    }

    /// Parses a wire string: an absolute path or a `file:` URI.
    pub fn parse(text: &str) -> Result<Self, PathError> {
        if text.contains('\0') {
            return Err(PathError::Nul(text.to_owned()));
        }
        if text.starts_with('/') {
            return Ok(Self::native(text));
        }
        let Some(colon) = text.find(':') else {
            return Err(PathError::NotAbsolute(text.to_owned()));
        };
        let scheme = &text[..colon];
        let is_scheme = !scheme.is_empty()
            && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        if !is_scheme {
            return Err(PathError::NotAbsolute(text.to_owned()));
        }
        if !scheme.eq_ignore_ascii_case("file") {
            // `C:\x` or `c:/x` is a Windows drive path, not a scheme.
            if scheme.len() == 1 {
                return Err(PathError::ForeignHost(text.to_owned()));
            }
            return Err(PathError::UnsupportedScheme {
                scheme: scheme.to_ascii_lowercase(),
                uri: text.to_owned(),
            });
        }
        let rest = &text[colon + 1..];
        if rest.contains(['?', '#']) {
            return Err(PathError::QueryOrFragment(text.to_owned()));
        }
        let encoded_path = match rest.strip_prefix("//") {
            Some(after) => {
                let (host, path) = match after.find('/') {
                    Some(slash) => (&after[..slash], &after[slash..]),
                    None => (after, ""),
                };
                if !host.is_empty() && !host.eq_ignore_ascii_case("localhost") {
                    return Err(PathError::ForeignHost(text.to_owned()));
                }
                if path.is_empty() {
                    "/"
                } else {
                    path
                }
            }
            None if rest.starts_with('/') => rest,
            None => return Err(PathError::NotAbsolute(text.to_owned())),
        };
        // The drive letter is a shape of the URI text: `file:///C%3A/x` is
        // the Unix path `/C:/x`, as `to_file_uri` writes it.
        if is_windows_drive(encoded_path.as_bytes()) {
            return Err(PathError::ForeignHost(text.to_owned()));
        }
        let bytes =
            percent_decode(encoded_path).ok_or_else(|| PathError::BadEncoding(text.to_owned()))?;
        if bytes.contains(&0) {
            return Err(PathError::Nul(text.to_owned()));
        }
        Ok(Self {
            path: PathBuf::from(OsString::from_vec(bytes)),
            dialect: PathDialect::FileUri,
        })
    }

    /// The native path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Consumes the wire path, returning the native path.
    pub fn into_path(self) -> PathBuf {
        self.path
    }

    /// The dialect the path arrived in.
    pub fn dialect(&self) -> PathDialect {
        self.dialect
    }

    /// Another path rendered in this path's dialect.
    pub fn sibling(&self, path: impl Into<PathBuf>) -> Self {
        Self::with_dialect(path, self.dialect)
    }

    /// The wire text: the native path or its `file:` URI.
    pub fn render(&self) -> String {
        render(&self.path, self.dialect)
    }
}

/// Renders `path` in `dialect`. A path that is not UTF-8 is written as a
/// `file:` URI in either dialect, so no byte of it is lost.
pub fn render(path: &Path, dialect: PathDialect) -> String {
    match (dialect, path.to_str()) {
        (PathDialect::Native, Some(text)) => text.to_owned(),
        _ => to_file_uri(path.as_os_str()),
    }
}

/// `file://` + the percent-encoded absolute path. A first component shaped
/// like a Windows drive (`/C:`, `/c|`) gets its `:` or `|` encoded, so the
/// URI reads back as the Unix path it is.
pub fn to_file_uri(path: &OsStr) -> String {
    let bytes = path.as_bytes();
    let drive_mark = is_windows_drive(bytes).then_some(2);
    let mut out = String::from("file://");
    for (index, &byte) in bytes.iter().enumerate() {
        if is_path_safe(byte) && drive_mark != Some(index) {
            out.push(byte as char);
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0xf)]));
        }
    }
    out
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// Bytes kept literally in a file URI path: RFC 3986 unreserved, sub-delims
/// allowed by WHATWG, `:`, `@` and `/`. Everything else, `%` included, is encoded.
fn is_path_safe(byte: u8) -> bool {
    byte.is_ascii_alphanumeric()
        || matches!(
            byte,
            b'/' | b'-'
                | b'.'
                | b'_'
                | b'~'
                | b'!'
                | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
        )
}

/// Decodes `%XX` escapes; `None` on an escape that is not two hex digits.
pub fn percent_decode(text: &str) -> Option<Vec<u8>> {
    let well_formed = text.split('%').skip(1).all(|after| {
        after
            .as_bytes()
            .get(..2)
            .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit))
    });
    well_formed.then(|| percent_encoding::percent_decode_str(text).collect())
}

/// `/C:` or `/c|` at the start of a path, alone or before a separator
/// (`/`, `\`, or `%5C`): a Windows drive letter.
fn is_windows_drive(path: &[u8]) -> bool {
    match path {
        [b'/', letter, b':' | b'|', rest @ ..] if letter.is_ascii_alphabetic() => {
            rest.is_empty()
                || rest.starts_with(b"/")
                || rest.starts_with(b"\\")
                || rest
                    .get(..3)
                    .is_some_and(|sep| sep.eq_ignore_ascii_case(b"%5c"))
        }
        _ => false,
    }
}

impl fmt::Display for WirePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render())
    }
}

impl Serialize for WirePath {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.render())
    }
}

impl<'de> Deserialize<'de> for WirePath {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        WirePath::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_absolute_paths_are_accepted_as_is() {
        let path = WirePath::parse("/home/u/x y").unwrap();
        assert_eq!(path.path(), Path::new("/home/u/x y"));
        assert_eq!(path.dialect(), PathDialect::Native);
        assert_eq!(path.render(), "/home/u/x y");
    }

    #[test]
    fn file_uris_decode_and_render_back_in_kind() {
        let path = WirePath::parse("file:///tmp/a%20b/%C3%A9").unwrap();
        assert_eq!(path.path(), Path::new("/tmp/a b/é"));
        assert_eq!(path.render(), "file:///tmp/a%20b/%C3%A9");
        assert_eq!(
            WirePath::parse("file://localhost/x").unwrap().path(),
            Path::new("/x")
        );
        assert_eq!(WirePath::parse("file:/x").unwrap().path(), Path::new("/x"));
    }

    #[test]
    fn non_utf8_and_percent_round_trip_losslessly() {
        let raw = PathBuf::from(OsString::from_vec(b"/tmp/\xff%41".to_vec()));
        let uri = to_file_uri(raw.as_os_str());
        assert_eq!(uri, "file:///tmp/%FF%2541");
        assert_eq!(WirePath::parse(&uri).unwrap().path(), raw);
    }

    #[test]
    fn relative_foreign_and_windows_paths_are_rejected_naming_the_path() {
        assert_eq!(
            WirePath::parse("x/y"),
            Err(PathError::NotAbsolute("x/y".into()))
        );
        assert_eq!(
            WirePath::parse("").unwrap_err().to_string(),
            "path `` is not absolute"
        );
        assert_eq!(
            WirePath::parse("http://h/x").unwrap_err().to_string(),
            "unsupported path URI scheme `http` in `http://h/x`"
        );
        assert_eq!(
            WirePath::parse("file://server/share/f")
                .unwrap_err()
                .to_string(),
            "'file://server/share/f' is invalid on 'linux'"
        );
        assert!(matches!(
            WirePath::parse("file:///C:/x"),
            Err(PathError::ForeignHost(_))
        ));
        assert!(matches!(
            WirePath::parse("C:\\x"),
            Err(PathError::ForeignHost(_))
        ));
        assert!(matches!(
            WirePath::parse("file:///x?q"),
            Err(PathError::QueryOrFragment(_))
        ));
        assert!(matches!(
            WirePath::parse("file:///x%00"),
            Err(PathError::Nul(_))
        ));
        assert!(matches!(
            WirePath::parse("file:///x%zz"),
            Err(PathError::BadEncoding(_))
        ));
        assert!(matches!(
            WirePath::parse("file:relative"),
            Err(PathError::NotAbsolute(_))
        ));
    }

    #[test]
    fn serde_uses_the_wire_text() {
        let path: WirePath = serde_json::from_str("\"file:///a\"").unwrap();
        assert_eq!(serde_json::to_string(&path).unwrap(), "\"file:///a\"");
        let err = serde_json::from_str::<WirePath>("\"rel\"").unwrap_err();
        assert!(err.to_string().contains("path `rel` is not absolute"));
    }
}
