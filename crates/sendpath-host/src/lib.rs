//! # sendpath-host
//!
//! What the `sendpath` measuring tool reads from the host besides sending: the CPUs a thread
//! may run on and pinning, network namespaces, the page cache, CPU time by thread, process and
//! host, system-call and hardware counters, the bytes the kernel copies (BPF programs built
//! from `bpf/copies.bpf.c`), a counting allocator, per-socket TCP and drop
//! counters, UDP segmentation offload, and the byte pattern its receivers verify.
//!
//! None of it is the `sendpath` library's API: a server that embeds `sendpath` needs none of
//! it. The tool and its agent share it through this crate.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod copies;
pub mod cpu;
pub mod pattern;
#[allow(unsafe_code)]
mod sys;

/// Threads and CPUs.
pub mod thread {
    pub use crate::sys::host::{allowed_cpus, enter_netns, euid, gettid, pin_current_thread};
}

/// Per-socket counters the measuring tools read around a window.
pub mod socket {
    pub use crate::sys::socket::{set_udp_segment, socket_drops, tcp_counters, TcpCounters};
    pub use crate::sys::zerocopy_rx::{MappedReceiver, Received};
}

/// Files and the page cache.
pub mod file {
    pub use crate::sys::file::{drop_page_cache, fs_is_memory_backed, fs_type, resident_fraction};
}

/// Network interfaces.
pub mod net {
    pub use crate::sys::ethtool::features;
}

/// A counting global allocator, for showing what message buffers cost in allocation.
pub mod heap {
    pub use crate::sys::alloc::{heap_counts, CountingAlloc, HeapCounts};
}

/// Performance counters (`perf_event_open`): hardware events where the CPU exposes them, and
/// a thread's system calls.
pub mod perf {
    pub use crate::sys::perf::{HwEvent, PerfCounter};
}

#[cfg(test)]
mod test_support {
    /// Skips a test that cannot run here: prints `skipped: REASON`, or fails when
    /// `SENDPATH_REQUIRE=all` (which `.ci/run` sets).
    pub(crate) fn skip(reason: &str) {
        if std::env::var("SENDPATH_REQUIRE").as_deref() == Ok("all") {
            panic!("cannot run here and SENDPATH_REQUIRE=all forbids skipping: {reason}");
        }
        println!("skipped: {reason}");
    }
}
