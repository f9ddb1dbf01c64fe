//! Gives the shared library a SONAME, so that libascendcl.so and
//! libacl_rt.so (symlinks to it in an installed tree) resolve to the one
//! loaded copy and its state (devices, streams, communicators) is shared.
fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libhccl.so");
    }
}
