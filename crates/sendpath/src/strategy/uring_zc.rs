//! `uring-zc`: io_uring SEND_ZC on the [`UringDriver`](crate::UringDriver), with usage
//! reporting (`IORING_SEND_ZC_REPORT_USAGE`) when the kernel has it, so a notification says
//! whether the kernel copied after all. The ring is probed at open time: without SEND_ZC the
//! path runs as `uring` (each send counted as an `unsupported` fallback); without io_uring at
//! all, as `copy`.

use super::uring::UringPath;
use super::SendPath;
use crate::sys::uring::{OpSupport, SendRing};
use crate::{probe, Options, Result, Socket, Strategy};

/// What to run, decided from the probe alone.
#[derive(Debug, PartialEq, Eq)]
enum Plan {
    /// SEND_ZC, with or without usage reporting; the note says what is missing.
    SendZc {
        report_usage: bool,
        note: Option<String>,
    },
    /// SEND only: run as `uring`, counting `unsupported` fallbacks.
    Uring(String),
    /// No io_uring: run as `copy`, counting `unsupported` fallbacks.
    Copy(String),
}

fn plan(ops: std::result::Result<OpSupport, String>, want_usage: bool, usage_ok: bool) -> Plan {
    let ops = match ops {
        Ok(o) => o,
        Err(e) => {
            return Plan::Copy(format!(
                "io_uring unavailable ({e}): running as `copy`, every send counted as an `unsupported` fallback"
            ))
        }
    };
    if !ops.send_zc {
        if ops.send {
            return Plan::Uring("IORING_OP_SEND_ZC not supported by this kernel: running as `uring`, every send counted as an `unsupported` fallback".into());
        }
        return Plan::Copy("neither IORING_OP_SEND_ZC nor IORING_OP_SEND is supported: running as `copy`, every send counted as an `unsupported` fallback".into());
    }
    let report_usage = want_usage && usage_ok;
    Plan::SendZc {
        report_usage,
        note: (want_usage && !usage_ok).then(|| {
            "IORING_SEND_ZC_REPORT_USAGE not supported: notifications cannot say whether the kernel copied".into()
        }),
    }
}

pub(super) fn open(sock: Socket, opts: &Options) -> Result<Box<dyn SendPath>> {
    let ops = SendRing::new(8, 16)
        .and_then(|r| r.probe())
        .map_err(|e| e.to_string());
    let usage_ok = ops.as_ref().is_ok_and(|o| o.send_zc) && probe::send_zc_report_usage_supported();
    Ok(match plan(ops, opts.uring_report_usage, usage_ok) {
        Plan::Copy(note) => {
            let mut c = super::copy::Copy::new(sock);
            c.fallback_note(note);
            Box::new(c)
        }
        // Without SEND_ZC the driver's state has no zero-copy settings, so each zero-copy
        // choice is counted as an `unsupported` fallback.
        Plan::Uring(note) => Box::new(UringPath::new(
            "uring",
            sock,
            opts,
            Strategy::UringZc,
            Some(note),
        )?),
        Plan::SendZc { report_usage, note } => {
            let opts = Options {
                uring_report_usage: report_usage,
                ..opts.clone()
            };
            Box::new(UringPath::new(
                "uring-zc",
                sock,
                &opts,
                Strategy::UringZc,
                note,
            )?)
        }
    })
}

/// `uring-zc` in the table of paths.
pub(super) const INFO: super::PathInfo = super::PathInfo {
    name: "uring-zc",
    source: super::Source::Memory,
    avoids_send_copy: true,
    has_zc_completions: true,
    uses_fields: false,
    copies: Some(super::copies::PAGES_BY_REFERENCE),
    waits: crate::socket::Waits::OnTheRing,
    open: |sock, opts| open(sock, opts),
};

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(send: bool, send_zc: bool) -> std::result::Result<OpSupport, String> {
        Ok(OpSupport {
            send,
            send_zc,
            ..Default::default()
        })
    }

    #[test]
    fn missing_ops_fall_back_and_say_why() {
        assert!(
            matches!(plan(Err("ENOSYS".into()), true, false), Plan::Copy(n) if n.contains("ENOSYS"))
        );
        assert!(
            matches!(plan(ops(true, false), true, false), Plan::Uring(n) if n.contains("SEND_ZC"))
        );
        assert!(matches!(
            plan(ops(false, false), true, false),
            Plan::Copy(_)
        ));
        assert_eq!(
            plan(ops(true, true), true, true),
            Plan::SendZc {
                report_usage: true,
                note: None
            }
        );
        assert!(matches!(
            plan(ops(true, true), true, false),
            Plan::SendZc { report_usage: false, note: Some(n) } if n.contains("REPORT_USAGE")
        ));
        assert_eq!(
            plan(ops(true, true), false, true),
            Plan::SendZc {
                report_usage: false,
                note: None
            }
        );
    }
}
