//! The server study's results file, `http-results.json`.

use crate::http::load::LatencyUs;
use crate::http::serve::ServeReport;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One measured window.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Measurement {
    /// `sendpath-uring`, `nginx`, ...
    pub server: String,
    /// Body bytes per response.
    pub body_bytes: usize,
    /// Connections.
    pub connections: usize,
    /// Round (from 1).
    pub round: u32,
    /// `wrk` or `http-load`.
    pub load: String,
    /// Open-loop rate, requests/s; null for closed loop.
    pub rate_per_s: Option<f64>,
    /// Requests per second the load tool counted.
    pub requests_per_s: f64,
    /// Latency percentiles; null when not measured.
    pub latency_us: Option<LatencyUs>,
    /// Mean latency, microseconds (wrk's `Latency Avg`); null when not measured, or in files
    /// written before it was recorded.
    #[serde(default)]
    pub latency_mean_us: Option<f64>,
    /// Errors the load tool counted, by kind.
    pub errors: BTreeMap<String, u64>,
    /// Server CPU (all its processes and threads) over the measured window, seconds; null
    /// when `/proc` could not be read.
    pub server_cpu_s: Option<f64>,
    /// `server_cpu_s` per request, microseconds.
    pub server_cpu_us_per_request: Option<f64>,
    /// What `serve` reported (its copied fraction and fallbacks); null for nginx.
    pub serve: Option<ServeReport>,
}

/// Everything the study measured, with the nginx configuration it used.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StudyResults {
    /// The host.
    pub environment: crate::window::Environment,
    /// The nginx configuration for the largest connection count and the first body, when
    /// nginx ran (each window's port differs; the last one written is `nginx.conf`).
    pub nginx_config: Option<String>,
    /// Every window, in the order measured.
    pub measurements: Vec<Measurement>,
    /// The http-load against wrk cross-check: ratios of requests/s per paired round.
    pub wrk_check_ratios: Vec<f64>,
    /// The run stopped after a signal: windows are missing (the summary counts them).
    #[serde(default)]
    pub interrupted: bool,
}
