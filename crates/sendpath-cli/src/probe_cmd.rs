//! `sendpath probe`.

use crate::cli::ProbeArgs;
use sendpath::Profile;
use std::process::ExitCode;

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn bytes(b: Option<u64>) -> String {
    b.map_or("unlimited".into(), |b| {
        format!("{b} bytes ({} KiB)", b / 1024)
    })
}

/// The active host profile as probe shows it: where it lives, whether it is there, what it
/// says; or why it cannot be used.
#[derive(serde::Serialize)]
struct ActiveProfile {
    /// Where `adaptive` looks for it.
    path: Option<std::path::PathBuf>,
    /// `calibrated`, `defaults` (no file), or `unusable`.
    state: &'static str,
    /// Why the file cannot be used.
    error: Option<String>,
    /// The profile in force (the defaults when there is no file).
    profile: Option<Profile>,
}

fn active_profile() -> ActiveProfile {
    let path = Profile::active_path();
    match Profile::load_active() {
        Ok((p, Some(_))) => ActiveProfile {
            path,
            state: "calibrated",
            error: None,
            profile: Some(p),
        },
        Ok((p, None)) => ActiveProfile {
            path,
            state: "defaults",
            error: None,
            profile: Some(p),
        },
        Err(e) => ActiveProfile {
            path,
            state: "unusable",
            error: Some(e.to_string()),
            profile: None,
        },
    }
}

fn profile_lines(a: &ActiveProfile) -> Vec<String> {
    let at = a
        .path
        .as_ref()
        .map_or("(no place: set SENDPATH_PROFILE or HOME)".into(), |p| {
            p.display().to_string()
        });
    let mut v = Vec::new();
    match (&a.profile, a.state) {
        (Some(p), "calibrated") => {
            let when = p.environment().map_or(String::new(), |e| {
                format!(
                    ", measured on {} ({}, kernel {}) at unix time {}",
                    e.route, e.paths, e.kernel, e.created_unix_s
                )
            });
            v.push(format!("host profile: {at}{when}"));
            v.push(format!("  tiers: {}", p.describe_tiers().join(", ")));
            if p.zerocopy_measured_copied() {
                v.push("  zero-copy won where it has a tier although the kernel copied it: copied completions do not make adaptive back off".into());
            }
        }
        (Some(p), _) => {
            v.push(format!("host profile: none at {at}: the defaults apply (run `sendpath calibrate` to measure this host)"));
            v.push(format!(
                "  tiers: {}; zero-copy expected not to be copied, so adaptive backs off where the kernel copies",
                p.describe_tiers().join(", ")
            ));
        }
        (None, _) => v.push(format!(
            "host profile: {at} is unusable: {}",
            a.error.as_deref().unwrap_or("?")
        )),
    }
    v
}

pub(crate) fn run(a: &ProbeArgs) -> anyhow::Result<ExitCode> {
    if let Some(done) = crate::cli::dry_run("probe") {
        return Ok(done);
    }
    let mut r = sendpath_lab::probe::run();
    r.copy_counters = sendpath_lab::probe::copy_counters();
    if let Some(name) = &a.iface {
        only_interface(&mut r.offloads, name)?;
    }
    let active = active_profile();
    let routes = sendpath_lab::workload::routes::zero_copy_by_route();
    if a.json {
        let mut v = serde_json::to_value(&r)?;
        v["active_profile"] = serde_json::to_value(&active)?;
        v["zero_copy_by_route"] = serde_json::to_value(&routes)?;
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    let mut rows = uring_rows(&r);
    rows.extend(host_rows(&r));
    let w = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in rows {
        println!("{k:<w$}  {v}");
    }
    println!("\nTransmit offloads per interface (ethtool -k; zero-copy pages reach a device uncopied only with scatter-gather and checksum offload):");
    for l in offload_lines(&r.offloads) {
        println!("  {l}");
    }
    println!("\nZero-copy by route (UDP, 256 datagrams of 1400 B each):");
    for l in route_lines(&routes) {
        println!("  {l}");
    }
    println!("\nWhat to expect here:");
    for p in &r.predictions {
        println!("- {}: {}", p.path, p.text);
    }
    println!();
    for l in profile_lines(&active) {
        println!("{l}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Keeps the offloads of interface `name` only; an error listing the interfaces there are
/// when it is not one of them.
fn only_interface(
    offloads: &mut Vec<sendpath_lab::probe::Offloads>,
    name: &str,
) -> anyhow::Result<()> {
    let all: Vec<String> = offloads.iter().map(|o| o.interface.clone()).collect();
    offloads.retain(|o| o.interface == name);
    if offloads.is_empty() {
        anyhow::bail!(
            "--iface {name}: no interface of that name in this network namespace (there are: {}; `ip link` lists them)",
            all.join(", ")
        );
    }
    Ok(())
}

/// The kernel, the CPU and io_uring's operations.
fn uring_rows(r: &sendpath_lab::probe::ProbeReport) -> Vec<(&'static str, String)> {
    let u = &r.io_uring;
    vec![
        ("kernel", r.kernel_release.clone()),
        ("cpu", format!("{} x {}", r.cpus, r.cpu_model)),
        (
            "io_uring",
            if u.enabled {
                format!(
                    "enabled (io_uring_disabled={})",
                    u.disabled_sysctl.map_or("?".into(), |v| v.to_string())
                )
            } else {
                format!("unavailable: {}", u.error.as_deref().unwrap_or("?"))
            },
        ),
        ("  SEND", yes(u.send).into()),
        ("  SEND_ZC", yes(u.send_zc).into()),
        ("  SENDMSG", yes(u.sendmsg).into()),
        ("  SENDMSG_ZC", yes(u.sendmsg_zc).into()),
        (
            "  SEND_ZC usage reporting",
            yes(u.send_zc_report_usage).into(),
        ),
        (
            "  SEND_ZC to local receiver",
            copied(u.send_zc_local_copied).into(),
        ),
        ("  batched waits (MIN_TIMEOUT)", yes(u.min_wait).into()),
    ]
}

/// One line per interface: its offloads, and whether zero-copy can avoid the copy there.
fn offload_lines(offloads: &[sendpath_lab::probe::Offloads]) -> Vec<String> {
    let w = offloads
        .iter()
        .map(|o| o.interface.len())
        .max()
        .unwrap_or(0);
    offloads
        .iter()
        .map(|o| {
            if let Some(e) = &o.error {
                return format!("{:<w$}  not read: {e}", o.interface);
            }
            format!(
                "{:<w$}  sg {:<3}  csum {:<3}  tso {:<3}  gso {:<3}  udp-seg {:<3}  {}",
                o.interface,
                yes(o.scatter_gather),
                yes(o.checksum),
                yes(o.tcp_segmentation),
                yes(o.generic_segmentation),
                yes(o.udp_segmentation),
                match (o.zero_copy_possible(), o.interface.as_str()) {
                    (true, "lo") => "takes zero-copy pages, but a local receiver copies them",
                    (true, _) => "takes zero-copy pages uncopied",
                    (false, _) => "the stack copies zero-copy pages before this device",
                }
            )
        })
        .collect()
}

/// One line per route: each zero-copy path's completions and how many came back copied.
fn route_lines(routes: &[sendpath_lab::workload::routes::RouteZeroCopy]) -> Vec<String> {
    let about = |route: &str| match route {
        "loopback" => "a socket on this host",
        "netns" => "a veth pair into a namespace",
        _ => "a veth whose peer is down: frames dropped at its queue",
    };
    let mut out = Vec::new();
    for pair in routes.chunks(2) {
        let cells: Vec<String> = pair
            .iter()
            .map(|r| match (&r.error, r.copied_fraction) {
                (Some(e), _) => format!("{}: not tried ({e})", r.path),
                (None, Some(f)) => format!(
                    "{}: {} of {} completions copied",
                    r.path,
                    sendpath_lab::units::percent(f),
                    r.completions
                ),
                (None, None) => format!(
                    "{}: {} completions, copies not reported",
                    r.path, r.completions
                ),
            })
            .collect();
        let route = pair[0].route;
        out.push(format!(
            "{route:<10} ({}): {}",
            about(route),
            cells.join("; ")
        ));
    }
    out
}

/// Whether a zero-copy send to a local receiver came back copied.
fn copied(c: Option<bool>) -> &'static str {
    match c {
        Some(true) => "copied by the kernel",
        Some(false) => "not copied",
        None => "not tested",
    }
}

/// MSG_ZEROCOPY, the limits that bound pinned memory, counters, MTU and pipes.
fn host_rows(r: &sendpath_lab::probe::ProbeReport) -> Vec<(&'static str, String)> {
    vec![
        (
            "MSG_ZEROCOPY (SO_ZEROCOPY)",
            if r.msg_zerocopy.supported {
                "usable".into()
            } else {
                format!(
                    "unusable: {}",
                    r.msg_zerocopy.error.as_deref().unwrap_or("?")
                )
            },
        ),
        (
            "  MSG_ZEROCOPY to local receiver",
            copied(r.msg_zerocopy.local_copied).into(),
        ),
        ("optmem_max", bytes(r.optmem_max_bytes)),
        ("RLIMIT_MEMLOCK soft", bytes(r.memlock.soft_bytes)),
        ("RLIMIT_MEMLOCK hard", bytes(r.memlock.hard_bytes)),
        (
            "memlock exempt",
            match (r.memlock.exempt, r.memlock.soft_bytes) {
                (true, _) => "yes (CAP_IPC_LOCK): zero-copy sends pin as much as they like".into(),
                (false, None) => "no, but the limit is unlimited".into(),
                (false, Some(b)) => format!(
                    "no: zero-copy sends in flight may pin about {} MiB of pages at once (all of this user's sockets); past it they go by copy (ENOBUFS, ENOMEM). Raise `ulimit -l` or run as root for more",
                    b >> 20
                ),
            },
        ),
        (
            "hardware counters",
            if r.hw_counters.available {
                "available (cycles, instructions, LLC misses)".into()
            } else {
                format!(
                    "unavailable: {}",
                    r.hw_counters.reason.as_deref().unwrap_or("?")
                )
            },
        ),
        (
            "loopback MTU",
            r.loopback_mtu.map_or("?".into(), |m| m.to_string()),
        ),
        ("pipe-max-size", bytes(r.pipe_max_size_bytes)),
        ("kernel copy counters", copy_counters(&r.copy_counters)),
    ]
}

/// Which copies `--metrics copies` counts here, and why not the others.
fn copy_counters(c: &[sendpath_lab::probe::CopyCounterState]) -> String {
    let line = |c: &sendpath_lab::probe::CopyCounterState| match &c.unavailable {
        None => format!("{}: counted ({})", c.counts, c.hooks),
        Some(why) => format!("{}: not counted ({}): {why}", c.counts, c.hooks),
    };
    c.iter().map(line).collect::<Vec<_>>().join("; ")
}
