//! `metnos-approval`: the approval service as a standalone process.

fn main() -> std::process::ExitCode {
    metnos_kit::run_service(metnos_approval::SERVICE, metnos_approval::serve)
}
