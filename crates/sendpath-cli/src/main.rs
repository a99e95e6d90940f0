//! `sendpath`: measure every Linux send path side by side and tell which one to use.

#![deny(unsafe_code)]

mod agent_cmd;
mod calibrate_cmd;
mod cli;
mod compare_cmd;
mod docs_cmd;
mod http_cmd;
mod probe_cmd;
mod stream_cmd;
mod sweep_cmd;
mod transfer_cmd;

use clap::Parser;
use sendpath_lab::cancel::Cancel;
use std::process::ExitCode;

/// Exits with 130 after undoing what the run set up (namespaces, child processes).
fn exit_now() -> ! {
    sendpath_lab::cancel::run_cleanups();
    std::process::exit(130)
}

/// Counts allocations, so rows can show what `--alloc fresh` costs against a pool.
#[global_allocator]
static ALLOC: sendpath_host::heap::CountingAlloc = sendpath_host::heap::CountingAlloc;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    cli::set_dry_run(args.dry_run);
    // Ctrl-C or SIGTERM cancels the run: the current window is dropped, finished ones are
    // written (after every window). Whatever the run is waiting for, the process exits within
    // a second, removing the namespaces and stopping the servers it started; a second signal
    // exits at once.
    let cancel = Cancel::new();
    let on_signal = cancel.clone();
    let _ = ctrlc::set_handler(move || {
        if on_signal.cancel() {
            exit_now();
        }
        std::thread::spawn(|| {
            std::thread::sleep(std::time::Duration::from_secs(1));
            eprintln!("interrupted: the run did not stop within 1 s; finished windows are written");
            exit_now();
        });
    });
    let result = match &args.command {
        cli::Command::Probe(a) => probe_cmd::run(a),
        cli::Command::Stream(a) => stream_cmd::stream(a, &cancel),
        cli::Command::Rr(a) => stream_cmd::rr(a, &cancel),
        cli::Command::Sweep(a) => sweep_cmd::sweep(a, &cancel),
        cli::Command::Report(a) => sweep_cmd::report_cmd(a),
        cli::Command::Serve(a) => http_cmd::serve_cmd(a, &cancel),
        cli::Command::HttpLoad(a) => http_cmd::http_load_cmd(a, &cancel),
        cli::Command::Calibrate(a) => calibrate_cmd::run(a, &cancel),
        cli::Command::Transfer(a) => transfer_cmd::run(a, &cancel),
        cli::Command::Agent(a) => agent_cmd::run(a, &cancel),
        cli::Command::Compare(a) => compare_cmd::run(a),
        cli::Command::Completions(a) => docs_cmd::completions(a),
        cli::Command::Man(a) => docs_cmd::man(a),
        cli::Command::Sink(a) => match cli::dry_run(format!("sink on {}", a.listen)) {
            Some(done) => Ok(done),
            None => sendpath_lab::workload::sink::run(
                a.listen,
                a.recv,
                a.connections,
                a.timeout,
                a.recv_size,
                &cancel,
            )
            .map(|_| ExitCode::SUCCESS),
        },
    };
    let interrupted = cancel.is_cancelled();
    match result {
        // After a signal every command exits 130, saying so once.
        Ok(code) if interrupted && code != ExitCode::from(130) => {
            eprintln!("interrupted: stopped by a signal (what finished is written)");
            ExitCode::from(130)
        }
        Ok(code) => code,
        Err(e) => {
            // An error about a setting names the flag that sets it.
            match sendpath_lab::setting::of(&e) {
                Some(s) => eprintln!("error: {}: {e:#}", cli::flag(s)),
                None => eprintln!("error: {e:#}"),
            }
            ExitCode::from(if interrupted { 130 } else { 1 })
        }
    }
}
