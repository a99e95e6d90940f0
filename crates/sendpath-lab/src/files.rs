//! Every file the tool reads that a user names (results, resumes, reports, profiles, tokens)
//! is read here: a regular file only (a FIFO or a device never ends, or never holds what was
//! asked), and no larger than what such a file can be, so a wrong path is refused at once
//! with bounded memory instead of filling it.

use anyhow::{bail, Context};
use std::io::Read;
use std::path::Path;

/// The largest results file read (a sweep of every path, size and thread count over many
/// rounds writes tens of MiB).
pub const MAX_RESULTS: u64 = 256 << 20;
/// The largest profile or token file read.
pub const MAX_SMALL: u64 = 1 << 20;

/// The text of `path`, a regular file of at most `limit` bytes holding `what` (named in the
/// errors, e.g. "sendpath results file").
pub fn read_bounded(path: &Path, limit: u64, what: &str) -> anyhow::Result<String> {
    let shown = path.display();
    let meta = std::fs::metadata(path).with_context(|| format!("cannot read {shown}"))?;
    let kind = meta.file_type();
    if !kind.is_file() {
        bail!(
            "{shown} is {}, not a file: give the path of a {what}",
            describe(&kind)
        );
    }
    let too_big = || {
        anyhow::anyhow!(
            "{shown} is larger than {} MiB: not a {what}",
            limit.div_ceil(1 << 20)
        )
    };
    if meta.len() > limit {
        return Err(too_big());
    }
    let f = std::fs::File::open(path).with_context(|| format!("cannot read {shown}"))?;
    let mut text = String::new();
    f.take(limit + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("cannot read {shown} (is it text?)"))?;
    // It grew while being read.
    if text.len() as u64 > limit {
        return Err(too_big());
    }
    Ok(text)
}

/// What a file that is not a regular file is, in a word.
fn describe(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    match () {
        _ if kind.is_dir() => "a directory",
        _ if kind.is_fifo() => "a FIFO",
        _ if kind.is_char_device() => "a character device",
        _ if kind.is_block_device() => "a block device",
        _ if kind.is_socket() => "a socket",
        _ => "not a regular file",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_fifos_and_oversized_files_are_refused_naming_why() {
        let dir = tempfile::tempdir().unwrap();
        let zero = dir.path().join("results.json");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let t0 = std::time::Instant::now();
        let e = read_bounded(&zero, MAX_RESULTS, "sendpath results file").unwrap_err();
        assert!(
            e.to_string().contains("a character device, not a file"),
            "{e}"
        );
        assert!(t0.elapsed() < std::time::Duration::from_secs(1));
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let e = read_bounded(&fifo, MAX_SMALL, "profile").unwrap_err();
        assert!(e.to_string().contains("a FIFO"), "{e}");
        let big = dir.path().join("big.json");
        std::fs::write(&big, vec![b' '; 2 << 20]).unwrap();
        let e = read_bounded(&big, MAX_SMALL, "profile").unwrap_err();
        assert!(
            e.to_string().contains("larger than 1 MiB: not a profile"),
            "{e}"
        );
        std::fs::write(&big, "{}").unwrap();
        assert_eq!(read_bounded(&big, MAX_SMALL, "profile").unwrap(), "{}");
        let e = read_bounded(dir.path(), MAX_SMALL, "profile").unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
    }
}
