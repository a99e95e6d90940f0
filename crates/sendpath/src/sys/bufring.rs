//! A ring of provided receive buffers (`IORING_REGISTER_PBUF_RING`, kernel 5.19; see
//! io_uring_register_buf_ring(3)). A multishot receive picks one buffer per completion and names
//! it in the CQE (`IORING_CQE_F_BUFFER`); from then until [`RecvBufs::recycle`] puts it back, the
//! kernel does not touch it and the application may read it.

use super::mem::PageBuf;
use io_uring::types::BufRingEntry;
use io_uring::IoUring;
use std::io;
use std::sync::atomic::{AtomicU16, Ordering};

/// The buffers of one group and the ring that offers them to the kernel.
pub(crate) struct RecvBufs {
    /// `count` entries of `struct io_uring_buf`; the tail sits in the first entry's `resv`.
    entries: PageBuf,
    /// `count * size` bytes the kernel receives into.
    data: PageBuf,
    count: u16,
    size: usize,
    tail: u16,
    bgid: u16,
    /// Buffers the kernel handed out and the application has not put back.
    out: Vec<bool>,
}

// SAFETY: RecvBufs owns both mappings; the kernel's access is tied to the ring that owns it.
unsafe impl Send for RecvBufs {}

impl RecvBufs {
    /// Maps `count` buffers of `size` bytes (count a power of two, at most 32768) and registers
    /// them as group `bgid` of `ring`, every buffer offered.
    pub(crate) fn new(ring: &IoUring, bgid: u16, count: u16, size: usize) -> io::Result<RecvBufs> {
        if !count.is_power_of_two() || count > 1 << 15 || size == 0 || size > u32::MAX as usize {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let entries = PageBuf::new(usize::from(count) * std::mem::size_of::<BufRingEntry>())?;
        let mut data = PageBuf::new(usize::from(count) * size)?;
        // Write every byte once, so the buffers are this process's pages before the kernel fills them.
        data.as_mut_slice().fill(0);
        // SAFETY: `entries` is a page-aligned mapping of `count` entries that lives as long as
        // this value; `Drop` unregisters the group before unmapping it.
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                entries.as_ptr() as u64,
                count,
                bgid,
                0,
            )?;
        }
        let mut b = RecvBufs {
            entries,
            data,
            count,
            size,
            tail: 0,
            bgid,
            out: vec![true; usize::from(count)],
        };
        for bid in 0..count {
            b.offer(bid);
        }
        b.publish();
        Ok(b)
    }

    /// The group id receives name.
    pub(crate) fn group(&self) -> u16 {
        self.bgid
    }

    /// The first `len` bytes of buffer `bid`, which a completion handed to the application.
    /// `None` for a buffer the kernel holds or an id or length out of range.
    pub(crate) fn get(&self, bid: u16, len: usize) -> Option<&[u8]> {
        if !self.out.get(usize::from(bid)).copied().unwrap_or(false) || len > self.size {
            return None;
        }
        // SAFETY: buffer `bid` lies inside `data` (bid < count, len <= size) and the kernel does
        // not write it until `recycle` offers it again, which needs `&mut self` and so ends this
        // borrow first.
        Some(unsafe {
            std::slice::from_raw_parts(self.data.as_ptr().add(usize::from(bid) * self.size), len)
        })
    }

    /// Marks `bid` as handed out by a completion.
    pub(crate) fn taken(&mut self, bid: u16) {
        if let Some(o) = self.out.get_mut(usize::from(bid)) {
            *o = true;
        }
    }

    /// Offers buffer `bid` to the kernel again. Ignores a buffer already offered.
    pub(crate) fn recycle(&mut self, bid: u16) {
        if self.out.get(usize::from(bid)).copied().unwrap_or(false) {
            self.offer(bid);
            self.publish();
        }
    }

    fn offer(&mut self, bid: u16) {
        let i = usize::from(self.tail & (self.count - 1));
        let addr = self.data.as_ptr() as u64 + u64::from(bid) * self.size as u64;
        // SAFETY: entry `i` < count lies inside `entries`; the kernel reads entries only up to
        // the published tail, and this one is past it until `publish`.
        let e = unsafe { &mut *self.entries.as_ptr().cast::<BufRingEntry>().add(i) };
        e.set_addr(addr);
        e.set_len(self.size as u32);
        e.set_bid(bid);
        self.out[usize::from(bid)] = false;
        self.tail = self.tail.wrapping_add(1);
    }

    /// Stores the tail with release ordering, so the kernel sees the entries written before it.
    fn publish(&mut self) {
        // SAFETY: the tail is the u16 at offset 14 of the first entry of the page-aligned ring
        // (io_uring_buf_ring), shared with the kernel and accessed atomically by both sides.
        unsafe {
            let tail = BufRingEntry::tail(self.entries.as_ptr().cast::<BufRingEntry>());
            (*(tail as *const AtomicU16)).store(self.tail, Ordering::Release);
        }
    }

    /// `io_uring_unregister_buf_ring`: after this the kernel no longer picks these buffers.
    pub(crate) fn unregister(&self, ring: &IoUring) -> io::Result<()> {
        ring.submitter().unregister_buf_ring(self.bgid)
    }
}
