//! `sendpath sink`: receive from any TCP sender (another sendpath, iperf-like tools, `nc`).

use super::{accept_before, receive, RecvCounters, RecvMode};
use crate::cancel::Cancel;
use crate::setting::{invalid, About, Setting};
use anyhow::{bail, Context};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Accepts `connections` connections on `listen` (within `timeout`), receives each to EOF,
/// prints a line per connection. Fails if any byte mismatched in verify mode.
pub fn run(
    listen: SocketAddr,
    mode: RecvMode,
    connections: usize,
    timeout: Duration,
    read_size: usize,
    cancel: &Cancel,
) -> anyhow::Result<()> {
    let l = TcpListener::bind(listen).about(Setting::Listen, || {
        format!("cannot listen on {listen} (in use, or not a local address?)")
    })?;
    l.set_nonblocking(true)?;
    eprintln!(
        "sink: listening on {} (recv {}), waiting for {connections} connection(s), at most {:?}",
        l.local_addr()?,
        mode.name(),
        timeout
    );
    let deadline = Instant::now() + timeout;
    let mut handles = Vec::new();
    while handles.len() < connections {
        let Some((s, peer)) =
            accept_before(&l, deadline, || cancel.is_cancelled()).context("accept")?
        else {
            break;
        };
        s.set_read_timeout(Some(
            deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1)),
        ))?;
        handles.push(std::thread::spawn(move || {
            let c = RecvCounters::default();
            let t0 = Instant::now();
            let v = receive(&s, mode, &c, read_size, None);
            let got = (
                c.bytes.load(Ordering::Relaxed),
                c.mapped.load(Ordering::Relaxed),
            );
            (peer, t0.elapsed(), got, v)
        }));
    }
    if handles.is_empty() && cancel.is_cancelled() {
        eprintln!("sink: interrupted before a sender connected");
        return Ok(());
    }
    if handles.is_empty() {
        return Err(invalid(
            Setting::Timeout,
            format!("no sender connected within {timeout:?}"),
        ));
    }
    report(handles, mode, timeout)
}

type Received = (
    SocketAddr,
    Duration,
    // Bytes received, and of them mapped (`zerocopy`).
    (u64, u64),
    anyhow::Result<sendpath_host::pattern::Verifier>,
);

/// Prints a line per connection, then the run's error: connections that timed out (naming
/// the timeout), that failed, or bytes that did not match.
fn report(
    handles: Vec<std::thread::JoinHandle<Received>>,
    mode: RecvMode,
    timeout: Duration,
) -> anyhow::Result<()> {
    let (mut bad, mut first_bad) = (0, None);
    let (mut failed, mut timed_out) = (0, 0);
    for h in handles {
        let (peer, el, (bytes, mapped), v) =
            h.join().map_err(|_| anyhow::anyhow!("receiver panicked"))?;
        let gbps = bytes as f64 * 8.0 / el.as_secs_f64() / 1e9;
        match v {
            Ok(v) => {
                let check = if mode == RecvMode::Verify {
                    bad += v.mismatches;
                    let at = v.first_mismatch.map(|o| {
                        first_bad.get_or_insert((peer, o));
                        format!(", the first at byte {o}")
                    });
                    format!(
                        ", verified {} bytes, {} mismatches{}",
                        v.bytes_verified(),
                        v.mismatches,
                        at.unwrap_or_default()
                    )
                } else if mode == RecvMode::Zerocopy {
                    let share = crate::units::percent(mapped as f64 / bytes.max(1) as f64);
                    format!(", {share} mapped (TCP_ZEROCOPY_RECEIVE), the rest copied")
                } else {
                    String::new()
                };
                println!(
                    "{peer}: {bytes} bytes in {:.3} s = {gbps:.3} Gbit/s{check}",
                    el.as_secs_f64()
                );
            }
            Err(e) => {
                failed += 1;
                timed_out += usize::from(crate::setting::of(&e) == Some(Setting::Timeout));
                println!("{peer}: {bytes} bytes, then error: {e:#}");
            }
        }
    }
    if timed_out > 0 {
        return Err(invalid(
            Setting::Timeout,
            format!("{timed_out} connection(s) sent nothing for the rest of the {timeout:?} the sink waits (see above)"),
        ));
    }
    if failed > 0 {
        bail!("{failed} connection(s) ended with an error (see above)");
    }
    if let Some((peer, at)) = first_bad {
        bail!("{bad} bytes did not match the pattern, the first at byte {at} of the stream from {peer}: the sender or the path corrupted them");
    }
    Ok(())
}
