//! TCP congestion control per connection (`--congestion`, as `iperf3 -C`). The sender's
//! algorithm decides whether the kernel paces a stream: `bbr` paces every segment, with a
//! timer per connection where no `fq` qdisc does it (loopback, whose device has no qdisc), so a
//! loopback stream under `bbr` runs at the rate bbr settles on, not at the rate its send path
//! allows, and that rate differs from one connection to the next. `cubic` and `reno` send as
//! fast as the window lets them.

use crate::setting::{invalid, Setting};
use anyhow::Context;
use std::os::fd::AsFd;

const DEFAULT: &str = "/proc/sys/net/ipv4/tcp_congestion_control";
const AVAILABLE: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";

/// The algorithm new TCP connections of this network namespace get
/// (`net.ipv4.tcp_congestion_control`); `None` when it cannot be read. Read once per process:
/// every row of a run asks (a sweep's rows are made again to key each window).
pub fn system_default() -> Option<String> {
    static ONCE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    ONCE.get_or_init(|| read(DEFAULT)).clone()
}

/// What a row records: `name` when the run set it, else the namespace's default.
pub fn in_effect(name: Option<&str>) -> Option<String> {
    name.map(str::to_owned).or_else(system_default)
}

/// Whether connections under `name` (or the default when `None`) are paced: bbr. Without an
/// `fq` qdisc (loopback, a namespace's veth) the kernel paces each with a timer of its own.
pub fn paces(name: Option<&str>) -> bool {
    in_effect(name).as_deref() == Some("bbr")
}

/// Sets `name` on `sock` (`setsockopt(TCP_CONGESTION)`) and reads it back.
pub fn set(sock: impl AsFd, name: &str) -> anyhow::Result<()> {
    rustix::net::sockopt::set_tcp_congestion(&sock, name).map_err(|e| unavailable(name, e))?;
    let got = rustix::net::sockopt::tcp_congestion(&sock)
        .context("getsockopt(TCP_CONGESTION) after setting it")?;
    if got != name {
        return Err(invalid(
            Setting::Congestion,
            format!("{name}: the kernel gave the connection `{got}` instead"),
        ));
    }
    Ok(())
}

/// [`set`] when a `name` is given (`--congestion`); without one the connection keeps the
/// host's default.
pub fn apply(sock: impl AsFd, name: Option<&str>) -> anyhow::Result<()> {
    name.map_or(Ok(()), |n| set(sock, n))
}

/// Refuses, before anything runs, an algorithm this kernel cannot give a connection.
pub fn check(name: &str) -> anyhow::Result<()> {
    use rustix::net::{socket, AddressFamily, SocketType};
    let sock = socket(AddressFamily::INET, SocketType::STREAM, None)
        .context("a TCP socket to check the congestion control on")?;
    set(&sock, name)
}

fn unavailable(name: &str, e: rustix::io::Errno) -> anyhow::Error {
    let have = read(AVAILABLE).unwrap_or_else(|| "(unknown)".into());
    invalid(
        Setting::Congestion,
        format!(
            "{name}: this kernel cannot set it on a connection ({e}); available here: {have} \
             (net.ipv4.tcp_available_congestion_control; `modprobe tcp_{name}` may add it)"
        ),
    )
}

fn read(path: &str) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reno_is_always_there_and_a_made_up_name_is_refused_with_the_list() {
        check("reno").expect("reno is built into every kernel");
        let e = check("no-such-cc").unwrap_err();
        assert_eq!(crate::setting::of(&e), Some(Setting::Congestion));
        let e = e.to_string();
        assert!(e.starts_with("no-such-cc: "), "{e}");
        assert!(e.contains("available here:") && e.contains("reno"), "{e}");
    }

    #[test]
    fn a_row_records_what_was_set_or_the_default() {
        assert_eq!(in_effect(Some("reno")).as_deref(), Some("reno"));
        assert_eq!(in_effect(None), system_default());
    }
}
