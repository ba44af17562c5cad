//! The everyday built-ins (`fs_read`, `fs_write`, `fs_list`, `time_now`): `metnos-exec
//! <name>` reads the args JSON on stdin and writes one observation on stdout (its context
//! comes in METNOS_EXECUTOR_CONTEXT).

use std::process::ExitCode;

fn main() -> ExitCode {
    metnos_executors::program::main(metnos_executors::builtin::run_exec)
}
