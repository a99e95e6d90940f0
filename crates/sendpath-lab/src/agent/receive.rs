//! A receive the agent runs for a client: the accepting thread, one receiver thread per
//! connection, their bytes and CPU.

use crate::traffic::RecvMode;
use crate::workload::{receive, RecvCounters};
use anyhow::{bail, Context};
use sendpath_host::cpu::ThreadCpu;
use std::net::{IpAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A receive in progress: the accepting thread, then one thread per connection.
pub(super) struct Receiving {
    pub(super) counters: Arc<RecvCounters>,
    /// Receiver thread ids, for their CPU time so far.
    tids: Arc<Mutex<Vec<i32>>>,
    /// CPU of receiver threads that have finished.
    done_cpu: Arc<Mutex<ThreadCpu>>,
    handle: std::thread::JoinHandle<anyhow::Result<(u64, u64)>>,
    /// The receivers map pages (`zerocopy`).
    maps: bool,
}

/// `base` plus the CPU time so far of the threads `tids` that are still there.
pub(super) fn plus_live_cpu(mut base: ThreadCpu, tids: &Mutex<Vec<i32>>) -> ThreadCpu {
    for &t in tids.lock().expect("tid lock").iter() {
        if let Ok(x) = ThreadCpu::read(t) {
            base.user_ns += x.user_ns;
            base.system_ns += x.system_ns;
        }
    }
    base
}

/// What a finished receive read.
pub(super) struct Finished {
    pub(super) bytes: u64,
    pub(super) cpu: ThreadCpu,
    pub(super) verified: u64,
    pub(super) mismatches: u64,
    /// Bytes mapped (`zerocopy`); `None` for the other receivers.
    pub(super) mapped: Option<u64>,
}

impl Receiving {
    /// Waits for every connection's end of file: the totals, or the first error.
    pub(super) fn finish(self) -> anyhow::Result<Finished> {
        let joined = self
            .handle
            .join()
            .map_err(|_| anyhow::anyhow!("the accepting thread panicked"));
        // Every receiver thread has ended: its CPU is in the finished total.
        drop(self.tids);
        let cpu = *self.done_cpu.lock().expect("cpu lock");
        let bytes = self
            .counters
            .bytes
            .load(std::sync::atomic::Ordering::Relaxed);
        let (verified, mismatches) = joined.and_then(|x| x)?;
        let mapped = self
            .counters
            .mapped
            .load(std::sync::atomic::Ordering::Relaxed);
        Ok(Finished {
            bytes,
            cpu,
            verified,
            mismatches,
            mapped: self.maps.then_some(mapped),
        })
    }

    pub(super) fn cpu(&self) -> ThreadCpu {
        plus_live_cpu(*self.done_cpu.lock().expect("cpu lock"), &self.tids)
    }
}

/// Starts a receive: binds `ip:0`, accepts `connections` within the deadline, one receiver
/// thread each.
pub(super) fn start_receive(
    ip: IpAddr,
    connections: u32,
    mode: RecvMode,
    recv_size: usize,
    deadline: Instant,
) -> anyhow::Result<(u16, Receiving)> {
    let l = TcpListener::bind((ip, 0)).context("binding the data port")?;
    let port = l.local_addr()?.port();
    let counters = Arc::new(RecvCounters::default());
    let tids = Arc::new(Mutex::new(Vec::new()));
    let done_cpu = Arc::new(Mutex::new(ThreadCpu::default()));
    let (c, t, d) = (counters.clone(), tids.clone(), done_cpu.clone());
    let handle = std::thread::spawn(move || -> anyhow::Result<(u64, u64)> {
        l.set_nonblocking(true)?;
        let mut threads = Vec::new();
        while threads.len() < connections as usize {
            let Some((s, _)) = crate::workload::accept_before(&l, deadline, || false)
                .context("accepting a data connection")?
            else {
                bail!(
                    "{} of {connections} connections arrived before the deadline",
                    threads.len()
                );
            };
            s.set_read_timeout(Some(
                deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1)),
            ))?;
            let (c, t, d) = (c.clone(), t.clone(), d.clone());
            threads.push(std::thread::spawn(move || {
                let tid = sendpath_host::thread::gettid();
                t.lock().expect("tid lock").push(tid);
                let v = receive(&s, mode, &c, recv_size, None);
                // Move this thread's CPU (exact, not in ticks) from the live list to the
                // finished total.
                let mine = crate::measure::own_thread_cpu(tid);
                t.lock().expect("tid lock").retain(|&x| x != tid);
                let mut dc = d.lock().expect("cpu lock");
                dc.user_ns += mine.user_ns;
                dc.system_ns += mine.system_ns;
                v
            }));
        }
        let (mut verified, mut mismatches) = (0, 0);
        let mut first_err = None;
        for h in threads {
            match h.join() {
                Ok(Ok(v)) => {
                    verified += v.bytes_verified();
                    mismatches += v.mismatches;
                }
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(_) => {
                    first_err.get_or_insert(anyhow::anyhow!("a receiver thread panicked"));
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok((verified, mismatches)),
        }
    });
    Ok((
        port,
        Receiving {
            counters,
            tids,
            done_cpu,
            handle,
            maps: mode == RecvMode::Zerocopy,
        },
    ))
}
