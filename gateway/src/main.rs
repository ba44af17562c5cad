//! `metnos-gateway`: the gateway service as a standalone process.

fn main() -> std::process::ExitCode {
    metnos_kit::run_service(metnos_gateway::SERVICE, metnos_gateway::serve)
}
