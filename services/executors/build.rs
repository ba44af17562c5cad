//! Links the executors' programs with their relative relocations packed (DT_RELR, glibc
//! 2.36 and later): a program starts at every call, and the dynamic loader reads and walks
//! its `.rela.dyn` (13 000 to 65 000 entries) each time (issue 45). Packed, that table is
//! a few kilobytes; where the linker does not know the option it warns and links as
//! before.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let linux_gnu = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux")
        && std::env::var("CARGO_CFG_TARGET_ENV").is_ok_and(|env| env == "gnu");
    if linux_gnu {
        println!("cargo::rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
