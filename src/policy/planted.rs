//! Symlinks an earlier sandboxed command could have planted. A place is a
//! directory sandboxed commands can usually write (a workspace root, `/tmp`,
//! `$TMPDIR`, a writable root of this or an earlier policy); a symlink lying
//! strictly inside one may have been made by such a command, and the
//! sandbox cannot tell it from one the user made. [`Places`] finds the
//! first such link on the way to a path, resolving it as the kernel does
//! (links followed, `..` physical), so a grant reached through it can grant
//! nothing. This module only reads the filesystem (`lstat`, `readlink`,
//! `realpath`); deciding what a found link means is `resolve`'s job.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fmt;
use std::path::{Component, Path, PathBuf};

use super::model::normalize;

/// The kernel's own bound on symlinks followed in one resolution (ELOOP).
const MAX_LINK_HOPS: usize = 40;

/// A symlink found on the way to a path, and the place it lies in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlantedLink {
    /// Where the link is (its directory resolved, the link itself not).
    pub link: PathBuf,
    /// The place that holds it, as the place was given.
    pub place: PathBuf,
}

/// A grant that grants nothing because a planted link lies on its way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DroppedGrant {
    /// The granted path, as the policy names it.
    pub path: PathBuf,
    pub link: PlantedLink,
}

impl fmt::Display for DroppedGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} grants nothing: it is reached through the symlink {} inside {}, where an earlier sandboxed command could have planted it",
            self.path.display(),
            self.link.link.display(),
            self.link.place.display()
        )
    }
}

/// Whether `path` may count as a place: absolute and not `/` itself (every
/// system symlink, `/lib` or `/var/run`, would then void grants).
pub fn usable_place(path: &Path) -> Option<PathBuf> {
    let path = normalize(path);
    (path.is_absolute() && path != Path::new("/")).then_some(path)
}

/// Directories where an earlier sandboxed command could have written, each
/// in its given and its canonical spelling.
#[derive(Debug, Clone, Default)]
pub struct Places {
    /// (spelling, the place as given).
    spellings: Vec<(PathBuf, PathBuf)>,
}

impl Places {
    pub fn new<'a>(places: impl IntoIterator<Item = &'a PathBuf>) -> Self {
        let mut spellings = Vec::new();
        for place in places {
            let given = normalize(place);
            if let Ok(real) = given.canonicalize() {
                if real != given {
                    spellings.push((real, given.clone()));
                }
            }
            spellings.push((given.clone(), given));
        }
        Self { spellings }
    }

    /// The place `link` lies strictly inside, if any.
    fn holding(&self, link: &Path) -> Option<&Path> {
        self.spellings
            .iter()
            .find(|(spelling, _)| link.starts_with(spelling) && link != spelling)
            .map(|(_, given)| given.as_path())
    }

    /// The first symlink on the way to `path` (its last component
    /// included) that lies strictly inside a place. Links outside every
    /// place are followed, relative targets against their directory and
    /// `..` physically, as the kernel resolves them; the walk stops where
    /// the path stops existing (nothing further can be a link) and after
    /// the kernel's 40 hops (the path cannot be opened then).
    pub fn first_planted_link(&self, path: &Path) -> Option<PlantedLink> {
        enum Step {
            Up,
            Name(OsString),
        }
        fn steps(path: &Path) -> impl DoubleEndedIterator<Item = Step> + '_ {
            path.components().filter_map(|c| match c {
                Component::ParentDir => Some(Step::Up),
                Component::Normal(name) => Some(Step::Name(name.to_owned())),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
            })
        }
        if self.spellings.is_empty() {
            return None;
        }
        // `done` never holds a symlink: it is where the walk physically is.
        let mut done = PathBuf::from("/");
        let mut todo: VecDeque<Step> = steps(&normalize(path)).collect();
        let mut hops = 0;
        while let Some(step) = todo.pop_front() {
            let name = match step {
                Step::Up => {
                    done.pop();
                    continue;
                }
                Step::Name(name) => name,
            };
            let next = done.join(&name);
            let meta = next.symlink_metadata().ok()?;
            if !meta.file_type().is_symlink() {
                done = next;
                continue;
            }
            if let Some(place) = self.holding(&next) {
                return Some(PlantedLink {
                    link: next,
                    place: place.to_path_buf(),
                });
            }
            hops += 1;
            if hops > MAX_LINK_HOPS {
                return None;
            }
            let target = std::fs::read_link(&next).ok()?;
            if target.is_absolute() {
                done = PathBuf::from("/");
            }
            for step in steps(&target).rev() {
                todo.push_front(step);
            }
        }
        None
    }
}
