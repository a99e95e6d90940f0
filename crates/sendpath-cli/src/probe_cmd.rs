//! `sendpath probe`.

use crate::cli::ProbeArgs;
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

pub(crate) fn run(a: &ProbeArgs) -> anyhow::Result<ExitCode> {
    let r = sendpath::probe::run();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(ExitCode::SUCCESS);
    }
    let u = &r.io_uring;
    let copied = |c: Option<bool>| match c {
        Some(true) => "copied by the kernel",
        Some(false) => "not copied",
        None => "not tested",
    };
    let rows: Vec<(&str, String)> = vec![
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
        ("  SENDMSG_ZC", yes(u.sendmsg_zc).into()),
        (
            "  SEND_ZC usage reporting",
            yes(u.send_zc_report_usage).into(),
        ),
        (
            "  SEND_ZC to local receiver",
            copied(u.send_zc_local_copied).into(),
        ),
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
            if r.memlock.exempt {
                "yes (CAP_IPC_LOCK)".into()
            } else {
                "no: pinned pages are charged to RLIMIT_MEMLOCK".into()
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
    ];
    let w = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in rows {
        println!("{k:<w$}  {v}");
    }
    println!("\nWhat to expect here:");
    for p in &r.predictions {
        println!("- {}: {}", p.path, p.text);
    }
    Ok(ExitCode::SUCCESS)
}
