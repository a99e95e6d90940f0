// A buffer queued on a ring connection belongs to the ring until its last completion; the
// caller gets it back only when the push is refused.
fn main() -> sendpath::Result<()> {
    let mut ring = sendpath::UringDriver::new(sendpath::DriverConfig::default())?;
    let sock = std::net::TcpStream::connect("127.0.0.1:9").unwrap();
    let id = ring.add(sock, sendpath::Strategy::UringZc)?;
    let buf = ring.take_buf(id, 4096)?;
    let _ = ring.push(id, buf, true);
    println!("{}", buf.len());
    Ok(())
}
