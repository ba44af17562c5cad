//! `metnos-policy`: the policy service as a standalone process.

fn main() -> std::process::ExitCode {
    metnos_kit::run_service(metnos_policy::SERVICE, metnos_policy::serve)
}
