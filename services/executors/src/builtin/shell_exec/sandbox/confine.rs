//! The init's confinement, in order: resource limits, its own `/proc`, no user namespaces
//! of the command's own, no capabilities, no-new-privileges, the seccomp filter refusing
//! local sockets and kernel keyrings, and Landlock last (see the box's map in `sandbox.rs`).

use std::path::{Path, PathBuf};

use super::{DEVICES, ETC_READABLE, NAMESPACES, PID_MAX_MIN, Plan, Protections, SYSTEM_READABLE};

/// Every protection of the init's, in order (what needs /proc/sys before Landlock,
/// Landlock last); returns what holds.
pub(super) fn confine(plan: &Plan) -> Protections {
    let mut p = Protections {
        namespaces: if plan.namespaces {
            NAMESPACES.map(str::to_owned).to_vec()
        } else {
            Vec::new()
        },
        tree_killed: plan.namespaces,
        network: plan.namespaces,
        ..Protections::default()
    };
    #[cfg(target_os = "linux")]
    {
        p.no_terminal = rustix::process::setsid().is_ok();
        p.process_limit = limit_resources(plan);
        if plan.namespaces {
            p.no_nested_user_namespaces =
                std::fs::write("/proc/sys/user/max_user_namespaces", "0").is_ok();
            p.own_proc = mount_own_proc().is_ok();
        }
        p.no_capabilities = drop_capabilities();
        p.no_new_privs = rustix::thread::set_no_new_privs(true).is_ok();
        landlock(plan, &mut p);
        p.no_local_sockets = refuse_local_sockets().is_ok();
    }
    #[cfg(not(target_os = "linux"))]
    {
        p.landlock = "not enforced: not available on this operating system".to_owned();
        p.process_limit = "none".to_owned();
    }
    p
}

/// CPU, address space, file size and process limits, inherited by the command; says how
/// the process limit holds. Root (outside) is exempt from RLIMIT_NPROC, so for root the
/// limit is the PID namespace's `pid_max`, which the kernel keeps per namespace since 6.14
/// (on older kernels that file is the whole machine's, and is left alone).
#[cfg(target_os = "linux")]
fn limit_resources(plan: &Plan) -> String {
    use rustix::process::{Resource, Rlimit, setrlimit};
    let limits = plan.limits;
    let mb = |n: u64| n.saturating_mul(1024 * 1024);
    for (resource, soft, hard) in [
        (
            Resource::Cpu,
            limits.cpu_seconds,
            limits.cpu_seconds.saturating_add(1),
        ),
        (Resource::As, mb(limits.memory_mb), mb(limits.memory_mb)),
        (
            Resource::Fsize,
            mb(limits.file_size_mb),
            mb(limits.file_size_mb),
        ),
        (Resource::Nproc, limits.processes, limits.processes),
    ] {
        if soft == 0 {
            continue;
        }
        // Never above the limit already in force (raising it would fail): at least as strict.
        let held = rustix::process::getrlimit(resource).maximum;
        let clamp = |n: u64| held.map_or(n, |h| n.min(h));
        let _ = setrlimit(
            resource,
            Rlimit {
                current: Some(clamp(soft)),
                maximum: Some(clamp(hard)),
            },
        );
    }
    let nproc = rustix::process::getrlimit(Resource::Nproc).current;
    if plan.outer_uid != 0 {
        return match nproc {
            Some(n) => format!("{n} (RLIMIT_NPROC)"),
            None => "none".to_owned(),
        };
    }
    if !plan.namespaces {
        return "none: root is exempt from RLIMIT_NPROC and there is no PID namespace".into();
    }
    if !kernel_at_least(6, 14) {
        return "none: root is exempt from RLIMIT_NPROC and this kernel keeps no pid_max per PID namespace (before 6.14)".into();
    }
    let pid_max = limits.processes.saturating_add(1).max(PID_MAX_MIN);
    match std::fs::write("/proc/sys/kernel/pid_max", pid_max.to_string()) {
        Ok(()) => format!(
            "{} (pid_max of the command's PID namespace; root is exempt from RLIMIT_NPROC)",
            pid_max - 1
        ),
        Err(e) => format!("none: root is exempt from RLIMIT_NPROC and pid_max: {e}"),
    }
}

/// A `/proc` of the box's own PID namespace over the host's, in the box's own mount
/// namespace (nothing propagates back): `ps` and `/proc/<pid>/cmdline` show only the
/// command's processes. The kernel refuses it where the host's `/proc` is partly hidden
/// (a container's masked paths); the host's then stays, its other processes' files still
/// refused by Landlock.
#[cfg(target_os = "linux")]
fn mount_own_proc() -> rustix::io::Result<()> {
    use rustix::mount::{MountFlags, MountPropagationFlags, mount, mount_change};
    mount_change(
        "/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )?;
    mount(
        "proc",
        "/proc",
        "proc",
        MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        None,
    )
}

/// A seccomp filter, inherited by the command, for what Landlock and the namespaces do not
/// keep inside: `socket()` only for the network's families (IPv4, IPv6, netlink: nothing
/// to reach in the box's empty network namespace), so no Unix-domain socket is connected
/// to a path outside the box (the person's D-Bus and systemd at `/run/user/<uid>/bus`, an
/// ssh-agent in `/tmp`, Docker's socket: a path's socket is no file Landlock guards), nor a
/// VM's vsock; no `socketpair()` but a stream or seqpacket one (a datagram pair's end, or
/// a `SOCK_RAW` one's, may send to such a path: journald's socket, a user manager's notify
/// socket); no io_uring, whose operations would go around the filter; no kernel keyring
/// (not namespaced: the person's session keys, and `request_key` upcalls run as root
/// outside the box). The same calls by their x32 numbers too. A stream or seqpacket
/// `socketpair()` stays: it reaches nothing.
/// Why the seccomp filter was not built or not applied (nobody reads it: the protection
/// is reported as missing).
#[cfg(target_os = "linux")]
#[derive(Debug, thiserror::Error)]
enum SeccompError {
    #[error(transparent)]
    Build(#[from] seccompiler::BackendError),
    #[error(transparent)]
    Apply(#[from] seccompiler::Error),
}

#[cfg(target_os = "linux")]
fn refuse_local_sockets() -> Result<(), SeccompError> {
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    };
    let err = SeccompError::Build;
    let arg = |index: u8, op: SeccompCmpOp, value: i32| {
        SeccompCondition::new(
            index,
            SeccompCmpArgLen::Dword,
            op,
            u64::from(value.unsigned_abs()),
        )
        .map_err(err)
    };
    let other_families = SeccompRule::new(vec![
        arg(0, SeccompCmpOp::Ne, libc::AF_INET)?,
        arg(0, SeccompCmpOp::Ne, libc::AF_INET6)?,
        arg(0, SeccompCmpOp::Ne, libc::AF_NETLINK)?,
    ])
    .map_err(err)?;
    // socketpair(): a stream or a seqpacket pair only (a `SOCK_RAW` pair is a datagram
    // pair to the kernel): one rule per other type, the flags above the type masked off.
    let other_pairs = (0..=0xf)
        .filter(|kind| ![libc::SOCK_STREAM, libc::SOCK_SEQPACKET].contains(kind))
        .map(|kind| SeccompRule::new(vec![arg(1, SeccompCmpOp::MaskedEq(0xf), kind)?]).map_err(err))
        .collect::<Result<Vec<_>, _>>()?;
    let mut rules = std::collections::BTreeMap::new();
    for (call, when) in [
        (libc::SYS_socket, vec![other_families]),
        (libc::SYS_socketpair, other_pairs),
        (libc::SYS_io_uring_setup, Vec::new()),
        (libc::SYS_io_uring_enter, Vec::new()),
        (libc::SYS_io_uring_register, Vec::new()),
        (libc::SYS_add_key, Vec::new()),
        (libc::SYS_keyctl, Vec::new()),
        (libc::SYS_request_key, Vec::new()),
    ] {
        // x32's number for the same call: the same architecture in the filter's eyes.
        #[cfg(target_arch = "x86_64")]
        rules.insert(call | X32_SYSCALL_BIT, when.clone());
        rules.insert(call, when);
    }
    let arch = std::env::consts::ARCH.try_into().map_err(err)?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES.unsigned_abs()),
        arch,
    )
    .map_err(err)?;
    let program: seccompiler::BpfProgram = filter.try_into().map_err(err)?;
    Ok(seccompiler::apply_filter(&program)?)
}

/// The bit x32 programs set in their system call numbers (x86_64 kernels that enable x32).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
const X32_SYSCALL_BIT: i64 = 0x4000_0000;

/// Whether the running kernel's release is at least `major.minor`.
#[cfg(target_os = "linux")]
pub(super) fn kernel_at_least(major: u32, minor: u32) -> bool {
    let uname = rustix::system::uname();
    let release = uname.release().to_string_lossy();
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let found = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    found >= (major, minor)
}

/// The command gets no capability: root's are not granted on exec (`SECBIT_NOROOT`,
/// locked) and none can be raised as ambient. Without the right to set them (no
/// capabilities here either), the command has none to begin with.
#[cfg(target_os = "linux")]
fn drop_capabilities() -> bool {
    use rustix::thread::CapabilitiesSecureBits as Bits;
    let bits = Bits::NO_ROOT
        | Bits::NO_ROOT_LOCKED
        | Bits::NO_SETUID_FIXUP
        | Bits::NO_SETUID_FIXUP_LOCKED
        | Bits::NO_CAP_AMBIENT_RAISE
        | Bits::NO_CAP_AMBIENT_RAISE_LOCKED;
    if rustix::thread::set_capabilities_secure_bits(bits).is_ok() {
        return true;
    }
    rustix::thread::capabilities(None).is_ok_and(|sets| sets.permitted.is_empty())
}

/// Landlock: writes only in the workspace, the per-run home and `/dev/null`; reading and
/// executing only the system's folders ([`SYSTEM_READABLE`]) and what the person added,
/// never what the plan hides (Metnos's own folders, credential stores, the system's
/// secrets: `metnos_core::forbidden::usual_places`); no TCP bind or
/// connect; signals and abstract sockets kept inside.
#[cfg(target_os = "linux")]
fn landlock(plan: &Plan, p: &mut Protections) {
    use landlock::{
        ABI, Access, AccessFs, AccessNet, LandlockStatus, Ruleset, RulesetAttr, RulesetCreatedAttr,
        RulesetStatus, Scope, path_beneath_rules,
    };
    let fs = ABI::V5;
    let all = AccessFs::from_all(fs);
    let read = AccessFs::from_read(fs);
    let result = Ruleset::default()
        .handle_access(all)
        .and_then(|r| r.handle_access(AccessNet::from_all(ABI::V4)))
        .and_then(|r| r.scope(Scope::from_all(ABI::V6)))
        .and_then(|r| r.create())
        .and_then(|r| r.add_rules(path_beneath_rules(readable_roots(plan), read)))
        .and_then(|r| r.add_rules(path_beneath_rules(DEVICES, read)))
        .and_then(|r| r.add_rules(path_beneath_rules([&plan.workspace, &plan.home], all)))
        .and_then(|r| r.add_rules(path_beneath_rules(["/dev/null"], all)))
        .and_then(|r| r.restrict_self());
    let status = match result {
        Ok(status) => status,
        Err(e) => {
            p.landlock = format!("not enforced: {e}");
            return;
        }
    };
    p.landlock = match status.ruleset {
        RulesetStatus::FullyEnforced => "enforced".to_owned(),
        RulesetStatus::PartiallyEnforced => "partially enforced".to_owned(),
        RulesetStatus::NotEnforced => "not enforced: this kernel has no Landlock".to_owned(),
    };
    p.no_new_privs |= status.no_new_privs;
    if let LandlockStatus::Available {
        effective_abi,
        kernel_abi,
    } = status.landlock
    {
        let abi = kernel_abi
            .and_then(|v| u32::try_from(v).ok())
            .unwrap_or(effective_abi as u32);
        p.landlock_abi = Some(abi);
        let enforced = status.ruleset != RulesetStatus::NotEnforced;
        p.landlock_tcp = enforced && effective_abi >= ABI::V4;
        p.landlock_scoped = enforced && effective_abi >= ABI::V6;
    }
}

/// The folders a command may read under `plan`: the system's ([`SYSTEM_READABLE`],
/// [`ETC_READABLE`]) and the person's additions, less what the plan hides.
pub fn readable_roots(plan: &Plan) -> Vec<PathBuf> {
    let etc = Path::new("/etc");
    let bases: Vec<PathBuf> = SYSTEM_READABLE
        .iter()
        .map(PathBuf::from)
        .chain(ETC_READABLE.iter().map(|entry| etc.join(entry)))
        .chain(plan.readable.iter().cloned())
        .collect();
    granted_beneath(&bases, &plan.hidden)
}

/// What to grant so that everything beneath `bases` is readable except what lies beneath
/// `hidden`: a base holding nothing hidden whole, else, along the path from the base to
/// each hidden entry, every other entry of each folder on the way. (Landlock only grants,
/// so what is not granted is refused; the folders on the way cannot be listed themselves.)
/// A hidden folder inside another (the certificates in the data directory) is hidden with
/// it: the outer one is never on the way, so none of its entries is granted. A base inside
/// a hidden folder is not granted at all.
pub fn granted_beneath(bases: &[PathBuf], hidden: &[PathBuf]) -> Vec<PathBuf> {
    use std::collections::BTreeSet;
    let hidden: Vec<&Path> = hidden
        .iter()
        .map(PathBuf::as_path)
        .filter(|h| {
            !hidden
                .iter()
                .any(|other| h.starts_with(other) && h != other)
        })
        .collect();
    let mut roots = Vec::new();
    for base in bases {
        if hidden.iter().any(|h| base.starts_with(h)) {
            continue;
        }
        let inside: Vec<&Path> = hidden
            .iter()
            .copied()
            .filter(|h| h.starts_with(base))
            .collect();
        if inside.is_empty() {
            roots.push(base.clone());
            continue;
        }
        let on_the_way: BTreeSet<&Path> = inside
            .iter()
            .flat_map(|h| h.ancestors().skip(1))
            .filter(|dir| dir.starts_with(base))
            .collect();
        for dir in &on_the_way {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if !on_the_way.contains(path.as_path()) && !inside.contains(&path.as_path()) {
                    roots.push(path);
                }
            }
        }
    }
    roots
}
