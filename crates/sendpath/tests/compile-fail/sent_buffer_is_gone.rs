// A buffer handed to a send is moved in: writing to it after the send does not compile, so
// no safe code can change bytes the kernel may still be reading (a zero-copy send's).
fn main() -> sendpath::Result<()> {
    let sock = std::net::TcpStream::connect("127.0.0.1:9").unwrap();
    let mut path = sendpath::open(sendpath::Strategy::MsgZerocopy, sock, &Default::default())?;
    let mut buf = path.take_buf(4096);
    path.send_buf(buf)?;
    buf.as_mut_slice()[0] = 1;
    Ok(())
}
