//! `metnos mcp …`: admitting an MCP server's tools into the signed catalog, reviewing them
//! when the server changed them, listing, disabling and removing them (issue 43).
//!
//! `add` starts the server in shell_exec's box (as every later call does), lists its tools
//! and shows each one whole — its description with invisible characters made visible, its
//! schema, its annotations — with what Metnos proposes (a capability of the closed registry
//! and the argument that is its target). The owner enables each tool and may change the
//! proposal; Metnos writes one manifest per enabled tool, pinning the definition shown, and
//! signs it with the owner's key.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Subcommand;
use metnos_executors::mcp::admit::{self, Choice};
use metnos_executors::mcp::pool::{self, Launch, why_disabled};
use metnos_executors::mcp::{ToolDefinition, valid_server_name};
use metnos_executors::{Catalog, signing};
use metnos_kit::Config;
use metnos_kit::launch::EXIT_CONFIG;

/// The marker that keeps a tool's folder out of the catalog (`metnos mcp disable`).
pub const DISABLED_FILE: &str = metnos_executors::catalog::DISABLED_FILE;

#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Admits a server's tools: `metnos mcp add NAME -- COMMAND ARGS…` (stdio, run in the
    /// box) or `metnos mcp add NAME --url https://…` (streamable HTTP).
    Add {
        /// The server's name in Metnos: lower-case words joined by `_`.
        name: String,
        /// Enable these tools without asking (comma-separated names as the server lists them).
        #[arg(long, value_delimiter = ',')]
        tools: Vec<String>,
        /// A tool's capability, `tool=fs:read` (default: Metnos's proposal).
        #[arg(long = "capability", value_name = "TOOL=CAPABILITY")]
        capabilities: Vec<String>,
        /// A tool's target argument, `tool=path` (default: Metnos's proposal).
        #[arg(long = "target", value_name = "TOOL=ARG")]
        targets: Vec<String>,
        /// A folder the server may read besides the system's (default: its installation).
        #[arg(long = "read", value_name = "DIR")]
        read: Vec<PathBuf>,
        /// Hosts a stdio server would reach: refused, the box cannot limit a server's
        /// network to hosts (it has none); reach such a server over HTTP instead.
        #[arg(long = "allow-host", value_name = "HOST")]
        allow_hosts: Vec<String>,
        /// A server reached over streamable HTTP: https, or http on loopback.
        #[arg(long, conflicts_with = "command")]
        url: Option<String>,
        /// The file holding its bearer token (readable by you only); never put the token
        /// in the config.
        #[arg(long, value_name = "FILE", requires = "url")]
        token_file: Option<PathBuf>,
        /// The command that starts the server, and its arguments.
        #[arg(last = true, required_unless_present = "url")]
        command: Vec<String>,
    },
    /// The admitted servers and their tools, with their pins.
    List,
    /// Starts the server, compares its tools with what you admitted and shows what changed;
    /// `--yes` pins the changed definitions again (keeping each tool's capability and
    /// target), admits the tools named by `--tools`, and removes the tools gone.
    Review {
        name: String,
        #[arg(long)]
        yes: bool,
        /// New tools to admit as proposed.
        #[arg(long, value_delimiter = ',')]
        tools: Vec<String>,
    },
    /// Keeps a server's tools (or one of them) out of the catalog until `metnos mcp enable`.
    Disable { name: String, tool: Option<String> },
    /// Lets disabled tools back in.
    Enable { name: String, tool: Option<String> },
    /// Removes a server's tools from the catalog (its folder of data stays).
    Remove { name: String },
}

pub async fn mcp(config: &Config, command: McpCommand) -> ExitCode {
    let result = match command {
        McpCommand::Add {
            name,
            tools,
            capabilities,
            targets,
            read,
            allow_hosts,
            url,
            token_file,
            command,
        } => {
            if let Some(host) = allow_hosts.first() {
                eprintln!(
                    "metnos: mcp: --allow-host {host}: a stdio server runs in a box without network, which cannot be opened to chosen hosts only; run the server yourself and add it with --url"
                );
                return ExitCode::from(EXIT_CONFIG);
            }
            let request = AddRequest {
                name,
                tools,
                capabilities,
                targets,
                read,
                command,
                url,
                token_file,
            };
            add(config, request).await
        }
        McpCommand::List => list(config),
        McpCommand::Review { name, yes, tools } => review(config, &name, yes, &tools).await,
        McpCommand::Disable { name, tool } => set_disabled(config, &name, tool.as_deref(), true),
        McpCommand::Enable { name, tool } => set_disabled(config, &name, tool.as_deref(), false),
        McpCommand::Remove { name } => remove(config, &name),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Config(e)) => {
            eprintln!("metnos: mcp: {e}");
            ExitCode::from(EXIT_CONFIG)
        }
        Err(Failure::Other(e)) => {
            eprintln!("metnos: mcp: {e}");
            ExitCode::FAILURE
        }
    }
}

enum Failure {
    Config(String),
    Other(String),
}

fn other(e: impl std::fmt::Display) -> Failure {
    Failure::Other(e.to_string())
}

struct AddRequest {
    name: String,
    tools: Vec<String>,
    capabilities: Vec<String>,
    targets: Vec<String>,
    read: Vec<PathBuf>,
    command: Vec<String>,
    url: Option<String>,
    token_file: Option<PathBuf>,
}

/// `text` with every invisible or control character shown as `⟨U+XXXX⟩`.
pub fn visible(text: &str) -> String {
    text.chars()
        .map(|c| {
            if metnos_core::html::is_invisible(c) || (c.is_control() && c != '\n') {
                format!("⟨U+{:04X}⟩", c as u32)
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn catalog(config: &Config) -> Result<Catalog, Failure> {
    let trust = signing::Trust::load(&config.executors.trusted_keys, &config.executors.trust_file)
        .map_err(|e| Failure::Config(e.to_string()))?;
    Ok(Catalog::load(&config.executors.catalog_dir, &trust))
}

/// `tool=value` pairs.
fn pairs(list: &[String], what: &str) -> Result<BTreeMap<String, String>, Failure> {
    list.iter()
        .map(|pair| {
            pair.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .ok_or_else(|| {
                    Failure::Config(format!("--{what} `{pair}`: write it as TOOL=VALUE"))
                })
        })
        .collect()
}

/// The program `command` names, found in the system's program folders when bare.
fn resolve_program(command: &str) -> Result<PathBuf, Failure> {
    let path = Path::new(command);
    let found = if command.contains('/') {
        Some(path.to_owned())
    } else {
        ["/usr/local/bin", "/usr/bin", "/bin"]
            .iter()
            .map(|d| Path::new(d).join(command))
            .find(|p| p.is_file())
    };
    let found = found.ok_or_else(|| Failure::Config(format!("`{command}` is not found")))?;
    std::path::absolute(&found).map_err(|e| Failure::Config(format!("`{command}`: {e}")))
}

fn show_tool(tool: &ToolDefinition, proposed: &Choice) {
    println!("tool {}", visible(&tool.name));
    println!(
        "  description: {}",
        visible(&tool.description).replace('\n', "\n    ")
    );
    println!(
        "  input schema: {}",
        visible(&tool.input_schema.to_string())
    );
    if let Some(hints) = &tool.annotations {
        println!(
            "  annotations (shown, not trusted): {}",
            visible(&hints.to_string())
        );
    }
    println!(
        "  proposed: capability {}{}",
        proposed.capability,
        proposed
            .target_arg
            .as_deref()
            .map(|t| format!(", target argument `{t}`"))
            .unwrap_or_default()
    );
}

/// One answer from the terminal after `prompt`; empty at the end of input.
fn ask(prompt: &str) -> String {
    print!("{prompt}");
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    line.trim().to_owned()
}

/// What the owner chose for `tool`: `None` when it is skipped.
fn choose(
    tool: &ToolDefinition,
    request: &AddRequest,
    capabilities: &BTreeMap<String, String>,
    targets: &BTreeMap<String, String>,
) -> Option<Choice> {
    let mut choice = admit::propose(tool);
    if let Some(c) = capabilities.get(&tool.name) {
        choice.capability = c.clone();
    }
    if let Some(t) = targets.get(&tool.name) {
        choice.target_arg = Some(t.clone());
    }
    show_tool(tool, &choice);
    if !request.tools.is_empty() {
        return request.tools.contains(&tool.name).then_some(choice);
    }
    if !ask("  enable it? [y/N] ").eq_ignore_ascii_case("y") {
        return None;
    }
    let capability = ask(&format!("  capability [{}]: ", choice.capability));
    if !capability.is_empty() {
        choice.capability = capability;
    }
    let target = ask(&format!(
        "  target argument [{}]: ",
        choice.target_arg.as_deref().unwrap_or("none")
    ));
    if !target.is_empty() {
        choice.target_arg = (target != "none").then_some(target);
    }
    Some(choice)
}

fn sign(config: &Config, folder: &Path) -> Result<(), Failure> {
    let key_path = crate::setup::default_key_path(config, crate::setup::OWNER_SIGNER);
    let key = signing::read_key(&key_path)
        .map_err(|e| Failure::Config(format!("the owner's key {}: {e}", key_path.display())))?;
    metnos_executors::install::sign_dir(folder, &key, crate::setup::OWNER_SIGNER, false)
        .map_err(other)?;
    Ok(())
}

/// How the server of `request` is reached: the program (resolved, its digest, what it may
/// read), or the URL and the token file.
fn launch_of(request: &AddRequest) -> Result<Launch, Failure> {
    if let Some(url) = &request.url {
        metnos_executors::mcp::http::check_url(url).map_err(|e| Failure::Config(e.to_string()))?;
        let token_file =
            match &request.token_file {
                Some(file) => Some(std::path::absolute(file).map_err(|e| {
                    Failure::Config(format!("--token-file {}: {e}", file.display()))
                })?),
                None => None,
            };
        return Ok(Launch {
            server: request.name.clone(),
            program: PathBuf::new(),
            program_sha256: String::new(),
            args: Vec::new(),
            read: Vec::new(),
            url: Some(url.clone()),
            token_file,
        });
    }
    let (first, rest) = request
        .command
        .split_first()
        .ok_or_else(|| Failure::Config("no command".into()))?;
    let program = resolve_program(first)?;
    let read = if request.read.is_empty() {
        admit::default_read(&program)
    } else {
        request.read.clone()
    };
    Ok(Launch {
        server: request.name.clone(),
        program_sha256: metnos_executors::digest::sha256_file(&program).map_err(other)?,
        program,
        args: rest.to_vec(),
        read,
        url: None,
        token_file: None,
    })
}

async fn add(config: &Config, request: AddRequest) -> Result<(), Failure> {
    if !valid_server_name(&request.name) {
        return Err(Failure::Config(format!(
            "`{}` is not a server name (lower-case words joined by single `_`, at most 24 characters)",
            request.name
        )));
    }
    let catalog = catalog(config)?;
    if !admit::server_folders(catalog.dir(), &request.name).is_empty() {
        return Err(Failure::Config(format!(
            "a server named `{}` is already admitted (metnos mcp review or remove it)",
            request.name
        )));
    }
    let launch = launch_of(&request)?;
    match &launch.url {
        Some(url) => println!("server {}: {url} (streamable HTTP)", launch.server),
        None => println!(
            "server {}: {} {} (reads {})",
            launch.server,
            launch.program.display(),
            launch.args.join(" "),
            launch
                .read
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
    // Asked at a terminal, nothing of the server runs before the owner agrees to what it
    // may read (with --tools, the command line said so).
    if request.tools.is_empty()
        && !ask("start it to list its tools? [y/N] ").eq_ignore_ascii_case("y")
    {
        return Err(other("not started"));
    }
    let runner = metnos_planner::runner_from_config(config);
    let connection = pool::connect(&runner, &catalog, &launch)
        .await
        .map_err(other)?;
    let capabilities = pairs(&request.capabilities, "capability")?;
    let targets = pairs(&request.targets, "target")?;
    let mut written = Vec::new();
    for tool in &connection.tools {
        let Some(choice) = choose(tool, &request, &capabilities, &targets) else {
            println!("  skipped");
            continue;
        };
        let manifest = admit::manifest_for(&launch, tool, &choice).map_err(other)?;
        if written.contains(&manifest.name) {
            return Err(other(format!(
                "two of its tools would both be `{}` to the model; admit one of them (--tools)",
                manifest.name
            )));
        }
        let folder = admit::write(catalog.dir(), &manifest).map_err(other)?;
        sign(config, &folder)?;
        println!("  enabled as {} ({})", manifest.name, folder.display());
        written.push(manifest.name);
    }
    connection.close();
    if written.is_empty() {
        return Err(other("no tool was enabled"));
    }
    println!(
        "{} tool(s) of {} admitted; restart `metnos up` to offer them",
        written.len(),
        launch.server
    );
    Ok(())
}

fn list(config: &Config) -> Result<(), Failure> {
    let catalog = catalog(config)?;
    let mut rows: Vec<String> = catalog
        .executors()
        .filter_map(|e| {
            let pin = e.manifest.mcp.as_ref()?;
            Some(format!(
                "{}\t{}\t{}\t{}\tpin {}",
                pin.server,
                pin.tool,
                e.manifest.capabilities.join(","),
                e.manifest.target_arg.as_deref().unwrap_or("-"),
                &pin.definition_sha256[..16.min(pin.definition_sha256.len())]
            ))
        })
        .collect();
    for refusal in catalog.refused() {
        if refusal
            .dir
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("mcp."))
        {
            rows.push(format!(
                "{}\trefused: {}",
                refusal.dir.display(),
                refusal.reason
            ));
        }
    }
    for dir in disabled_folders(catalog.dir()) {
        rows.push(format!("{}\tdisabled", dir.display()));
    }
    rows.sort();
    for row in rows {
        println!("{row}");
    }
    Ok(())
}

fn disabled_folders(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join(DISABLED_FILE).exists())
        .collect()
}

async fn review(
    config: &Config,
    name: &str,
    yes: bool,
    new_tools: &[String],
) -> Result<(), Failure> {
    let catalog = catalog(config)?;
    let (launch, pins) = Launch::of(&catalog, name).map_err(other)?;
    let runner = metnos_planner::runner_from_config(config);
    let connection = pool::connect(&runner, &catalog, &launch)
        .await
        .map_err(other)?;
    let findings = pool::review_owned(&pins, &connection.tools);
    let mut changes = 0;
    for finding in &findings {
        let Some((tool, why)) = why_disabled(finding) else {
            continue;
        };
        // A tool not admitted (new, or skipped at admission) is told, never a change.
        if !matches!(finding, metnos_executors::mcp::Finding::New(_)) {
            changes += 1;
        }
        println!("{}: {}", visible(&tool), visible(&why));
        let listed = connection.tools.iter().find(|t| match finding {
            metnos_executors::mcp::Finding::Renamed { to, .. } => &t.name == to,
            _ => t.name == tool,
        });
        if let (Some(pin), Some(now)) = (pins.iter().find(|p| p.tool == tool), listed) {
            if pin.description != now.description {
                println!("  description was: {}", visible(&pin.description));
                println!("  description now: {}", visible(&now.description));
            }
            if pin.input_schema != now.input_schema {
                println!("  schema was: {}", visible(&pin.input_schema.to_string()));
                println!("  schema now: {}", visible(&now.input_schema.to_string()));
                let kept = catalog
                    .executors()
                    .filter_map(|e| e.manifest.mcp.as_ref().map(|p| (p, &e.manifest)))
                    .find(|(p, _)| p.server == name && p.tool == tool)
                    .map(|(_, m)| m.capabilities.join(","))
                    .unwrap_or_default();
                let proposed = admit::propose(now);
                if proposed.capability != kept {
                    println!(
                        "  --yes keeps {kept}; for this schema Metnos would propose {} (metnos mcp remove and add to choose again)",
                        proposed.capability
                    );
                }
            }
        } else if let Some(now) = listed {
            show_tool(now, &admit::propose(now));
        }
    }
    if changes == 0 && new_tools.is_empty() {
        println!("{name}: every tool you admitted is as you admitted it");
        connection.close();
        return Ok(());
    }
    if !yes && changes > 0 {
        connection.close();
        println!(
            "run `metnos mcp review {name} --yes` to pin these definitions (and --tools to admit new ones)"
        );
        return Err(other("changed tools stay disabled"));
    }
    apply_review(
        config,
        &catalog,
        &launch,
        &findings,
        &connection.tools,
        new_tools,
    )?;
    connection.close();
    println!("{name}: reviewed; restart `metnos up` to offer the tools again");
    Ok(())
}

fn apply_review(
    config: &Config,
    catalog: &Catalog,
    launch: &Launch,
    findings: &[metnos_executors::mcp::Finding],
    listed: &[ToolDefinition],
    new_tools: &[String],
) -> Result<(), Failure> {
    use metnos_executors::mcp::Finding;
    let old_choice = |tool: &str| {
        catalog.executors().find_map(|e| {
            let pin = e.manifest.mcp.as_ref()?;
            (pin.server == launch.server && pin.tool == tool).then(|| Choice {
                capability: e.manifest.capabilities.first().cloned().unwrap_or_default(),
                target_arg: e.manifest.target_arg.clone(),
            })
        })
    };
    let folder_of = |tool: &str| {
        metnos_executors::mcp::model_name(&launch.server, tool)
            .and_then(|n| catalog.get(&n).map(|e| e.dir.clone()))
    };
    for finding in findings {
        let (tool, old, choice) = match finding {
            Finding::Changed { tool, .. } => (tool.clone(), None, old_choice(tool)),
            Finding::Renamed { from, to } => (to.clone(), folder_of(from), old_choice(from)),
            Finding::New(tool) if new_tools.contains(tool) => (tool.clone(), None, None),
            Finding::Removed(tool) => {
                if let Some(dir) = folder_of(tool) {
                    std::fs::remove_dir_all(&dir).map_err(other)?;
                    println!("{}: removed from the catalog", visible(tool));
                }
                continue;
            }
            _ => continue,
        };
        let Some(now) = listed.iter().find(|t| t.name == tool) else {
            continue;
        };
        let choice = choice.unwrap_or_else(|| admit::propose(now));
        let manifest = admit::manifest_for(launch, now, &choice).map_err(other)?;
        // The name the model sees may belong to another admitted tool (`Read-File` and
        // `read_file` are both `read_file`): that one is never replaced by a review.
        let taken = catalog
            .get(&manifest.name)
            .and_then(|e| e.manifest.mcp.as_ref())
            .is_some_and(|pin| {
                let renamed_from = match finding {
                    Finding::Renamed { from, .. } => Some(from.as_str()),
                    _ => None,
                };
                pin.tool != tool && Some(pin.tool.as_str()) != renamed_from
            });
        if taken {
            return Err(other(format!(
                "`{}` would take `{}`, the name of another admitted tool: remove that one first",
                visible(&tool),
                manifest.name
            )));
        }
        if let Some(old) = old {
            std::fs::remove_dir_all(&old).map_err(other)?;
        }
        let folder = admit::write(catalog.dir(), &manifest).map_err(other)?;
        sign(config, &folder)?;
        println!("{}: pinned again as {}", visible(&tool), manifest.name);
    }
    Ok(())
}

fn set_disabled(
    config: &Config,
    name: &str,
    tool: Option<&str>,
    disabled: bool,
) -> Result<(), Failure> {
    let dir = &config.executors.catalog_dir;
    let folders: Vec<PathBuf> = admit::server_folders(dir, name)
        .into_iter()
        .filter(|f| {
            tool.is_none_or(|t| {
                f.file_name().and_then(|n| n.to_str()) == Some(&format!("mcp.{name}.{t}"))
            })
        })
        .collect();
    if folders.is_empty() {
        return Err(Failure::Config(format!(
            "no tool of server `{name}` matches"
        )));
    }
    for folder in folders {
        let marker = folder.join(DISABLED_FILE);
        if disabled {
            std::fs::write(&marker, "disabled by `metnos mcp disable`\n").map_err(other)?;
        } else if marker.exists() {
            std::fs::remove_file(&marker).map_err(other)?;
        }
        println!(
            "{} {}",
            if disabled { "disabled" } else { "enabled" },
            folder.display()
        );
    }
    Ok(())
}

fn remove(config: &Config, name: &str) -> Result<(), Failure> {
    let folders = admit::server_folders(&config.executors.catalog_dir, name);
    if folders.is_empty() {
        return Err(Failure::Config(format!(
            "no server named `{name}` is admitted"
        )));
    }
    for folder in folders {
        std::fs::remove_dir_all(&folder).map_err(other)?;
        println!("removed {}", folder.display());
    }
    Ok(())
}

/// `metnos doctor`'s word on each admitted MCP server: started in its box as a call would,
/// its tools listed and reviewed against their pins.
pub async fn doctor_checks(
    config: &Config,
    catalog: Option<&Catalog>,
) -> Vec<crate::doctor::Check> {
    use crate::doctor::Check;
    let Some(catalog) = catalog else {
        return Vec::new();
    };
    let servers: std::collections::BTreeSet<String> = catalog
        .executors()
        .filter_map(|e| e.manifest.mcp.as_ref().map(|p| p.server.clone()))
        .collect();
    let runner = metnos_planner::runner_from_config(config);
    let mut checks = Vec::new();
    for server in servers {
        let name = format!("mcp:{server}");
        let fix = format!("metnos mcp review {server}");
        let (launch, pins) = match Launch::of(catalog, &server) {
            Ok(found) => found,
            Err(why) => {
                checks.push(Check::fail(name, why, fix));
                continue;
            }
        };
        let connection = match pool::connect(&runner, catalog, &launch).await {
            Ok(connection) => connection,
            Err(why) => {
                let fix = match &launch.url {
                    Some(url) => format!("check that {url} answers"),
                    None => format!(
                        "run it by hand: {} {}",
                        launch.program.display(),
                        launch.args.join(" ")
                    ),
                };
                checks.push(Check::warn(name, format!("does not answer: {why}"), fix));
                continue;
            }
        };
        let findings = pool::review_owned(&pins, &connection.tools);
        connection.close();
        let enabled: Vec<&str> = findings.iter().filter_map(|f| f.enabled()).collect();
        let disabled: Vec<String> = findings
            .iter()
            .filter(|f| !matches!(f, metnos_executors::mcp::Finding::New(_)))
            .filter_map(why_disabled)
            .map(|(tool, why)| format!("{tool} ({why})"))
            .collect();
        let reached = if launch.url.is_some() {
            "reached over HTTP"
        } else {
            "connected in its box"
        };
        let message = format!(
            "{reached}; {} tool(s) enabled: {}",
            enabled.len(),
            enabled.join(", ")
        );
        checks.push(if disabled.is_empty() {
            Check::ok(name, message)
        } else {
            Check::warn(
                name,
                format!(
                    "{message}; disabled until reviewed: {}",
                    disabled.join(", ")
                ),
                fix,
            )
        });
    }
    checks
}
