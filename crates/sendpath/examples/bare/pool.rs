//! `--pool`: the buffers of a correct program. Each send takes a buffer from a pool and it comes
//! back only when the kernel is done with it (a blocking send's return, an io_uring SEND's
//! completion, a zero-copy send's notification), most recently released first, as sendpath's
//! pools do. Without `--pool`, every send reuses one buffer at once, never rewritten: the
//! speed of light, which a program that writes its buffers cannot reach.

/// Page-aligned buffers of one size, up to `cap` of them, handed out last-released first.
pub(crate) struct Pool {
    bufs: Vec<Vec<u8>>,
    free: Vec<usize>,
    size: usize,
    cap: usize,
    /// Whether a buffer waits for the kernel (`--pool`) or goes back at once.
    pub(crate) hold: bool,
    /// `--arena`: every buffer is a slot of `bufs[0]`, `stride` bytes apart.
    stride: Option<usize>,
}

impl Pool {
    /// With `hold` false, one buffer that every send reuses. `all` makes every buffer now
    /// (registered buffers need them all up front).
    pub(crate) fn new(size: usize, hold: bool, cap: usize, all: bool) -> Pool {
        let mut p = Pool {
            bufs: Vec::new(),
            free: Vec::new(),
            size,
            cap: if hold { cap.max(1) } else { 1 },
            hold,
            stride: None,
        };
        p.grow();
        while all && p.bufs.len() < p.cap {
            p.grow();
        }
        p
    }

    /// `--arena`: `cap` page-aligned slots of one region, made now, each held until the kernel
    /// releases it (as `--pool`).
    pub(crate) fn arena(size: usize, cap: usize) -> Pool {
        let stride = size.next_multiple_of(4096);
        Pool {
            bufs: vec![vec![crate::route::BYTE; stride * cap.max(1) + 4096]],
            free: (0..cap.max(1)).rev().collect(),
            size,
            cap: cap.max(1),
            hold: true,
            stride: Some(stride),
        }
    }

    /// The whole region of an arena, for registering it as one buffer.
    pub(crate) fn region(&self) -> Option<&[u8]> {
        let s = self.stride?;
        let b = &self.bufs[0];
        let at = b.as_ptr().align_offset(4096);
        Some(&b[at..at + s * self.cap])
    }

    fn grow(&mut self) {
        self.bufs.push(vec![crate::route::BYTE; self.size + 4096]);
        self.free.push(self.bufs.len() - 1);
    }

    /// A free buffer's index, or `None` when all `cap` are with the kernel.
    pub(crate) fn take(&mut self) -> Option<usize> {
        if self.free.is_empty() && self.stride.is_none() && self.bufs.len() < self.cap {
            self.grow();
        }
        match self.hold {
            true => self.free.pop(),
            false => Some(0),
        }
    }

    /// Gives buffer `i` back (a no-op without `hold`: the one buffer never left).
    pub(crate) fn put(&mut self, i: usize) {
        if self.hold {
            self.free.push(i);
        }
    }

    pub(crate) fn buf(&self, i: usize) -> &[u8] {
        if let Some(s) = self.stride {
            let b = &self.bufs[0];
            let at = b.as_ptr().align_offset(4096) + i * s;
            return &b[at..at + self.size];
        }
        let b = &self.bufs[i];
        let at = b.as_ptr().align_offset(4096);
        &b[at..at + self.size]
    }

    /// Every buffer made so far, for registration.
    pub(crate) fn all(&self) -> impl Iterator<Item = &[u8]> {
        (0..self.bufs.len()).map(|i| self.buf(i))
    }
}
