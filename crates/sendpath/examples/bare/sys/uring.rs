//! `IORING_OP_SEND` / `SEND_ZC` (and their vectored and bundled forms) with `depth` requests in
//! flight, in the order `Order` names.

use super::super::pool::Pool;
use super::super::{Args, Order, Tally};
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::io;
use std::os::fd::RawFd;
use std::time::Instant;

/// One run's ring settings.
pub(crate) struct Cfg {
    depth: usize,
    zc: bool,
    fixed: bool,
    /// One registered region (buffer 0) that every request names by index.
    arena: bool,
    fixed_file: bool,
    order: Order,
}

impl Cfg {
    pub(crate) fn of(a: &Args, order: Order) -> Cfg {
        Cfg {
            depth: a.depth,
            zc: a.path == "uring-zc",
            fixed: a.fixed,
            arena: a.arena,
            fixed_file: a.fixed_file,
            order,
        }
    }
}

const BGID: u16 = 7;
const REPORT_USAGE: u16 = 1 << 3; // IORING_SEND_ZC_REPORT_USAGE
const NOTIF_COPIED: u32 = 1 << 31; // IORING_NOTIF_USAGE_ZC_COPIED
const FIXED_BUF: u16 = 1 << 2; // IORING_RECVSEND_FIXED_BUF: iovecs in registered buffer 0

/// A ring as sendpath's: one submitting thread, completions' task work run when it waits
/// (SINGLE_ISSUER | DEFER_TASKRUN); `SENDPATH_URING_SETUP=coop` for COOP_TASKRUN.
pub(crate) fn ring(entries: usize) -> io::Result<IoUring> {
    let mut b = IoUring::builder();
    match std::env::var("SENDPATH_URING_SETUP").as_deref() {
        Ok("coop") => b.setup_coop_taskrun().setup_taskrun_flag(),
        _ => b
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag(),
    };
    b.build(entries.next_power_of_two() as u32)
}

/// The send loop: fills the ring as `cfg.order` allows until `until`, then drains every
/// request and notification.
pub(crate) fn send(fd: RawFd, pool: &mut Pool, until: Instant, cfg: Cfg) -> io::Result<Tally> {
    let mut ring = ring(4 * cfg.depth)?;
    if let Some(r) = pool.region() {
        let iov = libc::iovec {
            iov_base: r.as_ptr() as *mut _,
            iov_len: r.len(),
        };
        // SAFETY: the region outlives the ring (the caller's borrow spans this function).
        unsafe { ring.submitter().register_buffers(&[iov])? };
    } else if cfg.fixed {
        let iovs: Vec<libc::iovec> = pool
            .all()
            .map(|b| libc::iovec {
                iov_base: b.as_ptr() as *mut _,
                iov_len: b.len(),
            })
            .collect();
        // SAFETY: the pool's buffers outlive the ring (the caller's borrow spans this whole
        // function) and it makes no new ones: with `--fixed` it made them all up front.
        unsafe { ring.submitter().register_buffers(&iovs)? };
    }
    let target = match cfg.fixed_file {
        true => {
            ring.submitter().register_files(&[fd])?;
            Target::Fixed
        }
        false => Target::Fd(fd),
    };
    let mut bundle = match cfg.order {
        Order::Bundle => Some(Bundle::new(&ring, pool.buf(0), cfg.depth)?),
        _ => None,
    };
    let e = Entries { target, cfg: &cfg };
    let r = pump(&mut ring, &e, pool, bundle.as_mut(), until);
    // The ring goes first: the kernel lets go of the buffer ring's page with it.
    drop(ring);
    drop(bundle);
    r
}

fn pump(
    ring: &mut IoUring,
    e: &Entries,
    pool: &mut Pool,
    mut bundle: Option<&mut Bundle>,
    until: Instant,
) -> io::Result<Tally> {
    let mut l = Loop::new(e.cfg.depth);
    loop {
        let sending = Instant::now() < until;
        if sending {
            l.fill(ring, e, pool, bundle.as_deref_mut());
        }
        if !sending && l.inflight == 0 && l.notifs == 0 {
            return Ok(l.t);
        }
        // With DEFER_TASKRUN, completions are posted only when this thread waits.
        ring.submitter()
            .submit_with_args(1, &types::SubmitArgs::new())?;
        l.reap(ring, pool, bundle.as_deref_mut())?;
    }
}

#[derive(Clone, Copy)]
enum Target {
    Fd(RawFd),
    Fixed,
}

/// How the requests of a run are made.
struct Entries<'a> {
    target: Target,
    cfg: &'a Cfg,
}

impl Entries<'_> {
    /// One SEND (or SEND_ZC) of buffer `i` of the pool.
    fn one(&self, b: &[u8], i: usize) -> squeue::Entry {
        let (p, n) = (b.as_ptr(), b.len() as u32);
        let w = libc::MSG_WAITALL;
        macro_rules! on {
            ($t:expr) => {
                if self.cfg.zc {
                    opcode::SendZc::new($t, p, n)
                        .zc_flags(REPORT_USAGE)
                        .buf_index(match (self.cfg.fixed, self.cfg.arena) {
                            (true, _) => Some(i as u16),
                            (_, true) => Some(0),
                            _ => None,
                        })
                        .flags(w)
                        .build()
                } else {
                    opcode::Send::new($t, p, n).flags(w).build()
                }
            };
        }
        match self.target {
            Target::Fd(fd) => on!(types::Fd(fd)),
            Target::Fixed => on!(types::Fixed(0)),
        }
    }

    fn vectored(&self, msg: &libc::msghdr) -> squeue::Entry {
        let (m, w) = (msg as *const libc::msghdr, libc::MSG_WAITALL as u32);
        macro_rules! on {
            ($t:expr) => {
                if self.cfg.zc {
                    opcode::SendMsgZc::new($t, m)
                        .ioprio(REPORT_USAGE | if self.cfg.arena { FIXED_BUF } else { 0 })
                        .flags(w)
                        .build()
                } else {
                    opcode::SendMsg::new($t, m).flags(w).build()
                }
            };
        }
        match self.target {
            Target::Fd(fd) => on!(types::Fd(fd)),
            Target::Fixed => on!(types::Fixed(0)),
        }
    }

    fn bundle(&self) -> squeue::Entry {
        let w = libc::MSG_WAITALL;
        match self.target {
            Target::Fd(fd) => opcode::SendBundle::new(types::Fd(fd), BGID)
                .flags(w)
                .build(),
            Target::Fixed => opcode::SendBundle::new(types::Fixed(0), BGID)
                .flags(w)
                .build(),
        }
    }
}

/// Requests and notifications in flight, the pool buffers each holds, and what came back.
struct Loop {
    inflight: usize,
    notifs: u64,
    t: Tally,
    /// Per request (its user_data), the buffers it holds until its completion, or for a
    /// zero-copy request its notification. Each list keeps its allocation from request to
    /// request, so a steady loop allocates nothing.
    slots: Vec<Vec<usize>>,
    free_slots: Vec<usize>,
    /// The buffers of the chain or vectored send being made.
    taken: Vec<usize>,
    /// The vectored request's iovecs and header: one in flight at a time.
    iovs: Box<[libc::iovec]>,
    msg: Box<libc::msghdr>,
}

impl Loop {
    fn new(depth: usize) -> Loop {
        let none = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        Loop {
            inflight: 0,
            notifs: 0,
            t: Tally::default(),
            slots: Vec::new(),
            free_slots: Vec::new(),
            taken: Vec::with_capacity(depth),
            iovs: vec![none; depth].into_boxed_slice(),
            // SAFETY: an all-zero msghdr is valid.
            msg: Box::new(unsafe { std::mem::zeroed() }),
        }
    }

    fn push(&mut self, ring: &mut IoUring, e: squeue::Entry, bufs: &[usize]) {
        let slot = self.free_slots.pop().unwrap_or_else(|| {
            self.slots.push(Vec::new());
            self.slots.len() - 1
        });
        self.slots[slot].extend_from_slice(bufs);
        // SAFETY: every request points at pool buffers (and the vectored header in `self`)
        // that stay untouched until its completion: `send` drains all requests and
        // notifications before returning, and a held buffer goes back to the pool only then.
        unsafe {
            ring.submission()
                .push(&e.user_data(slot as u64))
                .expect("the ring holds 4 x depth")
        };
        self.inflight += 1;
    }

    /// Takes `n` buffers into `taken`; false (and none taken) if the pool has fewer free.
    fn take(&mut self, pool: &mut Pool, n: usize) -> bool {
        self.taken.clear();
        for _ in 0..n {
            match pool.take() {
                Some(i) => self.taken.push(i),
                None => {
                    self.taken.drain(..).for_each(|i| pool.put(i));
                    return false;
                }
            }
        }
        true
    }

    /// Queues what the order allows: unlinked up to `depth`, or a new chain, vectored send or
    /// bundle once the last is done.
    fn fill(&mut self, ring: &mut IoUring, e: &Entries, pool: &mut Pool, b: Option<&mut Bundle>) {
        let depth = e.cfg.depth;
        match e.cfg.order {
            Order::None => {
                while self.inflight < depth {
                    let Some(i) = pool.take() else { break };
                    self.push(ring, e.one(pool.buf(i), i), &[i]);
                }
            }
            _ if self.inflight > 0 => {}
            Order::Linked => {
                if !self.take(pool, depth) {
                    return;
                }
                for k in 0..depth {
                    let i = self.taken[k];
                    let entry = e.one(pool.buf(i), i);
                    let entry = match k + 1 < depth {
                        true => entry.flags(squeue::Flags::IO_LINK),
                        false => entry,
                    };
                    self.push(ring, entry, &[i]);
                }
            }
            Order::Vectored => {
                if !self.take(pool, depth) {
                    return;
                }
                for (k, &i) in self.taken.iter().enumerate() {
                    let b = pool.buf(i);
                    self.iovs[k] = libc::iovec {
                        iov_base: b.as_ptr() as *mut _,
                        iov_len: b.len(),
                    };
                }
                self.msg.msg_iov = self.iovs.as_mut_ptr();
                self.msg.msg_iovlen = depth;
                let entry = e.vectored(&self.msg);
                let bufs = std::mem::take(&mut self.taken);
                self.push(ring, entry, &bufs);
                self.taken = bufs;
            }
            Order::Bundle => {
                b.expect("a bundle ring").top_up();
                self.push(ring, e.bundle(), &[]);
            }
        }
    }

    fn reap(
        &mut self,
        ring: &mut IoUring,
        pool: &mut Pool,
        mut b: Option<&mut Bundle>,
    ) -> io::Result<()> {
        let len = pool.buf(0).len() as u64;
        for c in ring.completion() {
            let (f, slot) = (c.flags(), c.user_data() as usize);
            if cqueue::notif(f) {
                self.notifs -= 1;
                self.t.completions += 1;
                if c.result() as u32 & NOTIF_COPIED != 0 {
                    self.t.copied += 1;
                }
                self.release(pool, slot);
                continue;
            }
            if c.result() < 0 {
                return Err(io::Error::from_raw_os_error(-c.result()));
            }
            self.inflight -= 1;
            let n = c.result() as u64;
            self.t.bytes += n;
            self.t.sends += n / len;
            if cqueue::more(f) {
                self.notifs += 1;
            } else {
                self.release(pool, slot);
            }
            if let Some(b) = &mut b {
                b.consumed(n.div_ceil(len) as u16);
            }
        }
        Ok(())
    }

    /// A request is done with its buffers: they go back to the pool, its slot is free.
    fn release(&mut self, pool: &mut Pool, slot: usize) {
        for i in self.slots[slot].drain(..) {
            pool.put(i);
        }
        self.free_slots.push(slot);
    }
}

/// A provided-buffer ring of `depth` entries, each the one buffer: a send bundle takes every
/// entry that is there.
struct Bundle {
    mem: *mut libc::c_void,
    entries: u16,
    buf: *const u8,
    len: u32,
    tail: u16,
    head: u16,
}

impl Bundle {
    fn new(ring: &IoUring, buf: &[u8], depth: usize) -> io::Result<Bundle> {
        let entries = (depth.next_power_of_two() as u16).max(1);
        // SAFETY: an anonymous private mapping of one page (256 entries of 16 bytes at most).
        let mem = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if mem == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `mem` is a page, zeroed, that stays mapped while the ring is registered
        // (the ring is closed before the page is unmapped: `send` drops the ring first).
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(mem as u64, entries, BGID, 0)?
        };
        Ok(Bundle {
            mem,
            entries,
            buf: buf.as_ptr(),
            len: buf.len() as u32,
            tail: 0,
            head: 0,
        })
    }

    /// Offers the buffer again in every entry the kernel has taken.
    fn top_up(&mut self) {
        let mask = self.entries - 1;
        let base = self.mem.cast::<types::BufRingEntry>();
        while self.tail.wrapping_sub(self.head) < self.entries {
            // SAFETY: the slot is inside the mapped page and not offered to the kernel.
            unsafe {
                let e = &mut *base.add((self.tail & mask) as usize);
                e.set_addr(self.buf as u64);
                e.set_len(self.len);
                e.set_bid(self.tail & mask);
            }
            self.tail = self.tail.wrapping_add(1);
        }
        // SAFETY: the tail lives in the first entry; the kernel reads it with acquire order.
        unsafe {
            let tail = types::BufRingEntry::tail(base) as *const std::sync::atomic::AtomicU16;
            (*tail).store(self.tail, std::sync::atomic::Ordering::Release);
        }
    }

    fn consumed(&mut self, n: u16) {
        self.head = self.head.wrapping_add(n);
    }
}

impl Drop for Bundle {
    fn drop(&mut self) {
        // SAFETY: the page was mapped in `new`; nothing refers to it any more.
        unsafe { libc::munmap(self.mem, 4096) };
    }
}
