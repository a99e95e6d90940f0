//! `sendpath`: measure every Linux send path side by side and tell which one to use.

mod cli;
mod measure;
mod output;
mod presets;
mod probe_cmd;
mod report;
mod results;
mod run_cmd;
mod sweep;
mod units;
mod workload;

use clap::Parser;
use std::process::ExitCode;
use std::sync::atomic::Ordering;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    // Ctrl-C stops the current repeat; finished repeats are written before exiting.
    let _ = ctrlc::set_handler(|| {
        if workload::INTERRUPTED.swap(true, Ordering::Relaxed) {
            std::process::exit(130);
        }
    });
    let result = match &args.command {
        cli::Command::Probe(a) => probe_cmd::run(a),
        cli::Command::Stream(a) => run_cmd::stream(a),
        cli::Command::Rr(a) => run_cmd::rr(a),
        cli::Command::Sweep(a) => sweep::sweep(a),
        cli::Command::Report(a) => sweep::report_cmd(a),
        cli::Command::Sink(a) => {
            workload::sink::run(a.listen, a.recv, a.connections, a.timeout, a.recv_size)
                .map(|_| ExitCode::SUCCESS)
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
