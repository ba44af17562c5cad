//! Determinises the forbidden core's two rule tables once, here, rather than at every
//! start of the vaglio (tens of milliseconds of CPU for the path rules), and writes each
//! automaton's bytes, in the target's byte order, for `forbidden.rs` to load.

use std::path::PathBuf;

#[allow(dead_code)]
mod rules {
    include!("src/forbidden/rules.rs");
}
#[allow(dead_code)]
mod ahead {
    include!("src/forbidden/ahead.rs");
}

fn main() {
    println!("cargo::rerun-if-changed=src/forbidden/rules.rs");
    println!("cargo::rerun-if-changed=src/forbidden/ahead.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let big_endian = std::env::var("CARGO_CFG_TARGET_ENDIAN").is_ok_and(|e| e == "big");
    for (name, table) in [("paths", rules::PATH_RULES), ("writes", rules::WRITE_RULES)] {
        let patterns: Vec<&str> = table.iter().map(|(_, pattern)| *pattern).collect();
        let bytes = ahead::bytes(&patterns, big_endian);
        let file = out.join(format!("{name}.dfa"));
        std::fs::write(&file, &bytes)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", file.display()));
    }
}
