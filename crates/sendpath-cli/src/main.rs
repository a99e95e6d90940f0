//! `sendpath`: measure every Linux send path side by side and tell which one to use.

mod agent_cmd;
mod calibrate_cmd;
mod cli;
mod http_cmd;
mod probe_cmd;
mod run_cmd;
mod sweep;
mod transfer_cmd;

use clap::Parser;
use sendpath_lab::cancel::Cancel;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    // Ctrl-C cancels the run: the current window is dropped, finished ones are written. A
    // second Ctrl-C exits at once.
    let cancel = Cancel::new();
    let on_signal = cancel.clone();
    let _ = ctrlc::set_handler(move || {
        if on_signal.cancel() {
            std::process::exit(130);
        }
    });
    let result = match &args.command {
        cli::Command::Probe(a) => probe_cmd::run(a),
        cli::Command::Stream(a) => run_cmd::stream(a, &cancel),
        cli::Command::Rr(a) => run_cmd::rr(a, &cancel),
        cli::Command::Sweep(a) => sweep::sweep(a, &cancel),
        cli::Command::Report(a) => sweep::report_cmd(a),
        cli::Command::Serve(a) => http_cmd::serve_cmd(a, &cancel),
        cli::Command::HttpLoad(a) => http_cmd::http_load_cmd(a, &cancel),
        cli::Command::Calibrate(a) => calibrate_cmd::run(a, &cancel),
        cli::Command::Transfer(a) => transfer_cmd::run(a, &cancel),
        cli::Command::Agent(a) => agent_cmd::run(a, &cancel),
        cli::Command::Sink(a) => sendpath_lab::workload::sink::run(
            a.listen,
            a.recv,
            a.connections,
            a.timeout,
            a.recv_size,
            &cancel,
        )
        .map(|_| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            // An error about a setting names the flag that sets it.
            match sendpath_lab::setting::of(&e) {
                Some(s) => eprintln!("error: {}: {e:#}", cli::flag(s)),
                None => eprintln!("error: {e:#}"),
            }
            ExitCode::from(1)
        }
    }
}
