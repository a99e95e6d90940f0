// A reference into a batch cannot outlive the call that sends it: the batch is sent (and
// emptied) through a mutable borrow, so the buffer cannot be read or written afterwards.
fn main() -> sendpath::Result<()> {
    let sock = std::net::TcpStream::connect("127.0.0.1:9").unwrap();
    let mut path = sendpath::open(sendpath::Strategy::UringZc, sock, &Default::default())?;
    let mut batch: Vec<_> = (0..8).map(|_| path.take_buf(4096)).collect();
    let first = &mut batch[0];
    path.send_bufs(&mut batch)?;
    first.as_mut_slice()[0] = 1;
    Ok(())
}
