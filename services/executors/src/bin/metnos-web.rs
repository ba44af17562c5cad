//! The built-ins that read documents from the world (`web_fetch`, `parse_local`): the
//! HTTP client and the HTML and CSV parsers load only in this program.

use std::process::ExitCode;

fn main() -> ExitCode {
    metnos_executors::program::main(metnos_executors::builtin::run_web)
}
