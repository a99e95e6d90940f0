//! What the types forbid, shown by programs that must not compile: touching a buffer or an
//! arena slot the kernel may still read, running the ring while a slot is half written, or
//! bytes the ring lent after giving them back. Each case's error is kept beside it
//! (`compile-fail/*.stderr`; `TRYBUILD=overwrite` rewrites them).

#[test]
fn what_the_kernel_holds_cannot_be_touched() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile-fail/*.rs");
}
