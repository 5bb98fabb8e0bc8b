//! Sets `memgate_avx512` when the compiler has the AVX-512 intrinsics
//! (stable since Rust 1.89; the workspace's rust-version is older). Without
//! it the AVX-512 kernels are left out and the AVX2 ones run instead.

fn main() {
    println!("cargo:rustc-check-cfg=cfg(memgate_avx512)");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let minor = std::process::Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|v| {
            v.split(['.', ' '])
                .nth(2)
                .and_then(|m| m.parse::<u32>().ok())
        });
    if minor.is_some_and(|m| m >= 89) {
        println!("cargo:rustc-cfg=memgate_avx512");
    }
}
