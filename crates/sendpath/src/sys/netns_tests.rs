//! The non-copied completion path, which a local receiver never produces: UDP with
//! MSG_ZEROCOPY sent out of a veth whose peer is down, inside a network namespace this test
//! creates (the frames are dropped before any local stack, so the kernel never copies them).

use crate::completion::zerocopy::ZcTracker;
use crate::completion::ZcNotification;
use crate::sys;
use std::net::UdpSocket;
use std::os::fd::AsFd;
use std::process::Command;
use std::time::{Duration, Instant};

struct Netns(String);

impl Netns {
    /// A namespace named after this process and `tag` (tests run in parallel).
    fn create(tag: &str) -> Result<Netns, String> {
        if sendpath_host::thread::euid() != 0 {
            return Err("needs root to create a network namespace".into());
        }
        let name = format!("sendpath-zc-{tag}-{}", std::process::id());
        let ns = Netns(name.clone());
        let ip = |args: &[&str]| -> Result<(), String> {
            let out = Command::new("ip")
                .args(args)
                .output()
                .map_err(|e| format!("cannot run `ip` (iproute2): {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "`ip {}` failed: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        };
        ip(&["netns", "add", &name])?;
        ip(&[
            "-n", &name, "link", "add", "va", "type", "veth", "peer", "name", "vb",
        ])?;
        ip(&["-n", &name, "addr", "add", "192.0.2.1/24", "dev", "va"])?;
        ip(&["-n", &name, "link", "set", "va", "up"])?;
        ip(&[
            "-n",
            &name,
            "neigh",
            "add",
            "192.0.2.2",
            "lladdr",
            "02:00:00:00:00:02",
            "dev",
            "va",
            "nud",
            "permanent",
        ])?;
        Ok(ns)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

#[test]
fn udp_zerocopy_out_of_a_dead_veth_completes_without_copy() {
    let ns = match Netns::create("udp") {
        Ok(ns) => ns,
        Err(reason) => {
            crate::test_support::skip(&reason);
            return;
        }
    };
    let path = format!("/run/netns/{}", ns.0);
    let (tracker, copied_ranges, ranges) = std::thread::spawn(move || {
        let f = std::fs::File::open(&path).expect("open netns");
        sendpath_host::thread::enter_netns(f.as_fd()).expect("setns");
        let s = UdpSocket::bind("192.0.2.1:0").unwrap();
        s.connect("192.0.2.2:9").unwrap();
        sys::socket::enable_zerocopy(s.as_fd()).unwrap();
        let mut t: ZcTracker<u32> = ZcTracker::new();
        // Below the MTU: a datagram that must be fragmented is copied by the fragmenter.
        let payload = vec![0x5au8; 1400];
        for i in 0..200u32 {
            sys::socket::sendmsg(s.as_fd(), &[&payload], sys::SendFlags::ZEROCOPY).unwrap();
            t.on_send(i, payload.len(), None);
        }
        let mut copied = 0u64;
        let mut ranges = 0u64;
        let deadline = Instant::now() + Duration::from_secs(5);
        while t.outstanding() > 0 && Instant::now() < deadline {
            let _ = sys::socket::poll(s.as_fd(), 0, 50);
            let mut out: Vec<ZcNotification> = Vec::new();
            sys::socket::recv_zc_notifications(s.as_fd(), &mut out).unwrap();
            for n in out {
                ranges += 1;
                copied += t.on_notification(n, 0).copied;
            }
        }
        (t.outstanding(), copied, ranges)
    })
    .join()
    .unwrap();
    println!(
        "udp msg-zerocopy via dead veth: 200 sends, {ranges} notification ranges, {copied_ranges} reported copied, {tracker} still outstanding"
    );
    assert_eq!(tracker, 0, "every send must complete");
    assert!(ranges > 0);
    assert_eq!(
        copied_ranges, 0,
        "frames dropped on a dead veth are never copied"
    );
}

#[test]
fn adaptive_keeps_zero_copy_on_a_route_that_does_not_copy() {
    use crate::policy::adaptive::AdaptiveConfig;
    use crate::profile::{Profile, Tier};
    use crate::{open, Msg, Options, Strategy};
    let ns = match Netns::create("adaptive") {
        Ok(ns) => ns,
        Err(reason) => {
            crate::test_support::skip(&reason);
            return;
        }
    };
    let path = format!("/run/netns/{}", ns.0);
    // A profile that expects real zero-copy from 1 KiB (as one calibrated across a NIC would).
    let tiers = vec![
        Tier {
            from_bytes: 0,
            path: Strategy::Copy,
        },
        Tier {
            from_bytes: 1024,
            path: Strategy::MsgZerocopy,
        },
    ];
    let profile = Profile::from_tiers(tiers, false).unwrap();
    let stats = std::thread::spawn(move || {
        let f = std::fs::File::open(&path).expect("open netns");
        sendpath_host::thread::enter_netns(f.as_fd()).expect("setns");
        let s = UdpSocket::bind("192.0.2.1:0").unwrap();
        s.connect("192.0.2.2:9").unwrap();
        let opts = Options {
            profile: Some(std::sync::Arc::new(profile)),
            ..Options::default()
        };
        let mut p = open(Strategy::Adaptive, s, &opts).unwrap();
        for i in 0..600 {
            // Datagrams below the MTU (a fragmented one is copied by the fragmenter): 200
            // small ones, then a run of 400 in the zero-copy tier.
            let len = if i < 200 { 200 } else { 1400 };
            let mut b = p.take_buf(len);
            b.as_mut_slice().fill(0x5a);
            p.send(Msg::one(b)).unwrap();
        }
        p.finish(Duration::from_secs(5)).unwrap();
        p.stats().summary()
    })
    .join()
    .unwrap();
    let d = stats.decisions.expect("adaptive counts its decisions");
    println!(
        "adaptive via dead veth (UDP, profile zero-copy from 1 KiB): {d:?}, zc attempts {} completions {} copied {} known {:?}",
        stats.zerocopy.attempts, stats.zerocopy.completions, stats.zerocopy.copied, stats.copied_fraction
    );
    assert_eq!(
        d.copy_sends, 200,
        "the 200 B datagrams are in the copy tier"
    );
    assert_eq!(d.backoffs, 0, "no completion came back copied");
    assert_eq!(d.run_copies, AdaptiveConfig::default().run_min);
    assert_eq!(d.zerocopy_sends + d.cap_copies + d.run_copies, 400);
    assert!(d.zerocopy_sends > 0);
    assert_eq!(stats.zerocopy.completions, stats.zerocopy.attempts);
    assert_eq!(stats.copied_fraction, Some(0.0));
}

#[test]
fn uring_zc_out_of_a_dead_veth_completes_without_copy() {
    use crate::{open, Msg, Options, Strategy};
    let ns = match Netns::create("uringzc") {
        Ok(ns) => ns,
        Err(reason) => {
            crate::test_support::skip(&reason);
            return;
        }
    };
    let path = format!("/run/netns/{}", ns.0);
    let stats = std::thread::spawn(move || {
        let f = std::fs::File::open(&path).expect("open netns");
        sendpath_host::thread::enter_netns(f.as_fd()).expect("setns");
        let s = UdpSocket::bind("192.0.2.1:0").unwrap();
        s.connect("192.0.2.2:9").unwrap();
        let mut out = Vec::new();
        for fixed in [false, true] {
            let opts = Options {
                uring_fixed_buffers: fixed,
                ..Options::default()
            };
            let mut p = open(Strategy::UringZc, s.try_clone().unwrap(), &opts).unwrap();
            for _ in 0..500 {
                let mut b = p.take_buf(1400);
                b.as_mut_slice().fill(0x5a);
                p.send(Msg::one(b)).unwrap();
            }
            p.finish(Duration::from_secs(5)).unwrap();
            out.push((fixed, p.stats().summary()));
        }
        out
    })
    .join()
    .unwrap();
    for (fixed, s) in stats {
        println!(
            "uring-zc via dead veth (fixed buffers {fixed}): {} sends, {} completions, {} copied, {} registered",
            s.zerocopy.attempts, s.zerocopy.completions, s.zerocopy.copied, s.zerocopy.registered
        );
        assert_eq!(s.zerocopy.attempts, 500);
        assert_eq!(
            s.zerocopy.completions, 500,
            "every SEND_ZC notification arrives"
        );
        assert_eq!(
            s.copied_fraction,
            Some(0.0),
            "nothing is copied on a dead veth"
        );
        assert_eq!(s.zerocopy.registered > 0, fixed);
    }
}
