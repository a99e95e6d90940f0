// A slot of the arena written in place belongs to the ring once committed, until the
// kernel's last completion for it: the caller cannot write it again.
fn main() -> sendpath::Result<()> {
    let mut ring = sendpath::UringDriver::new(sendpath::DriverConfig::default())?;
    let sock = std::net::TcpStream::connect("127.0.0.1:9").unwrap();
    let id = ring.add(sock, sendpath::Strategy::UringZc)?;
    let mut msg = ring.reserve(id, 4096)?;
    msg.fill(b'x');
    msg.commit()?;
    msg[0] = b'y';
    Ok(())
}
