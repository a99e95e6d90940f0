//! `sendpath calibrate`: the library's [`Calibration`] (the plan of interleaved rounds, the
//! tie-break rounds and the rule that makes a [`Profile`]) with each window measured as a
//! stream point of the lab: one connection on the route (loopback, a namespace, the black-hole
//! route), the receiver copying, one buffer per message, every window recorded in the
//! results like any other run's.

use crate::measure::Meter;
use crate::study::rows::{Point, Recorder};
use crate::traffic::mix::Alloc;
use crate::workload::stream::StreamPoint;
use crate::workload::{default_recv_size, RecvMode};
use sendpath::{Calibration, Profile, Window, WindowResult};
use std::time::Duration;

/// The margin by which zero-copy must win to get a tier: 3% (the library's rule).
pub const MARGIN: f64 = 0.03;

/// Where and how a calibration sends: TCP on loopback by default; UDP (`--proto udp`) on the
/// black-hole route measures zero-copy that the kernel does not copy.
#[derive(Debug, Clone, Default)]
pub struct Route {
    /// The transport.
    pub proto: crate::traffic::datagram::Protocol,
    /// The namespace (`--topology netns` or `blackhole`); loopback when `None`.
    pub netns: Option<std::sync::Arc<crate::topology::Netns>>,
    /// SEND_ZC from registered buffers (`--fixed-buffers`).
    pub fixed_buffers: bool,
    /// Which paths write their messages in place (`--arena`).
    pub arena: crate::window::Arena,
}

impl Route {
    /// In words, as the profile of `sizes` records it: `loopback uring-zc-in-place`
    /// (`uring-zc-in-place-to-64KiB` when the larger sizes' windows were owned), `udp
    /// blackhole fixed-buffers`.
    pub fn describe(&self, sizes: &[usize]) -> String {
        let mut v = Vec::new();
        if self.proto == crate::traffic::datagram::Protocol::Udp {
            v.push("udp".to_string());
        }
        let kind = self
            .netns
            .as_ref()
            .map_or("loopback", |n| n.info().kind.as_str());
        v.push(kind.to_string());
        if self.fixed_buffers {
            v.push("fixed-buffers".into());
        }
        let zc = sendpath::Strategy::UringZc;
        let in_place: Vec<usize> = (sizes.iter().copied())
            .filter(|&s| self.arena.config_for(zc, self.fixed_buffers, s).is_some())
            .collect();
        match in_place.iter().max() {
            Some(_) if in_place.len() == sizes.len() => v.push("uring-zc-in-place".into()),
            Some(&m) => v.push(format!(
                "uring-zc-in-place-to-{}",
                crate::units::fmt_size(m)
            )),
            None => {}
        }
        v.join(" ")
    }
}

/// The stream point of one window of a calibration on `route`.
pub fn point(w: &Window, duration: Duration, warmup: Duration, route: &Route) -> Point {
    let size = w.size;
    Point::Stream(StreamPoint {
        strategy: w.path,
        size,
        threads: 1,
        connections: 1,
        fields: 1,
        recv: RecvMode::Copy,
        recv_size: default_recv_size(size),
        duration,
        warmup,
        connect: None,
        cpus: None,
        cold: false,
        opts: sendpath::Options {
            uring_fixed_buffers: route.fixed_buffers,
            uring_arena: route.arena.config_for(w.path, route.fixed_buffers, size),
            ..Default::default()
        },
        mix: None,
        alloc: Alloc::Pool,
        netns: route.netns.clone(),
        agent: None,
        proto: route.proto,
        gso: None,
        msg_latency: false,
        burst: None,
        congestion: None,
        runtime: crate::traffic::Runtime::Thread,
    })
}

/// Runs `cal` on `route`, each window a stream point measured by `rec` (which writes it to
/// the results as it goes): the profile, or `None` when the run was stopped.
pub fn run(
    cal: &Calibration,
    route: &Route,
    (duration, warmup): (Duration, Duration),
    rec: &mut Recorder,
    meter: &mut Meter,
) -> anyhow::Result<Option<Profile>> {
    cal.run(|w| {
        let p = point(w, duration, warmup, route);
        Ok(rec.run_once(&p, None, meter, w.round)?.map(|row| {
            let rep = row.in_round(w.round).expect("the window just added");
            let z = &rep.zerocopy;
            WindowResult {
                gbps: rep.throughput_gbps,
                copied_fraction: (z.counts.copied_known && z.counts.completions > 0)
                    .then(|| z.counts.copied as f64 / z.counts.completions as f64),
            }
        }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::Arena;

    #[test]
    fn the_route_says_which_uring_zc_windows_were_written_in_place() {
        let route = |arena, fixed_buffers| Route {
            arena,
            fixed_buffers,
            ..Route::default()
        };
        let sizes = [4096, 64 << 10, 1 << 20];
        assert_eq!(
            route(Arena::Auto, false).describe(&sizes),
            "loopback uring-zc-in-place-to-64KiB"
        );
        assert_eq!(
            route(Arena::Auto, false).describe(&sizes[..2]),
            "loopback uring-zc-in-place"
        );
        assert_eq!(
            route(Arena::Bytes(64 << 20), false).describe(&sizes),
            "loopback uring-zc-in-place"
        );
        assert_eq!(route(Arena::Off, false).describe(&sizes), "loopback");
        assert_eq!(
            route(Arena::Auto, true).describe(&sizes),
            "loopback fixed-buffers"
        );
        // The windows themselves: in place exactly where the route says.
        let opts = |size| match point(
            &Window {
                round: 0,
                size,
                path: sendpath::Strategy::UringZc,
            },
            Duration::ZERO,
            Duration::ZERO,
            &route(Arena::Auto, false),
        ) {
            Point::Stream(s) => s.opts.uring_arena.is_some(),
            _ => unreachable!("a calibration window is a stream point"),
        };
        assert!(opts(64 << 10) && !opts(1 << 20));
    }
}
