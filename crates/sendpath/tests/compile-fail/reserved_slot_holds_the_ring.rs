// While a slot is reserved, the ring cannot run: nothing can submit a half-written message.
fn main() -> sendpath::Result<()> {
    let mut ring = sendpath::UringDriver::new(sendpath::DriverConfig::default())?;
    let sock = std::net::TcpStream::connect("127.0.0.1:9").unwrap();
    let id = ring.add(sock, sendpath::Strategy::UringZc)?;
    let mut msg = ring.reserve(id, 4096)?;
    ring.run(false)?;
    msg.fill(b'x');
    msg.commit()
}
