//! `capabilityRoots/discoverV1`: the capability bundle below each root in
//! one request, with the reference's rules, limits and messages.
//!
//! Per root: a bounded walk (`super::walk`: depth 6, 2,000 directories,
//! 20,000 entries, directory symlinks followed, hidden directories
//! descended) finds every `SKILL.md` and every plugin manifest
//! (`.codex-plugin/plugin.json` before `.claude-plugin/…` before
//! `.cursor-plugin/…`). The root's own manifest makes it a plugin, with the
//! MCP file its `mcpServers` names (`.mcp.json` unless inline) and the apps
//! file `apps` names (`./`-relative, never leaving the root); the root's
//! manifest, else its nearest ancestor's, namespaces the skills along with
//! one manifest per plugin root found below. Files are read only when they
//! are regular UTF-8 files of at most 1 MiB, at most 16 MiB per root; what
//! cannot be read becomes a warning, what cannot be used at all the root's
//! `error`. Nothing here is sandboxed, as in the reference: the server
//! reads with its own rights. Blocking: run it off the async workers.

use std::collections::HashSet;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::ops::open_regular_file;
use super::walk::walk;
use crate::protocol::capability::{
    DiscoverParams, DiscoverResponse, PluginFiles, RootDiscovery, RootRequest, SkillFiles,
    TextFile, MAX_ROOTS_PER_REQUEST, PLUGIN_MANIFEST_PATHS,
};
use crate::protocol::fs::{WalkEntryKind, WalkOptions, WalkParams};
use crate::wire_path::{to_file_uri, PathDialect, WirePath};

const MAX_SCAN_DEPTH: usize = 6;
const MAX_DIRECTORIES_PER_ROOT: usize = 2_000;
const MAX_ENTRIES_PER_ROOT: usize = 20_000;
/// Largest file read.
pub const MAX_FILE_BYTES: usize = 1024 * 1024;
/// Most bytes read below one root.
pub const MAX_BUNDLE_BYTES_PER_ROOT: usize = 16 * 1024 * 1024;
const SKILL_FILE_NAME: &str = "SKILL.md";
const SKILL_METADATA_PATH: &str = "agents/openai.yaml";
const DEFAULT_MCP_CONFIG_PATH: &str = ".mcp.json";

/// Why a whole request is refused (‑32600).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveryError {
    #[error("capability root discovery accepts at most {MAX_ROOTS_PER_REQUEST} roots")]
    TooManyRoots,
}

/// Discovers every root of `params`, in order.
pub fn discover(params: DiscoverParams) -> Result<DiscoverResponse, DiscoveryError> {
    if params.roots.len() > MAX_ROOTS_PER_REQUEST {
        return Err(DiscoveryError::TooManyRoots);
    }
    let roots = params.roots.into_iter().map(discover_root).collect();
    Ok(DiscoverResponse { roots })
}

/// One root's discovery: the files found, and what went wrong.
struct Root {
    path: PathBuf,
    dialect: PathDialect,
    warnings: Vec<String>,
    /// Bytes read so far.
    bytes: usize,
}

impl Root {
    fn wire(&self, path: &Path) -> WirePath {
        WirePath::with_dialect(path, self.dialect)
    }

    fn shown(&self, path: &Path) -> String {
        self.wire(path).render()
    }

    /// The file at `path` when it is a regular UTF-8 file within the
    /// limits; `None` when it is absent or not a file, with a warning when
    /// it exists but cannot be used.
    fn read_text(&mut self, path: &Path) -> Option<TextFile> {
        let shown = self.shown(path);
        let metadata = match std::fs::metadata(path) {
            Ok(metadata) if metadata.is_file() => metadata,
            Ok(_) => return None,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return None,
            Err(err) => {
                self.warnings
                    .push(format!("failed to inspect capability file {shown}: {err}"));
                return None;
            }
        };
        let size = usize::try_from(metadata.len()).unwrap_or(usize::MAX);
        if size > MAX_FILE_BYTES {
            self.warnings.push(format!(
                "capability file {shown} exceeds the {MAX_FILE_BYTES}-byte limit"
            ));
            return None;
        }
        if !self.fits(size) {
            self.warnings.push(format!(
                "capability root bundle exceeds the {MAX_BUNDLE_BYTES_PER_ROOT}-byte limit"
            ));
            return None;
        }
        let mut contents = Vec::with_capacity(size);
        let read = open_regular_file(path)
            .map_err(|err| err.to_string())
            .and_then(|(file, _)| {
                file.take(MAX_FILE_BYTES as u64 + 1)
                    .read_to_end(&mut contents)
                    .map_err(|err| err.to_string())
            });
        if let Err(err) = read {
            self.warnings
                .push(format!("failed to read capability file {shown}: {err}"));
            return None;
        }
        if contents.len() > MAX_FILE_BYTES || !self.fits(contents.len()) {
            self.warnings
                .push(format!("capability file {shown} exceeded its read limit"));
            return None;
        }
        let contents = match String::from_utf8(contents) {
            Ok(contents) => contents,
            Err(err) => {
                self.warnings
                    .push(format!("capability file {shown} is not UTF-8: {err}"));
                return None;
            }
        };
        self.bytes += contents.len();
        Some(TextFile {
            path: self.wire(path),
            contents,
        })
    }

    fn fits(&self, more: usize) -> bool {
        self.bytes
            .checked_add(more)
            .is_some_and(|total| total <= MAX_BUNDLE_BYTES_PER_ROOT)
    }

    /// The first plugin manifest of `dir`, by priority.
    fn first_manifest(&mut self, dir: &Path) -> Option<TextFile> {
        PLUGIN_MANIFEST_PATHS
            .iter()
            .find_map(|relative| self.read_text(&dir.join(relative)))
    }
}

fn discover_root(request: RootRequest) -> RootDiscovery {
    let RootRequest { id, path: text } = request;
    let mut discovery = RootDiscovery {
        id,
        path: text.clone(),
        plugin: None,
        skills: Vec::new(),
        namespace_manifests: Vec::new(),
        warnings: Vec::new(),
        error: None,
    };
    let wire = match WirePath::parse(&text) {
        Ok(wire) => wire,
        Err(err) => {
            discovery.error = Some(format!("failed to inspect capability root {text}: {err}"));
            return discovery;
        }
    };
    match std::fs::metadata(wire.path()) {
        Ok(metadata) if metadata.is_dir() => {}
        Ok(_) => {
            discovery.error = Some(format!("capability root {text} is not a directory"));
            return discovery;
        }
        Err(err) => {
            discovery.error = Some(format!("failed to inspect capability root {text}: {err}"));
            return discovery;
        }
    }
    let walked = walk(&WalkParams {
        path: wire.clone(),
        options: WalkOptions {
            max_depth: MAX_SCAN_DEPTH,
            max_directories: MAX_DIRECTORIES_PER_ROOT,
            max_entries: MAX_ENTRIES_PER_ROOT,
            follow_directory_symlinks: true,
            prune_hidden_directories: false,
        },
        sandbox: None,
    });
    let walked = match walked {
        Ok(walked) => walked,
        Err(err) => {
            discovery.error = Some(format!("failed to scan capability root {text}: {err}"));
            return discovery;
        }
    };
    let mut root = Root {
        path: wire.path().to_path_buf(),
        dialect: wire.dialect(),
        warnings: walked
            .errors
            .iter()
            .map(|error| {
                format!(
                    "failed to scan capability path {}: {}",
                    error.path, error.message
                )
            })
            .collect(),
        bytes: 0,
    };
    if walked.truncated {
        root.warnings.push(format!(
            "capability scan reached its traversal limit (root: {text})"
        ));
    }

    let files = walked
        .entries
        .into_iter()
        .filter(|entry| entry.kind == WalkEntryKind::File)
        .map(|entry| entry.path.into_path());
    let (mut skill_paths, mut manifest_paths): (Vec<PathBuf>, Vec<PathBuf>) =
        (Vec::new(), Vec::new());
    for file in files {
        if file.file_name().is_some_and(|name| name == SKILL_FILE_NAME) {
            skill_paths.push(file.clone());
        }
        if manifest_priority(&file).is_some() {
            manifest_paths.push(file);
        }
    }
    skill_paths.sort_by_cached_key(|path| to_file_uri(path.as_os_str()));
    manifest_paths.sort_by_cached_key(|path| {
        (
            plugin_root(path).map(|root| to_file_uri(root.as_os_str())),
            manifest_priority(path),
        )
    });

    let own_manifest = root.first_manifest(&root.path.clone());
    let inherited = match &own_manifest {
        Some(manifest) => Some(manifest.clone()),
        None => root
            .path
            .clone()
            .ancestors()
            .skip(1)
            .find_map(|ancestor| root.first_manifest(ancestor)),
    };
    let mut namespaces: HashSet<PathBuf> = HashSet::new();
    if let Some(manifest) = inherited {
        namespaces.extend(plugin_root(manifest.path.path()));
        discovery.namespace_manifests.push(manifest);
    }
    for path in manifest_paths {
        let Some(plugin) = plugin_root(&path) else {
            continue;
        };
        if namespaces.insert(plugin) {
            if let Some(manifest) = root.read_text(&path) {
                discovery.namespace_manifests.push(manifest);
            }
        }
    }

    if let Some(manifest) = own_manifest {
        let declared = Declarations::of(&root.path, &manifest, &mut root.warnings);
        let mcp_path = if declared.mcp_inline {
            None
        } else {
            declared
                .mcp_config
                .or_else(|| Some(root.path.join(DEFAULT_MCP_CONFIG_PATH)))
        };
        let mcp_config = mcp_path.and_then(|path| root.read_text(&path));
        let apps_config = declared.apps_config.and_then(|path| root.read_text(&path));
        discovery.plugin = Some(PluginFiles {
            manifest,
            mcp_config,
            apps_config,
        });
    }

    for path in skill_paths {
        let Some(instructions) = root.read_text(&path) else {
            continue;
        };
        let metadata = path
            .parent()
            .and_then(|dir| root.read_text(&dir.join(SKILL_METADATA_PATH)));
        discovery.skills.push(SkillFiles {
            instructions,
            metadata,
        });
    }
    discovery.warnings = root.warnings;
    discovery
}

/// The priority of a plugin manifest path (`…/.codex-plugin/plugin.json`
/// is 0), `None` for anything else.
fn manifest_priority(path: &Path) -> Option<usize> {
    if path.file_name()? != "plugin.json" {
        return None;
    }
    let dir = path.parent()?.file_name()?;
    PLUGIN_MANIFEST_PATHS
        .iter()
        .position(|relative| relative.strip_suffix("/plugin.json") == dir.to_str())
}

/// The plugin root a manifest belongs to (`root/.codex-plugin/plugin.json`
/// belongs to `root`).
fn plugin_root(manifest: &Path) -> Option<PathBuf> {
    manifest.parent()?.parent().map(Path::to_path_buf)
}

/// The files a root's manifest declares.
#[derive(Default)]
struct Declarations {
    mcp_config: Option<PathBuf>,
    /// `mcpServers` is an object: the servers are inline, no file.
    mcp_inline: bool,
    apps_config: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawDeclarations {
    #[serde(default)]
    mcp_servers: Option<Value>,
    #[serde(default)]
    apps: Option<Value>,
}

impl Declarations {
    /// Reads `manifest`; one that is not JSON declares nothing.
    fn of(root: &Path, manifest: &TextFile, warnings: &mut Vec<String>) -> Declarations {
        let Ok(raw) = serde_json::from_str::<RawDeclarations>(&manifest.contents) else {
            return Declarations::default();
        };
        let shown = manifest.path.render();
        let mut declared = |field: &str, value: &Option<Value>| {
            let Some(Value::String(path)) = value else {
                return None;
            };
            declared_path(root, path)
                .map_err(|why| {
                    warnings.push(format!("ignoring {field} in {shown}: {why}"));
                })
                .ok()
        };
        Declarations {
            mcp_config: declared("mcpServers", &raw.mcp_servers),
            mcp_inline: raw.mcp_servers.as_ref().is_some_and(Value::is_object),
            apps_config: declared("apps", &raw.apps),
        }
    }
}

/// A declared `./relative` path below `root`, or why it is ignored.
fn declared_path(root: &Path, declared: &str) -> Result<PathBuf, &'static str> {
    let relative = declared
        .strip_prefix("./")
        .ok_or("path must start with `./`")?;
    let escapes = relative.is_empty()
        || relative
            .split(['/', '\\'])
            .any(|component| component == "..")
        || relative.starts_with('/');
    if escapes {
        return Err("path must remain below the capability root");
    }
    Ok(root.join(relative))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_paths_stay_below_the_root() {
        let root = Path::new("/r");
        assert_eq!(
            declared_path(root, "./a/b.json"),
            Ok(PathBuf::from("/r/a/b.json"))
        );
        assert_eq!(
            declared_path(root, "a.json"),
            Err("path must start with `./`")
        );
        for escaping in ["./", "./../x", "./a/../../x", "./a\\..\\x", ".//etc/passwd"] {
            assert_eq!(
                declared_path(root, escaping),
                Err("path must remain below the capability root"),
                "{escaping}"
            );
        }
    }

    #[test]
    fn manifests_have_a_priority_and_a_plugin_root() {
        let p = Path::new("/r/x/.claude-plugin/plugin.json");
        assert_eq!(manifest_priority(p), Some(1));
        assert_eq!(plugin_root(p).as_deref(), Some(Path::new("/r/x")));
        assert_eq!(manifest_priority(Path::new("/r/.other/plugin.json")), None);
        assert_eq!(
            manifest_priority(Path::new("/r/.codex-plugin/x.json")),
            None
        );
    }

    #[test]
    fn too_many_roots_refuse_the_request() {
        let roots = (0..=MAX_ROOTS_PER_REQUEST)
            .map(|i| RootRequest {
                id: i.to_string(),
                path: "/nonexistent".into(),
            })
            .collect();
        assert_eq!(
            discover(DiscoverParams { roots }).unwrap_err().to_string(),
            "capability root discovery accepts at most 128 roots"
        );
    }
}
