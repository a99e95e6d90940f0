//! # sendpath-lab
//!
//! The measurement side of sendpath, shared by the `sendpath` command and anything else that
//! runs the same workloads (a remote agent, a test harness): workloads over real sockets, the
//! runner that measures points in interleaved rounds, the typed results every exporter reads,
//! the exporters (JSON, CSV, Markdown, HTML) and the paired-round analysis behind a
//! recommendation.
//!
//! ```text
//! plan (points x rounds) -> runner::Recorder::run_rounds -> workload::*::run_once
//!     -> results::Repeat -> results::Row -> results::Results -> export::Exporter
//! ```

pub mod agent;
pub mod analysis;
pub mod calibrate;
pub mod cancel;
pub mod export;
pub mod http;
pub mod limits;
pub mod measure;
pub mod remote;
pub mod render;
pub mod results;
pub mod study;
pub mod topology;
pub mod traffic;
pub mod units;
pub mod workload;
