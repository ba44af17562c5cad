//! `shell_exec` in a program of its own: `metnos-shell shell_exec` builds the box, then
//! reads its call and runs the command in it; `metnos-shell shell_exec_box` is the box's
//! init, which `shell_exec` starts itself (this same file, through /proc/self/exe). Apart
//! from the other built-ins, so each run loads a small program twice instead of a large one.

fn main() -> std::process::ExitCode {
    metnos_executors::builtin::shell_exec::program_main()
}
