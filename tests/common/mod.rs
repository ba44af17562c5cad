//! Helpers for the system tests: the `metnos` binary in an isolated environment.

#![allow(dead_code)] // each test file uses a part

pub mod otlp;
pub mod telegram;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use metnos_kit::client::TracedChannel;
use metnos_kit::tls::{Identity, Tls};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Bound on how long a started stack may take to report its addresses: a hang guard,
/// not a performance assertion.
pub const START_LIMIT: Duration = Duration::from_secs(60);

/// A scratch home: data directory, HOME and working directory of the commands run.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
    pub env: BTreeMap<String, String>,
}

impl Sandbox {
    /// Every service on `127.0.0.1:0`, data under the sandbox, no config file.
    pub fn new() -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        let mut env = BTreeMap::new();
        env.insert("HOME".to_owned(), dir.path().display().to_string());
        env.insert(
            "METNOS_DATA_DIR".to_owned(),
            dir.path().join("data").display().to_string(),
        );
        for service in ["POLICY", "VAGLIO", "APPROVAL", "PLANNER", "GATEWAY"] {
            env.insert(
                format!("METNOS_{service}__LISTEN"),
                "127.0.0.1:0".to_owned(),
            );
        }
        env.insert("METNOS_TELEMETRY__LOG".to_owned(), "warn".to_owned());
        // A stack stopped by a test waits less for calls still running than a user's would.
        env.insert(
            "METNOS_SERVER__SHUTDOWN_GRACE_SECONDS".to_owned(),
            "3".to_owned(),
        );
        Sandbox { dir, env }
    }

    pub fn set(&mut self, key: &str, value: &str) -> &mut Self {
        self.env.insert(key.to_owned(), value.to_owned());
        self
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// A command for one of this workspace's binaries, in this sandbox only.
    pub fn command(&self, program: &Path) -> Command {
        let mut command = Command::new(program);
        command.env_clear();
        if let Ok(path) = std::env::var("PATH") {
            command.env("PATH", path);
        }
        command.envs(&self.env).current_dir(self.dir.path());
        command.kill_on_drop(true);
        command
    }

    pub fn metnos(&self) -> Command {
        self.command(Path::new(env!("CARGO_BIN_EXE_metnos")))
    }

    /// Runs `metnos <args>` to completion: (exit code, stdout, stderr).
    pub async fn run(&self, args: &[&str]) -> (i32, String, String) {
        let output = self.metnos().args(args).output().await.unwrap();
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    /// Runs `metnos <args>` to completion with `input` on its stdin (a pipe, as a script
    /// would give it, closed after it).
    pub async fn run_with_input(&self, args: &[&str], input: &[u8]) -> std::process::Output {
        use tokio::io::AsyncWriteExt;
        let mut child = self
            .metnos()
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input).await.unwrap();
        drop(stdin);
        child.wait_with_output().await.unwrap()
    }

    /// `metnos pki init`: the certificates a service binary started on its own needs.
    pub async fn pki_init(&self) {
        let (code, _, stderr) = self.run(&["pki", "init"]).await;
        assert_eq!(code, 0, "metnos pki init: {stderr}");
    }

    /// Starts `metnos up` and waits for its five address lines.
    pub async fn up(&self) -> Up {
        let mut command = self.metnos();
        command.arg("up");
        self.up_with(command).await
    }

    /// As [`Sandbox::up`], with its info lines on stderr too (`--verbose`).
    pub async fn up_verbose(&self) -> Up {
        let mut command = self.metnos();
        command.args(["up", "--verbose"]);
        self.up_with(command).await
    }

    /// Signs `text` as the owner's TELOS.md, as the owner would (`metnos telos edit --yes`
    /// with an editor that writes it).
    pub async fn sign_telos(&self, text: &str) {
        let source = self.dir.path().join("telos.md");
        std::fs::write(&source, text).unwrap();
        let signed = self
            .metnos()
            .args(["telos", "edit", "--yes"])
            .env("EDITOR", format!("cp {}", source.display()))
            .output()
            .await
            .unwrap();
        assert!(
            signed.status.success(),
            "{}",
            String::from_utf8_lossy(&signed.stderr)
        );
    }

    /// Everything `metnos up` logged to its files so far.
    pub fn logged(&self) -> String {
        let dir = self.data_dir().join("logs");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map(|d| d.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default();
        files.sort();
        files
            .iter()
            .map(|f| std::fs::read_to_string(f).unwrap())
            .collect()
    }

    /// As [`Sandbox::up`], with `command` (which runs `metnos up`, e.g. under strace).
    pub async fn up_with(&self, mut command: Command) -> Up {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        // Its stderr is read as it comes: a stack logging more than a pipe holds (64 KiB
        // of refusals, say) must never block on a full pipe.
        let stderr = child.stderr.take().unwrap();
        let log = tokio::spawn(async move {
            let mut text = String::new();
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                text.push_str(&line);
                text.push('\n');
            }
            text
        });
        let mut lines = BufReader::new(stdout).lines();
        let mut addrs = Vec::new();
        let read = async {
            while addrs.len() < 5 {
                let Some(line) = lines.next_line().await.unwrap() else {
                    break;
                };
                let (name, addr) = line
                    .split_once(' ')
                    .unwrap_or_else(|| panic!("unexpected line from metnos up: {line:?}"));
                addrs.push((name.to_owned(), addr.parse::<SocketAddr>().unwrap()));
            }
        };
        if tokio::time::timeout(START_LIMIT, read).await.is_err() {
            panic!("metnos up printed no addresses within {START_LIMIT:?}");
        }
        if addrs.len() < 5 {
            let status = child.wait().await.unwrap();
            panic!(
                "metnos up exited early ({status:?}): {}",
                log.await.unwrap_or_default()
            );
        }
        Up {
            child,
            addrs,
            pki: self.data_dir().join("pki"),
            log,
        }
    }

    /// `identity`'s certificate, as the stack's first run made it.
    pub fn tls(&self, identity: Identity) -> Tls {
        tls_in(&self.data_dir().join("pki"), identity)
    }
}

/// `identity`'s certificate from the built-in PKI in `dir`.
pub fn tls_in(dir: &Path, identity: Identity) -> Tls {
    let mut config = metnos_kit::Config::default();
    config.tls.dir = dir.to_path_buf();
    Tls::load(&config, identity).expect("the stack's certificates")
}

/// A running `metnos up`.
pub struct Up {
    pub child: Child,
    /// (service, address) in the order printed.
    pub addrs: Vec<(String, SocketAddr)>,
    /// Where the stack's certificates are.
    pub pki: PathBuf,
    /// Its stderr, read as it comes, whole once it exits.
    log: tokio::task::JoinHandle<String>,
}

impl Up {
    pub fn addr(&self, service: &str) -> SocketAddr {
        self.addrs
            .iter()
            .find(|(name, _)| name == service)
            .map(|(_, addr)| *addr)
            .unwrap_or_else(|| panic!("no {service} in {:?}", self.addrs))
    }

    pub fn url(&self, service: &str) -> String {
        format!("http://{}", self.addr(service))
    }

    /// A channel to `service` presenting `identity`'s certificate.
    pub fn channel_as(&self, service: &str, identity: Identity) -> TracedChannel {
        let server = Identity::ALL
            .into_iter()
            .find(|i| i.name() == service)
            .unwrap_or_else(|| panic!("no service {service}"));
        metnos_kit::client::channel(&tls_in(&self.pki, identity), server, &self.url(service))
            .expect("a valid URL")
    }

    /// A TLS channel to `service` that presents no certificate (the server's is checked).
    pub fn channel_without_certificate(&self, service: &str) -> tonic::transport::Channel {
        let ca = std::fs::read(self.pki.join("ca.crt")).expect("the CA certificate");
        let tls = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(ca))
            .domain_name(format!("{service}.metnos"));
        tonic::transport::Endpoint::from_shared(format!("https://{}", self.addr(service)))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect_lazy()
    }

    /// A channel to `service` as the owner (what the CLI presents).
    pub fn channel(&self, service: &str) -> TracedChannel {
        self.channel_as(service, Identity::Owner)
    }

    /// grpcurl's arguments for the owner's certificate (and the CA that signed the
    /// services').
    pub fn grpcurl_tls(&self) -> Vec<String> {
        let path = |name: &str| self.pki.join(name).display().to_string();
        vec![
            "-cacert".to_owned(),
            path("ca.crt"),
            "-cert".to_owned(),
            path("owner.crt"),
            "-key".to_owned(),
            path("owner.key"),
        ]
    }

    /// Sends SIGINT (what Ctrl-C sends) and waits: (exit code, stderr). A stack that does
    /// not stop in time is killed and its log shown, to tell which service held on.
    pub async fn interrupt(mut self) -> (i32, String) {
        signal(&self.child, "INT").await;
        let status = tokio::time::timeout(START_LIMIT, self.child.wait()).await;
        if status.is_err() {
            let _ = self.child.start_kill();
            let _ = self.child.wait().await;
        }
        let text = (&mut self.log).await.unwrap_or_default();
        // No thread of the stack may have panicked, whatever the test was about.
        assert!(
            !text.contains("panicked at"),
            "a thread of metnos up panicked; its log:\n{text}"
        );
        match status {
            Ok(status) => (status.unwrap().code().unwrap_or(-1), text),
            Err(_) => {
                panic!("metnos up did not stop within {START_LIMIT:?} of SIGINT; its log:\n{text}")
            }
        }
    }
}

/// Sends a signal (`INT`, `TERM`) to a child process.
pub async fn signal(child: &Child, name: &str) {
    let pid = child.id().expect("child is running");
    let status = Command::new("kill")
        .args([format!("-{name}"), pid.to_string()])
        .status()
        .await
        .unwrap();
    assert!(status.success(), "kill -{name} {pid} failed");
}

/// A binary of another workspace member, built beside `metnos` by `make build-all`.
pub fn sibling_binary(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_BIN_EXE_metnos")).with_file_name(name);
    assert!(
        path.is_file(),
        "{} is not built; build the whole workspace (make build-all)",
        path.display()
    );
    path
}

/// A loopback port that was free a moment ago, for a service binary to bind.
pub fn free_port() -> u16 {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    probe.local_addr().unwrap().port()
}

impl Sandbox {
    /// Runs `<binary> --health-check` in this sandbox until it passes (for 15 s at most): its
    /// stdout then, `None` if it never did.
    pub async fn wait_serving(&self, binary: &Path) -> Option<String> {
        for _ in 0..300 {
            let output = self
                .command(binary)
                .arg("--health-check")
                .output()
                .await
                .unwrap();
            if output.status.success() {
                return Some(String::from_utf8_lossy(&output.stdout).into_owned());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }
}

/// grpcurl, as installed by the README's test command.
pub fn grpcurl() -> PathBuf {
    let path = std::env::var("METNOS_TEST_GRPCURL").expect(
        "METNOS_TEST_GRPCURL is not set: run the tests with `make test`, which installs grpcurl",
    );
    PathBuf::from(path)
}

/// The throwaway PostgreSQL server started by the README's test command.
pub fn postgres_url() -> String {
    std::env::var("METNOS_TEST_POSTGRES_URL").expect(
        "METNOS_TEST_POSTGRES_URL is not set: run the tests with `make test`, which starts a throwaway PostgreSQL",
    )
}

impl Sandbox {
    /// The fast LLM tier on the fake LLM server at `url` (Ollama wire format).
    pub fn with_fake_llm(&mut self, url: &str) -> &mut Self {
        self.set("METNOS_RUNTIME__LLM__FAST__PROVIDER", "ollama")
            .set("METNOS_RUNTIME__LLM__FAST__MODEL", "qwen-test")
            .set("METNOS_RUNTIME__LLM__FAST__BASE_URL", url)
    }

    /// The owner's first steps through the `metnos` command: a signing key, the built-ins
    /// in the data directory's catalog, their signatures, and the key trusted. Returns the
    /// key file.
    pub async fn owner_first_steps(&mut self) -> String {
        let (code, stdout, stderr) = self.run(&["executors", "keygen", "--name", "owner"]).await;
        assert_eq!(code, 0, "keygen: {stderr}");
        let key: serde_json::Value =
            serde_json::from_str(stdout.lines().next().unwrap_or_default()).unwrap();
        let exec = sibling_binary("metnos-exec").display().to_string();
        let (code, _, stderr) = self
            .run(&["executors", "install", "--program", &exec])
            .await;
        assert_eq!(code, 0, "install: {stderr}");
        let catalog = self.data_dir().join("executors").display().to_string();
        let key_file = key["key_file"].as_str().unwrap().to_owned();
        let (code, _, stderr) = self
            .run(&["executors", "sign", &catalog, "--key", &key_file])
            .await;
        assert_eq!(code, 0, "sign: {stderr}");
        self.set(
            "METNOS_EXECUTORS__TRUSTED_KEYS__OWNER",
            key["public_key"].as_str().unwrap(),
        );
        key_file
    }

    /// The built-in executors installed in the data directory's catalog, signed with a
    /// fresh key that the config trusts.
    pub fn with_builtins(&mut self) -> &mut Self {
        self.builtins(false)
    }

    /// [`Sandbox::with_builtins`], the key kept where `metnos mcp add` (and `metnos up`)
    /// find the owner's key.
    pub fn with_owner_builtins(&mut self) -> &mut Self {
        self.builtins(true)
    }

    fn builtins(&mut self, keep_key: bool) -> &mut Self {
        let catalog = self.data_dir().join("executors");
        metnos_executors::install::install_builtins(&catalog, &sibling_binary("metnos-exec"))
            .unwrap();
        let key = metnos_executors::signing::generate().unwrap();
        metnos_executors::install::sign_dir(&catalog, &key, "owner", false).unwrap();
        if keep_key {
            let key_file = self.dir.path().join(".config/metnos/keys/owner.key");
            std::fs::create_dir_all(key_file.parent().unwrap()).unwrap();
            metnos_executors::signing::write_key(&key_file, &key).unwrap();
        }
        let public = metnos_executors::signing::public_key_text(&key.verifying_key());
        self.set("METNOS_EXECUTORS__TRUSTED_KEYS__OWNER", &public)
    }

    /// A catalog the person emptied: `metnos up` installed the built-ins once, and every
    /// one of them was removed since (so none comes back).
    pub fn without_builtins(&mut self) -> &mut Self {
        let catalog = self.data_dir().join("executors");
        std::fs::create_dir_all(&catalog).unwrap();
        let record = metnos_executors::install::BuiltinsRecord {
            signer: "owner".to_owned(),
            key_file: self.dir.path().join(".config/metnos/keys/owner.key"),
            installer: String::new(),
            programs: Default::default(),
            executors: metnos_executors::builtin::MANIFESTS
                .iter()
                .map(|(name, _)| ((*name).to_owned(), "0".repeat(64)))
                .collect(),
        };
        record.write(&catalog).unwrap();
        self
    }
}

/// An HTTP/1 server on a fresh loopback port, on its own thread and runtime, answering
/// every request with `handler` (fake upstreams: a web page, the Telegram Bot API).
pub fn serve_http<F, Fut>(handler: F) -> SocketAddr
where
    F: Fn(hyper::Request<hyper::body::Incoming>) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<
            Output = Result<
                hyper::Response<http_body_util::Full<bytes::Bytes>>,
                std::convert::Infallible,
            >,
        > + Send
        + 'static,
{
    serve_http_gated(handler, tokio::sync::watch::channel(false).1)
}

/// As [`serve_http`], down while `down` says so: the port is closed (a connection is
/// refused) and every open connection is closed once its answer is written.
pub fn serve_http_gated<F, Fut>(handler: F, down: tokio::sync::watch::Receiver<bool>) -> SocketAddr
where
    F: Fn(hyper::Request<hyper::body::Incoming>) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<
            Output = Result<
                hyper::Response<http_body_util::Full<bytes::Bytes>>,
                std::convert::Infallible,
            >,
        > + Send
        + 'static,
{
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let mut down = down;
            let mut listener = Some(tokio::net::TcpListener::from_std(listener).unwrap());
            loop {
                if *down.borrow_and_update() {
                    // Closed: connections are refused until it is up again.
                    listener = None;
                    if down.wait_for(|d| !*d).await.is_err() {
                        return;
                    }
                    continue;
                }
                if listener.is_none() {
                    match tokio::net::TcpListener::bind(addr).await {
                        Ok(l) => listener = Some(l),
                        Err(_) => {
                            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                            continue;
                        }
                    }
                }
                let accepted = tokio::select! {
                    accepted = listener.as_ref().unwrap().accept() => accepted,
                    // (Never, once nobody can bring it down.)
                    Ok(()) = down.changed() => continue,
                };
                let Ok((stream, _)) = accepted else {
                    continue;
                };
                let handler = handler.clone();
                let mut closing = down.clone();
                tokio::spawn(async move {
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let connection = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, hyper::service::service_fn(handler));
                    tokio::pin!(connection);
                    tokio::select! {
                        _ = connection.as_mut() => {}
                        () = async {
                            if closing.wait_for(|d| *d).await.is_err() {
                                std::future::pending::<()>().await;
                            }
                        } => {
                            connection.as_mut().graceful_shutdown();
                            let _ = connection.await;
                        }
                    }
                });
            }
        });
    });
    addr
}

/// The roles and texts of an LLM request's messages (the wire format's own `messages`),
/// the system prompt left out.
pub fn roles_and_texts(body: &serde_json::Value) -> Vec<(String, String)> {
    body["messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default().to_owned(),
                m["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}
