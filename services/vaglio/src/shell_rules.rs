// The vaglio's shell rules. Plain constants only: the build script includes this file too,
// and determinises the table once, at build time (see `build.rs`).

/// The seed's six dangerous-shell patterns, matched on the command text as written.
pub const SHELL_RULES: &[(&str, &str)] = &[
    ("shell.rm_rf_root", r"\brm\s+-rf?\s+/(\s|$)"),
    ("shell.rm_rf_home", r"\brm\s+-rf?\s+~(\s|$|/)"),
    ("shell.mkfs", r"\bmkfs\b"),
    ("shell.dd_device", r"\bdd\s+.*\bof=/dev/"),
    (
        "shell.fork_bomb",
        r":\s*\(\s*\)\s*\{\s*:\s*\|\s*:\s*&\s*;?\s*\}",
    ),
    ("shell.chmod_777", r"\bchmod\s+-?R?\s*0?77[0-9]\s+/"),
];
