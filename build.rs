//! Links `metnos` with its relative relocations packed (DT_RELR, glibc 2.36 and later):
//! the 126 000 entries of its `.rela.dyn` are 3 MB the dynamic loader reads and walks at
//! every start, and those pages then stay in the process's memory (issue 45). Packed,
//! they are a few kilobytes; where the linker does not know the option it warns and links
//! as before.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let linux_gnu = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux")
        && std::env::var("CARGO_CFG_TARGET_ENV").is_ok_and(|env| env == "gnu");
    if linux_gnu {
        println!("cargo::rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
