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
        Some(name) => match root
            .find_subcommand(name)
            .filter(|c| c.get_name() != "help")
        {
            Some(c) => page_of(c),
            None => bail!(
                "no command `{name}`: give one of {}",
                root.get_subcommands()
                    .map(|c| c.get_name().to_string())
                    .filter(|n| n != "help")
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
            // sendpath.1, then sendpath-COMMAND.1 for each command (not clap's `help`).
            let commands = root.get_subcommands().filter(|c| c.get_name() != "help");
            let pages = std::iter::once(("sendpath".to_string(), root.clone()))
                .chain(commands.map(|c| (format!("sendpath-{}", c.get_name()), page_of(c))));
            for (name, cmd) in pages {
                let mut out = Vec::new();
                clap_mangen::Man::new(cmd).render(&mut out)?;
                let text = String::from_utf8(out).context("a man page is not UTF-8")?;
                sendpath_lab::files::write_text(&dir.join(format!("{name}.1")), &text)?;
            }
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
    sendpath_lab::files::write_text(std::path::Path::new("-"), &text)
}

/// A command as its own page: named `sendpath-COMMAND`, with sendpath's version.
fn page_of(c: &clap::Command) -> clap::Command {
    c.clone()
        .name(format!("sendpath-{}", c.get_name()))
        .version(env!("CARGO_PKG_VERSION"))
}
