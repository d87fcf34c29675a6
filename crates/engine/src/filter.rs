//! `--include`/`--exclude` globs as an [`EntryFilter`]: the same rules for `cp`,
//! `sync` and `watch` on a client and for the filter a server applies to a pull.

use crate::EntryFilter;

/// A set of globs: those without '/' match an entry's name, the others its whole path
/// below the operand.
struct Globs {
    names: globset::GlobSet,
    paths: globset::GlobSet,
}

impl Globs {
    fn new(patterns: &[String], flag: &str) -> Result<Globs, String> {
        let mut names = globset::GlobSetBuilder::new();
        let mut paths = globset::GlobSetBuilder::new();
        for p in patterns {
            let glob = globset::GlobBuilder::new(p)
                .literal_separator(true)
                .build()
                .map_err(|e| format!("{flag} '{p}': {e}"))?;
            if p.contains('/') {
                paths.add(glob);
            } else {
                names.add(glob);
            }
        }
        let done = |b: globset::GlobSetBuilder| b.build().map_err(|e| format!("{flag}: {e}"));
        Ok(Globs {
            names: done(names)?,
            paths: done(paths)?,
        })
    }

    fn matches(&self, rel: &std::path::Path) -> bool {
        let name = rel.file_name().unwrap_or_default();
        self.names.is_match(name) || self.paths.is_match(rel)
    }

    fn is_empty(&self) -> bool {
        self.names.is_empty() && self.paths.is_empty()
    }
}

/// The entry filter of `--include`/`--exclude`: a file is sent when it matches an
/// include (if there are any) and no exclude; a directory is entered unless excluded.
pub fn glob_filter(include: &[String], exclude: &[String]) -> Result<Option<EntryFilter>, String> {
    if include.is_empty() && exclude.is_empty() {
        return Ok(None);
    }
    let include = Globs::new(include, "--include")?;
    let exclude = Globs::new(exclude, "--exclude")?;
    Ok(Some(EntryFilter(std::sync::Arc::new(
        move |rel: &[u8], is_dir: bool| {
            use std::os::unix::ffi::OsStrExt;
            let rel = std::path::Path::new(std::ffi::OsStr::from_bytes(rel));
            if exclude.matches(rel) {
                return false;
            }
            is_dir || include.is_empty() || include.matches(rel)
        },
    ))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_names_or_paths_and_excludes_win() {
        let f = glob_filter(&["*.h5".into(), "keep/**".into()], &["tmp*".into()])
            .unwrap()
            .unwrap();
        assert!(f.accepts(b"top/run1/scan.h5", false));
        assert!(f.accepts(b"top/keep/a/b.txt", false));
        assert!(!f.accepts(b"top/run1/notes.txt", false));
        assert!(f.accepts(b"top/run1", true), "directories are entered");
        assert!(
            !f.accepts(b"top/tmp1", true),
            "an excluded directory is not"
        );
        assert!(!f.accepts(b"top/run1/tmp.h5", false));
        assert!(f.accepts(b"top", true), "the operand itself is always sent");
        assert!(glob_filter(&[], &[]).unwrap().is_none());
        assert!(glob_filter(&["a[".into()], &[]).is_err());
    }
}
