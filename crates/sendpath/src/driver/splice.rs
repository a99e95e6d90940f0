//! One file range on its way to a socket through a pipe, by linked pairs of io_uring SPLICE
//! ([`UringDriver::send_file`](super::UringDriver::send_file)): what to ask for next and what
//! each completion means. I/O-free, so the tests run on simulated completions.

/// The next linked pair to submit: `len` file bytes from `offset` into the pipe, then the pipe's
/// `in_pipe + len` bytes out to the socket (with `len` 0, only the second half).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SpliceStep {
    /// File offset of the first half.
    pub(super) offset: u64,
    /// File bytes the first half moves into the pipe.
    pub(super) len: u32,
    /// Bytes already in the pipe before the first half.
    pub(super) in_pipe: u32,
}

/// What a completion meant for the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SpliceProgress {
    /// The other half of the pair is still in the kernel.
    Waiting,
    /// The pair is done and bytes remain: submit [`SpliceJob::next`].
    Next,
    /// Every byte reached the socket.
    Done,
}

/// Why a job cannot go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SpliceFailure {
    /// The file ended before the range did (it shrank).
    FileEnded,
    /// The pipe cannot take a page past what it holds: nothing can move.
    PipeTooSmall,
    /// A half failed with this errno.
    Os(i32),
}

impl SpliceFailure {
    /// As an `io::Error`: the errno of a failed half, else `UnexpectedEof` or `InvalidInput`.
    pub(super) fn into_io(self) -> std::io::Error {
        match self {
            SpliceFailure::Os(e) => std::io::Error::from_raw_os_error(e),
            SpliceFailure::FileEnded => {
                std::io::Error::new(std::io::ErrorKind::UnexpectedEof, self.to_string())
            }
            SpliceFailure::PipeTooSmall => {
                std::io::Error::new(std::io::ErrorKind::InvalidInput, self.to_string())
            }
        }
    }
}

impl std::fmt::Display for SpliceFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpliceFailure::FileEnded => f.write_str("the file ended before the range did"),
            SpliceFailure::PipeTooSmall => f.write_str("the pipe is too small to take a page"),
            SpliceFailure::Os(e) => write!(f, "{}", std::io::Error::from_raw_os_error(*e)),
        }
    }
}

/// A page: a pipe holds `size / PAGE` buffers of up to a page each, whatever their fill.
const PAGE: u64 = 4096;

/// One file range through one pipe. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SpliceJob {
    /// The next file offset to splice in.
    off: u64,
    /// File bytes not yet spliced in.
    left: u64,
    /// Bytes in the pipe (what was written to it before, then file bytes).
    in_pipe: u64,
    /// Halves of the submitted pair not yet completed.
    pending: u8,
}

impl SpliceJob {
    /// `len` bytes of the file from `offset`, behind `in_pipe` bytes the caller already wrote
    /// into the (otherwise empty) pipe.
    pub(super) fn new(offset: u64, len: u64, in_pipe: u64) -> SpliceJob {
        SpliceJob {
            off: offset,
            left: len,
            in_pipe,
            pending: 0,
        }
    }

    /// The next pair for a pipe of `pipe_size` bytes, counted as submitted. The first half
    /// asks for no more than fits: a head takes whole pipe buffers and a range that does not
    /// start on a page spans one more, and asking for more would block the first half
    /// forever, since the second, which empties the pipe, runs only after it.
    pub(super) fn next(&mut self, pipe_size: u64) -> Result<SpliceStep, SpliceFailure> {
        let free = (pipe_size / PAGE).saturating_sub(self.in_pipe.div_ceil(PAGE) + 1);
        let len = self.left.min(free * PAGE).min(u32::MAX as u64 / 2);
        if len == 0 && self.in_pipe == 0 {
            return Err(SpliceFailure::PipeTooSmall);
        }
        self.pending = if len > 0 { 2 } else { 1 };
        Ok(SpliceStep {
            offset: self.off,
            len: len as u32,
            in_pipe: self.in_pipe.min(u32::MAX as u64) as u32,
        })
    }

    /// One half completed: `into_pipe` for the file-to-pipe half, `res` bytes moved or
    /// `-errno` (`-ECANCELED` for the second half when the first moved less than asked).
    pub(super) fn on_spliced(
        &mut self,
        into_pipe: bool,
        res: i32,
    ) -> Result<SpliceProgress, SpliceFailure> {
        self.pending = self.pending.saturating_sub(1);
        match (into_pipe, res) {
            (true, 0) => return Err(SpliceFailure::FileEnded),
            (true, n) if n > 0 => {
                self.in_pipe += n as u64;
                self.off += n as u64;
                self.left -= (n as u64).min(self.left);
            }
            (false, n) if n > 0 => self.in_pipe -= (n as u64).min(self.in_pipe),
            // The first half moved less than asked, so the linked second did not run.
            (false, n) if n == -libc::ECANCELED => {}
            // A second half that moved nothing with bytes in the pipe: the peer is gone.
            (false, 0) if self.in_pipe > 0 => return Err(SpliceFailure::Os(libc::EPIPE)),
            (false, 0) => {}
            (_, n) => return Err(SpliceFailure::Os(-n)),
        }
        Ok(if self.pending > 0 {
            SpliceProgress::Waiting
        } else if self.is_done() {
            SpliceProgress::Done
        } else {
            SpliceProgress::Next
        })
    }

    /// Every byte reached the socket.
    pub(super) fn is_done(&self) -> bool {
        self.in_pipe == 0 && self.left == 0 && self.pending == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIPE: u64 = 64 * 1024;

    #[test]
    fn a_range_moves_a_pipe_full_at_a_time() {
        let mut j = SpliceJob::new(0, 100_000, 0);
        let s = j.next(PIPE).unwrap();
        // 16 pipe buffers, one kept for a range that does not start on a page.
        assert_eq!(
            s,
            SpliceStep {
                offset: 0,
                len: 15 * 4096,
                in_pipe: 0
            }
        );
        assert_eq!(j.on_spliced(true, 61_440), Ok(SpliceProgress::Waiting));
        assert_eq!(j.on_spliced(false, 61_440), Ok(SpliceProgress::Next));
        let s = j.next(PIPE).unwrap();
        assert_eq!((s.offset, s.len), (61_440, 100_000 - 61_440));
        assert_eq!(j.on_spliced(true, 38_560), Ok(SpliceProgress::Waiting));
        assert_eq!(j.on_spliced(false, 38_560), Ok(SpliceProgress::Done));
        assert!(j.is_done());
    }

    #[test]
    fn a_head_in_the_pipe_goes_out_with_the_body() {
        let mut j = SpliceJob::new(0, 10, 200);
        let s = j.next(PIPE).unwrap();
        assert_eq!((s.len, s.in_pipe), (10, 200));
        assert_eq!(j.on_spliced(true, 10), Ok(SpliceProgress::Waiting));
        assert_eq!(j.on_spliced(false, 210), Ok(SpliceProgress::Done));
    }

    #[test]
    fn a_short_first_half_cancels_the_second_and_the_pipe_drains_next() {
        let mut j = SpliceJob::new(0, 8192, 0);
        j.next(PIPE).unwrap();
        assert_eq!(j.on_spliced(true, 4096), Ok(SpliceProgress::Waiting));
        assert_eq!(
            j.on_spliced(false, -libc::ECANCELED),
            Ok(SpliceProgress::Next)
        );
        let s = j.next(PIPE).unwrap();
        assert_eq!((s.offset, s.len, s.in_pipe), (4096, 4096, 4096));
        // A short second half leaves bytes in the pipe: only they go next.
        assert_eq!(j.on_spliced(true, 4096), Ok(SpliceProgress::Waiting));
        assert_eq!(j.on_spliced(false, 5000), Ok(SpliceProgress::Next));
        let s = j.next(PIPE).unwrap();
        assert_eq!((s.len, s.in_pipe), (0, 3192));
        assert_eq!(j.on_spliced(false, 3192), Ok(SpliceProgress::Done));
    }

    #[test]
    fn failures_are_named() {
        let mut j = SpliceJob::new(0, 8192, 0);
        j.next(PIPE).unwrap();
        assert_eq!(j.on_spliced(true, 0), Err(SpliceFailure::FileEnded));
        let mut j = SpliceJob::new(0, 8192, 0);
        j.next(PIPE).unwrap();
        assert_eq!(j.on_spliced(true, 8192), Ok(SpliceProgress::Waiting));
        assert_eq!(
            j.on_spliced(false, -libc::ECONNRESET),
            Err(SpliceFailure::Os(libc::ECONNRESET))
        );
        let mut j = SpliceJob::new(0, 8192, 0);
        assert_eq!(j.next(4096), Err(SpliceFailure::PipeTooSmall));
    }
}
