//! The async sender on tokio, on the real kernel: every path byte-exact to a verifying
//! receiver, a runtime thread never blocked, a dropped future that frees nothing the kernel
//! holds and leaves the stream whole, misuse refused, a closed peer an error, a sender moved to
//! another runtime going on or saying why.

mod common;

#[cfg(not(feature = "tokio"))]
#[test]
fn the_async_sender_needs_the_tokio_feature() {
    common::skip("built without the `tokio` feature: cargo test -p sendpath --features tokio");
}

#[cfg(feature = "tokio")]
mod on_tokio {
    use super::common;
    use sendpath::{AsyncSender, Options, Profile, Strategy, Tier};
    use sendpath_host::pattern;
    use std::net::TcpStream;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    /// A non-blocking connection to a verifying receiver that starts reading after `pause`.
    fn connect(
        pause: Duration,
    ) -> (
        TcpStream,
        std::thread::JoinHandle<sendpath_host::pattern::Verifier>,
    ) {
        let (addr, rx) = common::receiver(pause);
        let s = TcpStream::connect(addr).unwrap();
        s.set_nonblocking(true).unwrap();
        (s, rx)
    }

    /// Sends `count` messages of `size` pattern bytes in batches of 8 through `tx`.
    async fn stream(tx: &mut AsyncSender, size: usize, count: usize) -> u64 {
        stream_from(tx, 0, size, count).await
    }

    /// [`stream`] from stream offset `off`; the offset after the last byte.
    async fn stream_from(tx: &mut AsyncSender, mut off: u64, size: usize, count: usize) -> u64 {
        let mut batch = Vec::new();
        for _ in 0..count {
            let mut b = tx.take_buf(size);
            pattern::fill(b.as_mut_slice(), off);
            off += size as u64;
            batch.push(b);
            if batch.len() == 8 {
                tx.send_bufs(&mut batch).await.unwrap();
            }
        }
        tx.send_bufs(&mut batch).await.unwrap();
        off
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn every_async_path_closes_on_a_runtime_without_a_timer() {
        if !sendpath::probe().io_uring.send_zc {
            return common::skip("io_uring SEND_ZC unavailable here");
        }
        // I/O alone, no `enable_time`: the wait for the last completions in `close` must not
        // reach for tokio's timer, which panics on such a runtime.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        for strategy in [
            Strategy::Copy,
            Strategy::MsgZerocopy,
            Strategy::Uring,
            Strategy::UringZc,
        ] {
            let (s, rx) = connect(Duration::ZERO);
            let sent = rt.block_on(async {
                let mut tx = AsyncSender::open(strategy, s, &Options::default()).unwrap();
                let sent = stream(&mut tx, 65536, 40).await;
                let stats = tx.close(Duration::from_secs(5)).await.unwrap();
                assert_eq!((stats.bytes, stats.leaked_buffers), (sent, 0), "{strategy}");
                sent
            });
            let v = rx.join().unwrap();
            assert_eq!((v.mismatches, v.bytes_verified()), (0, sent), "{strategy}");
        }
    }

    /// A profile whose tiers name every memory path, so sizes cross between the socket and the
    /// ring, and copy and zero-copy on each.
    fn every_tier() -> Options {
        let tiers = [
            (0, Strategy::Copy),
            (1000, Strategy::Uring),
            (16_000, Strategy::MsgZerocopy),
            (100_000, Strategy::UringZc),
        ]
        .map(|(from_bytes, path)| Tier { from_bytes, path });
        Options {
            profile: Some(Arc::new(Profile::from_tiers(tiers.to_vec(), true).unwrap())),
            adaptive: sendpath::AdaptiveConfig {
                run_min: 4,
                ..Default::default()
            },
            ..Options::default()
        }
    }

    #[test]
    fn every_async_path_is_byte_exact() {
        if !sendpath::probe().io_uring.send_zc {
            return common::skip("io_uring SEND_ZC unavailable here");
        }
        let rt = runtime();
        for strategy in [
            Strategy::Copy,
            Strategy::MsgZerocopy,
            Strategy::Uring,
            Strategy::UringZc,
        ] {
            let (s, rx) = connect(Duration::from_millis(50));
            let sent = rt.block_on(async {
                let mut tx = AsyncSender::open(strategy, s, &Options::default()).unwrap();
                let sent = stream(&mut tx, 65536, 300).await;
                let stats = tx.close(Duration::from_secs(5)).await.unwrap();
                assert_eq!(
                    (stats.bytes, stats.sends, stats.leaked_buffers),
                    (sent, 300, 0)
                );
                if strategy.avoids_send_copy() {
                    let z = stats.zerocopy;
                    assert!(z.attempts > 0 && z.completions > 0, "{strategy}: {z:?}");
                }
                sent
            });
            let v = rx.join().unwrap();
            assert_eq!((v.mismatches, v.bytes_verified()), (0, sent), "{strategy}");
        }
        // adaptive across all four tiers, sizes in runs so it switches between the halves.
        let (s, rx) = connect(Duration::ZERO);
        let sent = rt.block_on(async {
            let mut tx = AsyncSender::open(Strategy::Adaptive, s, &every_tier()).unwrap();
            let (mut off, mut batch) = (0u64, Vec::new());
            for round in 0..40 {
                let size = [300, 4000, 50_000, 200_000][round % 4];
                for _ in 0..10 {
                    let mut b = tx.take_buf(size);
                    pattern::fill(b.as_mut_slice(), off);
                    off += size as u64;
                    batch.push(b);
                }
                tx.send_bufs(&mut batch).await.unwrap();
            }
            let stats = tx.close(Duration::from_secs(5)).await.unwrap();
            let d = stats.decisions.expect("adaptive counts its decisions");
            assert!(
                d.zerocopy_sends > 0 && d.copy_sends > 0 && d.switches > 0,
                "{d:?}"
            );
            assert_eq!(stats.bytes, off);
            off
        });
        let v = rx.join().unwrap();
        assert_eq!((v.mismatches, v.bytes_verified()), (0, sent), "adaptive");
    }

    #[test]
    fn async_sends_from_the_arena_go_by_index_and_stay_byte_exact() {
        if !sendpath::probe().io_uring.send_zc {
            return common::skip("io_uring SEND_ZC unavailable here");
        }
        let rt = runtime();
        let (s, rx) = connect(Duration::from_millis(20));
        let opts = Options {
            uring_arena: Some(sendpath::ArenaConfig::default()),
            ..Options::default()
        };
        let sent = rt.block_on(async {
            let mut tx = AsyncSender::open(Strategy::UringZc, s, &opts).unwrap();
            let sent = stream(&mut tx, 65536, 300).await;
            let stats = tx.close(Duration::from_secs(5)).await.unwrap();
            assert_eq!((stats.bytes, stats.leaked_buffers), (sent, 0));
            let a = stats.arena.expect("a ring with an arena counts it");
            assert!(a.slots > 0 && a.registered_requests > 0, "{a:?}");
            sent
        });
        let v = rx.join().unwrap();
        assert_eq!((v.mismatches, v.bytes_verified()), (0, sent));
    }

    #[test]
    fn sendfile_on_the_runtime_is_byte_exact() {
        let rt = runtime();
        let (s, rx) = connect(Duration::from_millis(50));
        let file = common::pattern_file(4 << 20);
        let opts = Options {
            file: Some(file),
            ..Options::default()
        };
        rt.block_on(async {
            let mut tx = AsyncSender::open(Strategy::Sendfile, s, &opts).unwrap();
            let ranges: Vec<_> = (0..64)
                .map(|i| sendpath::FileRange {
                    offset: i * 65536,
                    len: 65536,
                })
                .collect();
            tx.send_ranges(&ranges).await.unwrap();
            let stats = tx.close(Duration::from_secs(5)).await.unwrap();
            assert_eq!((stats.bytes, stats.sends), (4 << 20, 64));
        });
        let v = rx.join().unwrap();
        assert_eq!((v.mismatches, v.bytes_verified()), (0, 4 << 20));
    }

    /// On a runtime with one thread, a task that ticks every millisecond keeps ticking while the
    /// sender waits for a receiver that reads nothing for 300 ms: the sender awaits, it never
    /// blocks the thread.
    #[test]
    fn a_full_socket_never_blocks_the_runtime_thread() {
        if !sendpath::probe().io_uring.send_zc {
            return common::skip("io_uring SEND_ZC unavailable here");
        }
        for strategy in [Strategy::Copy, Strategy::MsgZerocopy, Strategy::UringZc] {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let (s, rx) = connect(Duration::from_millis(300));
            let ticks = Arc::new(AtomicU64::new(0));
            let sent = rt.block_on(async {
                let t = ticks.clone();
                let ticker = tokio::spawn(async move {
                    loop {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        t.fetch_add(1, Ordering::Relaxed);
                    }
                });
                let mut tx = AsyncSender::open(strategy, s, &Options::default()).unwrap();
                let sent = stream(&mut tx, 65536, 400).await;
                tx.close(Duration::from_secs(5)).await.unwrap();
                ticker.abort();
                sent
            });
            let n = ticks.load(Ordering::Relaxed);
            assert!(
                n >= 100,
                "{strategy}: the runtime thread ticked {n} times in the wait"
            );
            let v = rx.join().unwrap();
            assert_eq!((v.mismatches, v.bytes_verified()), (0, sent), "{strategy}");
        }
    }

    /// A send future dropped while the socket is full: what it handed in stays the sender's, no
    /// buffer is handed out again before the kernel's notification for it, and the next calls
    /// finish the stream whole.
    #[test]
    fn a_dropped_send_future_frees_nothing_the_kernel_holds() {
        let rt = runtime();
        for strategy in [Strategy::MsgZerocopy, Strategy::UringZc] {
            if strategy == Strategy::UringZc && !sendpath::probe().io_uring.send_zc {
                return common::skip("io_uring SEND_ZC unavailable here");
            }
            let (s, rx) = connect(Duration::from_millis(400));
            let sent = rt.block_on(async {
                let mut tx = AsyncSender::open(strategy, s, &Options::default()).unwrap();
                let (mut off, mut sent_at) = (0u64, std::collections::HashSet::new());
                let mut batch = Vec::new();
                // Fill the socket until a send has to wait, then drop that future.
                let mut dropped = false;
                while !dropped {
                    for _ in 0..8 {
                        let mut b = tx.take_buf(65536);
                        pattern::fill(b.as_mut_slice(), off);
                        off += 65536;
                        sent_at.insert(b.as_slice().as_ptr() as usize);
                        batch.push(b);
                    }
                    let send = tx.send_bufs(&mut batch);
                    dropped = tokio::time::timeout(Duration::from_millis(20), send)
                        .await
                        .is_err();
                }
                assert!(
                    batch.is_empty(),
                    "the batch was the sender's from the first poll"
                );
                // The receiver reads nothing yet: every buffer handed out now must be new memory.
                let held = tx.stats().zerocopy.completions;
                for _ in 0..16 {
                    let b = tx.take_buf(65536);
                    let p = b.as_slice().as_ptr() as usize;
                    if tx.stats().zerocopy.completions == held {
                        assert!(
                            !sent_at.contains(&p),
                            "{strategy}: a buffer in flight was reused"
                        );
                    }
                }
                // Then the stream goes on, and ends whole.
                let end = stream_from(&mut tx, off, 65536, 64).await;
                let stats = tx.close(Duration::from_secs(10)).await.unwrap();
                assert_eq!((stats.leaked_buffers, stats.bytes), (0, end));
                end
            });
            let v = rx.join().unwrap();
            assert_eq!(v.mismatches, 0, "{strategy}");
            assert_eq!(v.bytes_verified(), sent, "{strategy}: every byte, in order");
        }
    }

    #[test]
    fn misuse_is_refused_naming_why() {
        let rt = runtime();
        // A blocking socket: it would block a runtime thread.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let s = TcpStream::connect(addr).unwrap();
        let e = rt
            .block_on(async { AsyncSender::open(Strategy::Copy, s, &Options::default()) })
            .unwrap_err();
        assert!(e.to_string().contains("blocking mode"), "{e}");
        // No runtime on this thread.
        let s = TcpStream::connect(addr).unwrap();
        s.set_nonblocking(true).unwrap();
        let e = AsyncSender::open(Strategy::Copy, s, &Options::default()).unwrap_err();
        assert!(e.to_string().contains("tokio runtime"), "{e}");
        // A path with no async sender.
        let s = TcpStream::connect(addr).unwrap();
        s.set_nonblocking(true).unwrap();
        let e = rt
            .block_on(async { AsyncSender::open(Strategy::Vmsplice, s, &Options::default()) })
            .unwrap_err();
        assert!(e.to_string().contains("no async sender"), "{e}");
    }

    /// A peer that closes mid-stream: the next sends fail with the call and the errno (a
    /// closed peer, not a hang), and `close` still ends within its deadline.
    #[test]
    fn a_closed_peer_is_an_error_naming_the_call() {
        let rt = runtime();
        for strategy in [Strategy::Copy, Strategy::MsgZerocopy, Strategy::UringZc] {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            s.set_nonblocking(true).unwrap();
            let (peer, _) = l.accept().unwrap();
            let e = rt.block_on(async {
                let mut tx = AsyncSender::open(strategy, s, &Options::default()).unwrap();
                drop(peer);
                let mut failed = None;
                for _ in 0..2000 {
                    let b = tx.take_buf(65536);
                    let sent = tokio::time::timeout(Duration::from_secs(5), tx.send_buf(b));
                    match sent.await.expect("a send to a closed peer must not hang") {
                        Ok(()) => {}
                        Err(e) => {
                            failed = Some(e);
                            break;
                        }
                    }
                }
                let closed =
                    tokio::time::timeout(Duration::from_secs(5), tx.close(Duration::from_secs(1)));
                let _ = closed.await.expect("close ends within its deadline");
                failed
            });
            let e =
                e.unwrap_or_else(|| panic!("{strategy}: 2000 sends to a closed peer succeeded"));
            let errno = e.raw_os_error();
            assert!(
                matches!(errno, Some(libc::EPIPE | libc::ECONNRESET)),
                "{strategy}: {e} ({errno:?})"
            );
            assert!(
                e.to_string().contains("send") || e.to_string().contains("SEND"),
                "{strategy}: {e}"
            );
        }
    }

    /// A sender opened on one runtime and used on another after the first shut down, as
    /// `AsyncSender`'s docs say: the socket paths go on, the ring paths fail saying why;
    /// none hangs or panics.
    #[test]
    fn a_sender_outliving_its_runtime_goes_on_or_says_why() {
        for strategy in [Strategy::Copy, Strategy::MsgZerocopy, Strategy::UringZc] {
            let (s, rx) = connect(Duration::from_millis(200));
            let first = runtime();
            let mut tx = first
                .block_on(async { AsyncSender::open(strategy, s, &Options::default()) })
                .unwrap();
            drop(first);
            let second = runtime();
            let result = second.block_on(async {
                let go = async {
                    let mut batch = Vec::new();
                    let mut off = 0u64;
                    for _ in 0..256 {
                        let mut b = tx.take_buf(65536);
                        pattern::fill(b.as_mut_slice(), off);
                        off += 65536;
                        batch.push(b);
                        if batch.len() == 8 {
                            tx.send_bufs(&mut batch).await?;
                        }
                    }
                    tx.close(Duration::from_secs(5)).await.map(|s| s.bytes)
                };
                tokio::time::timeout(Duration::from_secs(20), go)
                    .await
                    .expect("a sender on another runtime must not hang")
            });
            let v = rx.join().unwrap();
            assert_eq!(v.mismatches, 0, "{strategy}");
            if strategy.on_ring() {
                // The ring joined the first runtime's reactor when it was opened.
                let e = result.unwrap_err().to_string();
                assert!(
                    e.contains("has shut down") && e.contains("runtime it was opened on"),
                    "{e}"
                );
            } else {
                // The socket joins the reactor of the runtime that first waits on it.
                let bytes = result.unwrap();
                assert_eq!(v.bytes_verified(), bytes, "{strategy}: every byte");
            }
        }
    }
}
