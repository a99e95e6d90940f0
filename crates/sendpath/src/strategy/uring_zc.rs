//! `uring-zc`: io_uring SEND_ZC on the [`UringEngine`](super::uring::UringEngine), with usage
//! reporting (`IORING_SEND_ZC_REPORT_USAGE`) when the kernel has it, so a notification says
//! whether the kernel copied after all. The ring is probed at open time: without SEND_ZC the
//! path runs as `uring` (each send counted as an `unsupported` fallback); without io_uring at
//! all, as `copy`.

use super::uring::{UringEngine, ZcMode};
use super::SendPath;
use crate::sys::uring::SendRing;
use crate::{probe, Options, Result};
use std::net::TcpStream;

pub(super) fn open(sock: TcpStream, opts: &Options) -> Result<Box<dyn SendPath>> {
    let ops = SendRing::new(8, 16).and_then(|r| r.probe());
    let ops = match ops {
        Ok(ops) => ops,
        Err(e) => {
            let mut c = super::copy::Copy::new(sock);
            c.fallback_note(format!(
                "io_uring unavailable ({e}): running as `copy`, every send counted as an `unsupported` fallback"
            ));
            return Ok(Box::new(c));
        }
    };
    if !ops.send_zc {
        let e = UringEngine::new("uring", sock, opts, None)?.with_note(
            "IORING_OP_SEND_ZC not supported by this kernel: running as `uring`, every send counted as an `unsupported` fallback".into(),
            true,
        );
        return Ok(Box::new(e));
    }
    let report_usage = opts.uring_report_usage && probe::send_zc_report_usage_supported();
    let mut e = UringEngine::new(
        "uring-zc",
        sock,
        opts,
        Some(ZcMode {
            report_usage,
            limits: opts.inflight,
        }),
    )?;
    if opts.uring_report_usage && !report_usage {
        e = e.with_note(
            "IORING_SEND_ZC_REPORT_USAGE not supported: notifications cannot say whether the kernel copied".into(),
            false,
        );
    }
    Ok(Box::new(e))
}
