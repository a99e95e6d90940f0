//! `sendpath agent`.

use crate::cli::AgentArgs;
use sendpath_lab::agent::{self, AgentConfig};
use sendpath_lab::cancel::Cancel;
use std::process::ExitCode;
use std::time::Duration;

pub(crate) fn run(a: &AgentArgs, cancel: &Cancel) -> anyhow::Result<ExitCode> {
    let token = match &a.token_file {
        Some(p) => Some(sendpath_lab::remote::read_token(p)?),
        None => None,
    };
    let cfg = AgentConfig {
        listen: a.listen,
        token,
        max_sessions: a.max_sessions as usize,
        max_session: a.max_session,
        max_receive: a.max_receive,
        // A client is silent for a whole window between two samples: as long as a receive.
        idle: a.max_receive + Duration::from_secs(30),
        hello_timeout: a.hello_timeout,
    };
    if let Some(done) = crate::cli::dry_run(format!("agent on {}", a.listen)) {
        return Ok(done);
    }
    agent::serve(&cfg, cancel, a.duration)?;
    Ok(ExitCode::SUCCESS)
}
