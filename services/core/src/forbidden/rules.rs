// The forbidden core's two tables. Plain constants only: the build script includes this
// file too, and determinises each table once, at build time (see `build.rs`).

/// Paths neither read nor written: the seed's eleven, then credential stores of the same
/// kind. Id and pattern.
pub const PATH_RULES: &[(&str, &str)] = &[
    // The seed's eleven.
    ("path.ssh", r"(^|/)\.ssh(/|$)"),
    ("path.etc_auth", r"^/etc/(passwd|shadow|sudoers)"),
    ("path.etc_ssh", r"^/etc/ssh(/|$)"),
    ("path.root_home", r"^/root(/|$)"),
    ("path.boot", r"^/boot(/|$)"),
    ("path.sys", r"^/sys(/|$)"),
    ("path.proc_pid", r"^/proc(/[0-9]|$)"),
    ("path.block_device", r"^/dev/(sd|nvme|mmcblk|loop)"),
    ("path.aws_credentials", r"\.aws/credentials"),
    ("path.app_credentials", r"\.config/[^/]+/credentials\.env"),
    ("path.gnupg", r"\.gnupg(/|$)"),
    // Beyond the seed, same kind.
    ("path.etc_gshadow", r"^/etc/gshadow"),
    (
        "path.etc_secrets",
        r"^/etc/(ssl/private|security/opasswd|krb5\.keytab|NetworkManager/system-connections|wireguard|ipsec\.secrets|ppp|letsencrypt|credstore(\.encrypted)?)(/|$)",
    ),
    (
        "path.proc_self_secrets",
        r"^/proc/(self|thread-self)/(environ|mem|maps)",
    ),
    (
        "path.proc_root",
        r"^/proc/(self|thread-self)/(root|cwd|fd)(/|$)",
    ),
    ("path.kube_config", r"(^|/)\.kube/config$"),
    ("path.docker_socket", r"^/(var/)?run/docker\.sock$"),
    ("path.docker_config", r"(^|/)\.docker/config\.json$"),
    ("path.netrc", r"(^|/)\.netrc$"),
    ("path.git_credentials", r"(^|/)\.git-credentials$"),
    ("path.pgpass", r"(^|/)\.pgpass$"),
    ("path.gh_hosts", r"(^|/)\.config/gh/hosts\.ya?ml$"),
    ("path.npmrc", r"(^|/)\.npmrc$"),
    ("path.pypirc", r"(^|/)\.pypirc$"),
    ("path.password_store", r"(^|/)\.password-store(/|$)"),
    ("path.keyrings", r"(^|/)\.local/share/keyrings(/|$)"),
    // Credentials other programs keep in the temp folder and the session's runtime folder:
    // Kerberos ticket caches, agent and multiplexer sockets, X authority.
    ("path.kerberos_cache", r"/krb5cc_[^/]*$"),
    (
        "path.tmp_sockets",
        r"^/tmp/(ssh-[^/]+|tmux-[0-9]+|\.X11-unix|\.ICE-unix|systemd-private-[^/]+|gpg-[^/]+|\.xauth[^/]*|serverauth\.[^/]+)(/|$)",
    ),
    ("path.run_user", r"^/run/user/[0-9]+(/|$)"),
    // The X server's cookie: whoever holds it drives the person's screen and keyboard.
    ("path.xauthority", r"(^|/)\.Xauthority$"),
    (
        "path.browser_profile",
        r"(^|/)(\.mozilla/firefox|\.config/(google-chrome|chromium|BraveSoftware|microsoft-edge)|snap/(firefox|chromium))(/|$)",
    ),
];

/// Paths not written (nor deleted): what runs code at login, at start-up or on a
/// schedule. Reading them is ordinary.
pub const WRITE_RULES: &[(&str, &str)] = &[
    (
        "write.shell_startup",
        r"(^|/)\.(bashrc|bash_profile|bash_login|bash_logout|profile|zshrc|zprofile|zshenv|zlogin|kshrc|inputrc|xprofile|xsession|xinitrc)$",
    ),
    ("write.fish_config", r"(^|/)\.config/fish(/|$)"),
    ("write.autostart", r"(^|/)\.config/autostart(/|$)"),
    ("write.systemd_user", r"(^|/)\.config/systemd(/|$)"),
    // The programs the person runs by name, Metnos's own among them (`make install`).
    ("write.user_bin", r"(^|/)\.local/bin(/|$)"),
    ("write.crontab", r"^/(var/spool/cron|etc/cron[^/]*)(/|$)"),
    (
        "write.etc_profile",
        r"^/etc/(profile|bash\.bashrc|environment)(\.d)?(/|$)",
    ),
    // A repository's own files: hooks, config (filters, fsmonitor, aliases) and the index
    // run or steer programs at the next git command. git itself writes them.
    ("write.git_internals", r"(^|/)\.git(/|$)"),
];
