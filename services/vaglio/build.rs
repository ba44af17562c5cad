//! Determinises the vaglio's shell rules once, here, rather than at every start (about
//! 4 ms of CPU), with the forbidden core's own builder, and writes the automaton's bytes
//! in the target's byte order for `guard.rs` to load (a build for another byte order
//! builds it at run time instead: slower to start, the same answers).

use std::path::PathBuf;

#[allow(dead_code)]
mod shell_rules {
    include!("src/shell_rules.rs");
}
#[allow(dead_code)]
mod ahead {
    include!("../core/src/forbidden/ahead.rs");
}

fn main() {
    println!("cargo::rerun-if-changed=src/shell_rules.rs");
    println!("cargo::rerun-if-changed=../core/src/forbidden/ahead.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let big_endian = std::env::var("CARGO_CFG_TARGET_ENDIAN").is_ok_and(|e| e == "big");
    let patterns: Vec<&str> = shell_rules::SHELL_RULES
        .iter()
        .map(|(_, pattern)| *pattern)
        .collect();
    let bytes = ahead::bytes(&patterns, big_endian);
    let file = out.join("shell.dfa");
    std::fs::write(&file, &bytes)
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", file.display()));
}
