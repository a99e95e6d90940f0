//! `adaptive`: each send takes the path the host profile says wins at its size (copy with
//! `send()` below the crossover, `sendmsg(MSG_ZEROCOPY)` above it, `sendfile()` for file data),
//! backs off from zero-copy when completions come back copied on a route the profile expected
//! to deliver zero-copy, and halves its in-flight cap on `ENOBUFS`. The decisions are
//! [`policy::adaptive`](crate::policy::adaptive)'s; the sending is the `msg-zerocopy` path's,
//! so buffers come back only once the kernel has released them.

use super::msg_zerocopy::MsgZerocopy;
use crate::policy::adaptive::Adaptive;

/// `adaptive` in the table of paths.
pub(super) const INFO: super::PathInfo = super::PathInfo {
    name: "adaptive",
    source: super::Source::Memory,
    avoids_send_copy: true,
    has_zc_completions: true,
    uses_fields: false,
    open: |sock, opts| {
        let profile = opts
            .profile
            .as_deref()
            .cloned()
            .unwrap_or_else(crate::profile::Profile::defaults);
        let decide = Adaptive::new(profile, opts.adaptive);
        Ok(Box::new(MsgZerocopy::adaptive(
            sock,
            opts.inflight,
            decide,
            opts.file.clone(),
        )))
    },
};
