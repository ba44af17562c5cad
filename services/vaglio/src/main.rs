//! `metnos-vaglio`: the vaglio service as a standalone process.

fn main() -> std::process::ExitCode {
    metnos_kit::run_service(metnos_vaglio::SERVICE, metnos_vaglio::serve)
}
