// The bytes a receive handed over are read while the ring lends them; after the buffer is
// given back to the kernel (which may receive into it again) they cannot be read.
fn on_received(ring: &mut sendpath::UringDriver, buf: sendpath::RecvBuf) {
    let data = ring.received(&buf);
    ring.recycle(buf);
    println!("{}", data[0]);
}

fn main() {}
