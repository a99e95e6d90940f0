//! Every file the tool reads that a user names (results, resumes, reports, profiles, tokens)
//! is read here, and every file it writes is written here ([`write_text`]: whole or not at all).
//! Reads take a regular file only (a FIFO or a device never ends, or never holds what was
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

/// Writes `text` to `path` (`-` for stdout), every byte checked: the write, the flush and,
/// for a file, its `fsync`, each failure an error naming `path`. A regular file is written
/// beside and renamed, so an interrupted write never leaves a torn file; a device or FIFO
/// that exists (`/dev/stdout`, say) is written in place, never renamed over.
pub fn write_text(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let shown = path.display();
    if path == Path::new("-") {
        let mut out = std::io::stdout().lock();
        return out
            .write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .context("cannot write to standard output");
    }
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .with_context(|| format!("cannot write {shown}"))?;
        return f
            .write_all(text.as_bytes())
            .and_then(|()| f.flush())
            .with_context(|| format!("cannot write {shown}"));
    }
    let tmp = partial(path);
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot write {shown}"));
    }
    Ok(())
}

/// `PATH.partial`, what [`write_text`] writes a file to before renaming it.
fn partial(path: &Path) -> std::path::PathBuf {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".partial");
    tmp.into()
}

/// Checks, before anything is measured, that [`write_text`] will be able to write `path`:
/// opens a device or FIFO for writing, or creates and removes the file it writes first
/// (`PATH.partial`). `-` (standard output) is always writable.
pub fn check_writable(path: &Path) -> anyhow::Result<()> {
    if path == Path::new("-") {
        return Ok(());
    }
    let shown = path.display();
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => anyhow::bail!("cannot write {shown}: it is a directory"),
        Ok(m) if !m.is_file() => {
            // A FIFO with no reader would block the open: ask without waiting.
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(path)
                .with_context(|| format!("cannot write {shown}"))?;
            return Ok(());
        }
        _ => {}
    }
    let tmp = partial(path);
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(&tmp)
        .with_context(|| format!("cannot write {shown}"))?;
    std::fs::remove_file(&tmp).with_context(|| format!("cannot write {shown}"))?;
    Ok(())
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
