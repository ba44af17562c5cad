//! `metnos-planner`: the planner service as a standalone process.

fn main() -> std::process::ExitCode {
    metnos_kit::run_service(metnos_planner::SERVICE, metnos_planner::serve)
}
