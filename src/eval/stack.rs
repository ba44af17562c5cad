//! The throwaway stack `metnos eval` runs its tasks through: `metnos up` in a temporary
//! home and data directory on ports of its own, the model the person named, and a loopback
//! server for the suite's pages. The person's installation is never read or touched.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use metnos_kit::client::TracedChannel;
use metnos_kit::config::LlmTierConfig;
use metnos_kit::tls::{Identity, Tls};
use metnos_kit::{Config, ServiceName};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Where the suite's pages are served: a loopback address of their own, the only one the
/// throwaway stack's `web_fetch` may reach (not the person's Ollama, nor the stack itself).
pub const PAGES_HOST: &str = "127.0.0.2";

/// How long the throwaway stack may take to come up.
const START_LIMIT: Duration = Duration::from_secs(120);

/// The model the tasks are run against, as the throwaway stack's fast tier (the other
/// tiers alias to it).
#[derive(Debug, Clone)]
pub struct Model {
    pub tier: LlmTierConfig,
    /// The variable holding its API key, passed on to the stack by name.
    pub api_key: Option<(String, String)>,
}

impl Model {
    /// The environment that makes it the stack's fast tier.
    fn env(&self) -> Vec<(String, String)> {
        let provider = super::provider_name(self.tier.provider);
        let mut env = vec![
            ("METNOS_RUNTIME__LLM__FAST__PROVIDER".to_owned(), provider),
            (
                "METNOS_RUNTIME__LLM__FAST__MODEL".to_owned(),
                self.tier.model.clone(),
            ),
            (
                "METNOS_RUNTIME__LLM__FAST__THINK".to_owned(),
                self.tier.think.to_string(),
            ),
            (
                "METNOS_RUNTIME__LLM__FAST__TIMEOUT_SECONDS".to_owned(),
                self.tier.timeout_seconds.to_string(),
            ),
        ];
        if !self.tier.base_url.is_empty() {
            env.push((
                "METNOS_RUNTIME__LLM__FAST__BASE_URL".to_owned(),
                self.tier.base_url.clone(),
            ));
        }
        if let Some(online) = self.tier.online {
            env.push((
                "METNOS_RUNTIME__LLM__FAST__ONLINE".to_owned(),
                online.to_string(),
            ));
        }
        if let Some((name, value)) = &self.api_key {
            env.push((
                "METNOS_RUNTIME__LLM__FAST__API_KEY_ENV".to_owned(),
                name.clone(),
            ));
            env.push((name.clone(), value.clone()));
        }
        env
    }
}

/// A running throwaway stack; stopped and removed when dropped.
pub struct Throwaway {
    dir: tempfile::TempDir,
    child: Child,
    addrs: BTreeMap<String, SocketAddr>,
    tls: Tls,
    pages: tokio::task::JoinHandle<()>,
    /// The pages' server, as `{site}` stands for it.
    pub site: String,
    pages_map: Arc<std::sync::Mutex<BTreeMap<String, String>>>,
}

impl std::fmt::Debug for Throwaway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Throwaway")
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl Throwaway {
    /// Starts `metnos up` (this same program) in a fresh temporary home with `model`.
    pub async fn start(model: &Model) -> Result<Throwaway, String> {
        let dir = tempfile::Builder::new()
            .prefix("metnos-eval-")
            .tempdir()
            .map_err(|e| format!("cannot make a temporary folder: {e}"))?;
        let home = dir.path().join("home");
        let data = dir.path().join("data");
        std::fs::create_dir_all(&home).map_err(|e| format!("cannot make the home: {e}"))?;
        let pages_map = Arc::default();
        let (site, pages) = serve_pages(Arc::clone(&pages_map)).await?;
        let program =
            std::env::current_exe().map_err(|e| format!("cannot find the metnos program: {e}"))?;
        let mut command = Command::new(program);
        command
            .arg("up")
            .env_clear()
            // The model's first: nothing it names can move the throwaway home.
            .envs(model.env())
            .envs(std::env::var("PATH").map(|p| ("PATH", p)))
            .env("HOME", &home)
            .env("METNOS_DATA_DIR", &data)
            .env("METNOS_TELEMETRY__LOG", "warn")
            .env("METNOS_RUNTIME__MODE", "local")
            .env("METNOS_TURNS__CLI_LEVEL", "Full")
            // Only the pages' own address: nothing else on this machine is fetched.
            .env(
                "METNOS_EXECUTORS__LOCAL_HOSTS",
                format!("[\"{PAGES_HOST}\"]"),
            )
            .env("METNOS_SERVER__SHUTDOWN_GRACE_SECONDS", "3")
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for service in ["POLICY", "VAGLIO", "APPROVAL", "PLANNER", "GATEWAY"] {
            command.env(format!("METNOS_{service}__LISTEN"), "127.0.0.1:0");
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start the throwaway stack: {e}"))?;
        let addrs = match tokio::time::timeout(START_LIMIT, addresses(&mut child)).await {
            Ok(Ok(addrs)) => addrs,
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(format!(
                    "the throwaway stack did not come up within {} s",
                    START_LIMIT.as_secs()
                ));
            }
        };
        let mut config = Config::default();
        config.tls.dir = data.join("pki");
        let tls = Tls::load(&config, Identity::Owner)
            .map_err(|e| format!("the throwaway stack's certificates: {e}"))?;
        Ok(Throwaway {
            dir,
            child,
            addrs,
            tls,
            pages,
            site,
            pages_map,
        })
    }

    /// The throwaway home (the person's `~` in every task).
    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// Empties the home for the next task: what a task (or its model) left there, links
    /// included, is never another task's.
    pub fn clear_home(&self) -> Result<(), String> {
        let home = self.home();
        let entries = std::fs::read_dir(&home).map_err(|e| format!("cannot read the home: {e}"))?;
        for entry in entries.flatten() {
            let path = entry.path();
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            let removed = if is_dir {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            removed.map_err(|e| format!("cannot empty the home ({}): {e}", path.display()))?;
        }
        Ok(())
    }

    /// Serves `pages` (path → text) from now on, in place of the last task's.
    pub fn set_pages(&self, pages: &[(String, String)]) {
        let mut map = self.pages_map.lock().unwrap_or_else(|e| e.into_inner());
        map.clear();
        map.extend(pages.iter().cloned());
    }

    /// A channel to `service`, as the owner.
    pub fn channel(&self, service: ServiceName) -> Result<TracedChannel, String> {
        let addr = self
            .addrs
            .get(service.as_str())
            .ok_or_else(|| format!("the throwaway stack printed no address for {service}"))?;
        metnos_kit::client::channel(&self.tls, Identity::of(service), &format!("http://{addr}"))
            .map_err(|e| e.to_string())
    }

    /// Stops the stack and removes its folder.
    pub async fn stop(mut self) {
        self.pages.abort();
        if let Some(pid) = self.child.id().and_then(|p| i32::try_from(p).ok()) {
            // SIGTERM: the services stop as on Ctrl-C.
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_raw(pid).expect("a running child's pid"),
                rustix::process::Signal::TERM,
            );
        }
        if tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// The five `service address` lines `metnos up` prints once it serves.
async fn addresses(child: &mut Child) -> Result<BTreeMap<String, SocketAddr>, String> {
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let stderr = child.stderr.take().ok_or("no stderr")?;
    // Read as it comes: a full pipe must never stop the stack.
    let log = tokio::spawn(async move {
        let mut text = String::new();
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if text.len() < 8192 {
                text.push_str(&line);
                text.push('\n');
            }
        }
        text
    });
    let mut lines = BufReader::new(stdout).lines();
    let mut addrs = BTreeMap::new();
    while addrs.len() < 5 {
        match lines.next_line().await {
            Ok(Some(line)) => {
                if let Some((name, addr)) = line.split_once(' ')
                    && let Ok(addr) = addr.trim().parse::<SocketAddr>()
                {
                    addrs.insert(name.to_owned(), addr);
                }
            }
            _ => {
                let said = tokio::time::timeout(Duration::from_secs(5), log)
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .unwrap_or_default();
                return Err(format!(
                    "the throwaway stack stopped before serving: {}",
                    said.trim()
                ));
            }
        }
    }
    // The rest of stdout is not needed, but must not fill its pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(addrs)
}

/// A loopback HTTP server answering the current task's pages (404 for anything else).
async fn serve_pages(
    pages: Arc<std::sync::Mutex<BTreeMap<String, String>>>,
) -> Result<(String, tokio::task::JoinHandle<()>), String> {
    let listener = tokio::net::TcpListener::bind((PAGES_HOST, 0))
        .await
        .map_err(|e| format!("cannot serve the suite's pages: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("cannot serve the suite's pages: {e}"))?;
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let pages = Arc::clone(&pages);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request: hyper::Request<_>| {
                    let page = pages
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .get(request.uri().path())
                        .cloned();
                    async move { Ok::<_, std::convert::Infallible>(page_response(page)) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok((format!("http://{addr}"), task))
}

fn page_response(page: Option<String>) -> hyper::Response<Full<Bytes>> {
    let (status, body) = match page {
        Some(text) => (hyper::StatusCode::OK, text),
        None => (hyper::StatusCode::NOT_FOUND, "not found".to_owned()),
    };
    let mut response = hyper::Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
