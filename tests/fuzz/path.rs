//! Paths on the wire (`wire_path`): `file:` URIs and native paths.
//! Whatever parses is absolute and NUL-free and renders back to itself in
//! its dialect; every absolute byte path survives `to_file_uri` → parse.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use codexbox::policy::{abs_path, normalize};
use codexbox::wire_path::{to_file_uri, PathDialect, WirePath};
use proptest::prelude::*;

use crate::common::fuzz;
use crate::gen;

/// Text shaped like a URI or a path: a scheme, an authority, a path with
/// percent escapes (valid or not), maybe a query or fragment.
fn uri_like() -> BoxedStrategy<String> {
    let scheme = prop::sample::select(vec![
        "file:", "FILE:", "File:", "http:", "c:", "C:", "", "/", "f1+.-:",
    ]);
    let authority = prop::sample::select(vec![
        "//",
        "///",
        "//localhost",
        "//LocalHost",
        "//server",
        "",
        "//[::1]",
    ]);
    let segment = prop_oneof![
        "[a-zA-Z0-9._~!$&'()*+,;=:@-]{0,8}",
        "%[0-9a-fA-F]{2}",
        "%[0-9a-zA-Z]{0,2}",
        Just("%00".to_owned()),
        prop::sample::select(vec!["C:", "c|", "..", ".", "?q", "#f", "é", " ", "\\"])
            .prop_map(str::to_owned),
    ];
    (
        scheme,
        authority,
        prop::collection::vec(segment, 0..6),
        any::<bool>(),
    )
        .prop_map(|(scheme, authority, segments, leading)| {
            let path = segments.join("/");
            let slash = if leading { "/" } else { "" };
            format!("{scheme}{authority}{slash}{path}")
        })
        .boxed()
}

fn wire_text() -> BoxedStrategy<String> {
    prop_oneof![
        3 => uri_like(),
        1 => "\\PC{0,24}",
        1 => gen::safe_string(),
        1 => "/[^\\x00]{0,24}",
    ]
    .boxed()
}

/// An absolute path of arbitrary bytes (no NUL: the kernel cannot name one).
fn byte_path() -> BoxedStrategy<PathBuf> {
    let byte = prop_oneof![
        4 => any::<u8>().prop_filter("NUL", |b| *b != 0),
        2 => prop::sample::select(b"/%:|?#.C".to_vec()),
    ];
    prop::collection::vec(byte, 0..24)
        .prop_map(|mut bytes| {
            bytes.insert(0, b'/');
            PathBuf::from(OsString::from_vec(bytes))
        })
        .boxed()
}

#[test]
fn whatever_parses_is_absolute_and_renders_back_to_itself() {
    fuzz::run("path_parse", 768, wire_text(), |text| {
        let Ok(path) = WirePath::parse(&text) else {
            return Ok(());
        };
        prop_assert!(path.path().is_absolute(), "{text:?} -> {path:?}");
        prop_assert!(!path.path().as_os_str().as_bytes().contains(&0));
        let again = WirePath::parse(&path.render());
        prop_assert_eq!(
            again.as_ref(),
            Ok(&path),
            "{:?} rendered {:?}",
            text,
            path.render()
        );
        Ok(())
    });
}

#[test]
fn every_absolute_byte_path_round_trips_in_both_dialects() {
    fuzz::run("path_round_trip", 768, byte_path(), |path| {
        let uri = to_file_uri(path.as_os_str());
        prop_assert!(uri.is_ascii() && !uri.contains(['?', '#']), "{uri}");
        let parsed = WirePath::parse(&uri);
        prop_assert_eq!(
            parsed.as_ref().map(WirePath::path),
            Ok(path.as_path()),
            "{} from {:?}",
            uri,
            path
        );
        // A result in either dialect reads back as the same path.
        for dialect in [PathDialect::Native, PathDialect::FileUri] {
            let wire = WirePath::with_dialect(path.clone(), dialect);
            let text =
                serde_json::to_string(&wire).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let back: WirePath = serde_json::from_str(&text)
                .map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
            prop_assert_eq!(back.path(), path.as_path(), "{:?} as {}", dialect, text);
        }
        Ok(())
    });
}

#[test]
fn permission_paths_parse_normalized() {
    fuzz::run("path_permission", 512, wire_text(), |text| {
        if let Ok(path) = abs_path::parse(&text) {
            prop_assert!(path.is_absolute());
            prop_assert_eq!(normalize(&path), path.clone());
            prop_assert!(!path.components().any(|c| matches!(
                c,
                std::path::Component::ParentDir | std::path::Component::CurDir
            )));
        }
        Ok(())
    });
}

/// `/C:/x` is a Unix path like any other: its URI must not read as a
/// Windows drive.
#[test]
fn a_unix_path_shaped_like_a_drive_letter_round_trips() {
    for raw in ["/C:", "/C:/x", "/c|/y", "/Z:\\"] {
        let uri = to_file_uri(Path::new(raw).as_os_str());
        assert_eq!(
            WirePath::parse(&uri).map(WirePath::into_path),
            Ok(PathBuf::from(raw)),
            "{uri}"
        );
    }
}

/// A non-UTF-8 path keeps its bytes when answered in the native dialect.
#[test]
fn a_non_utf8_result_path_is_not_lossy_in_the_native_dialect() {
    let raw = PathBuf::from(OsString::from_vec(b"/tmp/\xffx".to_vec()));
    let text = serde_json::to_string(&WirePath::native(raw.clone())).unwrap();
    let back: WirePath = serde_json::from_str(&text).unwrap();
    assert_eq!(back.path(), raw.as_path(), "{text}");
}
