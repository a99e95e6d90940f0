//! # sendpath-lab
//!
//! The measurement side of sendpath, shared by the `sendpath` command and anything else that
//! runs the same workloads (a remote agent, a test harness): workloads over real sockets, the
//! runner that measures points in interleaved rounds, the typed results every exporter reads,
//! the exporters (JSON, CSV, Markdown, HTML) and the paired-round analysis behind a
//! recommendation.
//!
//! ```text
//! study::*::plan -> study::*::run -> workload::*::run_once -> results (typed rows)
//!     -> export (JSON, CSV) and study::*::summary (Markdown, HTML over render)
//! ```
//!
//! The modules form layers, each importing only those below it (`tests/layout.rs` checks it):
//! units, cancel, topology, traffic, limits, probe; results; measure, analysis, export, render;
//! http, remote; workload; study, calibrate; agent.

#![deny(unsafe_code)]

pub mod agent;
pub mod cancel;
pub mod compare;
pub mod files;
pub mod http;
pub mod limits;
pub mod measure;
pub mod probe;
pub mod remote;
pub(crate) mod render;
pub mod setting;
pub mod study;
pub mod topology;
pub mod traffic;
pub mod units;
pub mod window;
pub mod workload;

#[cfg(test)]
mod fuzz;
#[cfg(test)]
#[allow(unsafe_code)]
mod sys;
