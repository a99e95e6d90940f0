//! `sendpath completions SHELL` and `sendpath man [COMMAND]`: shell completions and man pages,
//! generated from the same clap definitions that parse the flags, so they cannot drift.

use crate::cli::{Cli, CompletionsArgs, ManArgs};
use anyhow::{bail, Context};
use clap::CommandFactory;
use std::process::ExitCode;

/// Writes the completion script for `a.shell` to standard output.
pub(crate) fn completions(a: &CompletionsArgs) -> anyhow::Result<ExitCode> {
    if let Some(done) = crate::cli::dry_run(format!("completions for {}", a.shell)) {
        return Ok(done);
    }
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "sendpath", &mut out);
    to_stdout(out)?;
    Ok(ExitCode::SUCCESS)
}

/// The page of `sendpath` or of one of its commands, as roff; or every page into `a.out`.
pub(crate) fn man(a: &ManArgs) -> anyhow::Result<ExitCode> {
    let mut root = Cli::command();
    // Built, so a command's page carries the global flags (--dry-run) too.
    root.build();
    let cmd = match &a.command {
        None => root.clone(),
        Some(name) => match root.find_subcommand(name) {
            Some(c) => c
                .clone()
                .name(format!("sendpath-{name}"))
                .version(env!("CARGO_PKG_VERSION")),
            None => bail!(
                "no command `{name}`: give one of {}",
                root.get_subcommands()
                    .map(|c| c.get_name().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        },
    };
    if let Some(done) = crate::cli::dry_run(format!("the man page of {}", cmd.get_name())) {
        return Ok(done);
    }
    match &a.out {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("--out {}: cannot create it", dir.display()))?;
            clap_mangen::generate_to(root, dir)
                .with_context(|| format!("--out {}: writing the man pages", dir.display()))?;
            println!(
                "wrote the man pages of sendpath and its commands to {}",
                dir.display()
            );
        }
        None => {
            let mut out = Vec::new();
            clap_mangen::Man::new(cmd).render(&mut out)?;
            to_stdout(out)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes generated text to standard output, checked.
fn to_stdout(out: Vec<u8>) -> anyhow::Result<()> {
    let text = String::from_utf8(out).context("generated text is not UTF-8")?;
    sendpath_lab::export::write_text(std::path::Path::new("-"), &text)
}
