//! The Metnos gateway service: how people reach Metnos and how approval cards go out and
//! decisions come back (seed approval_ux.md ch. 7, DESIGN §1-2).
//!
//! Who uses whom (`use crate::…`, test code aside); no module reaches back up, so there is
//! no circle:
//! - this file → `grpc`, `transport`, `conversation`, `store`, `web`, `service`;
//! - `grpc` → `transport`, `conversation`, `outbox`, `web`, `error`, `store`, `text`;
//! - `transport` → `conversation`, `outbox`, `telegram`, `store`, `pairing`;
//! - `conversation` → `outbox`, `store`, `text`, `pairing`, `service`;
//! - `outbox` → `telegram`, `error`, `store`, `text`, `service`;
//! - `error` → `service`; `telegram`, `store`, `text`, `pairing`, `service`: leaves;
//! - `web` → its own folder only.
//!
//! The Telegram channel, one concern each:
//! - [`telegram`]: the bot, its token kept out of every log line and error;
//! - [`transport`]: long polling with the persisted offset, the webhook and its secret
//!   token, every update read once and handed to the conversation;
//! - [`conversation`]: pairing codes for strangers, the stop clause, clicks resolved
//!   through approval, turns followed and resumed; a handler decides and returns a
//!   [`conversation::Reply`], which [`conversation::Conversation::speak`] carries out
//!   (the one place a click is answered); its pure decisions live in its own folder;
//! - [`outbox`]: rate limits, text split and sent, cards sent, remembered, shown again and
//!   closed, a click answered.
//!
//! And around it:
//! - [`grpc`]: `metnos.gateway.v1.GatewayService` (messages, cards, pairings);
//! - [`error`]: the one error enum and its one conversion to a gRPC status;
//! - [`store`]: pairings (level and language parsed where a row enters), codes, cards
//!   sent, the update offset (SQLite or PostgreSQL);
//! - [`text`]: escaping, splitting, stop phrases, callback data, sentences;
//! - [`pairing`]: pairing codes and webhook secrets;
//! - [`service`]: the service's and the channel's names (a leaf, so nothing reaches back
//!   up to this file);
//! - [`web`]: the owner's spectator page (`web.enabled`), one file per page, rendered with
//!   maud;
//! - this file: the bot token, and [`serve`] in named steps (prepare what binds, start the
//!   page, the channel and its sweeps, serve).
//!
//! The bot token comes from `METNOS_TELEGRAM_TOKEN` or `telegram.token_file`, never from
//! the config file, and never reaches a log line, a trace or an error.

use std::sync::Arc;
use std::time::Duration;

use metnos_kit::background::Background;
use metnos_kit::client::channel;
use metnos_kit::server::{StartError, Startup};
use metnos_kit::tls::Identity;
use metnos_kit::{Config, ServiceName, ShutdownFuture};
use metnos_proto::approval::v1::approval_service_client::ApprovalServiceClient;
use metnos_proto::gateway::v1::gateway_service_server::GatewayServiceServer;
use metnos_proto::planner::v1::planner_service_client::PlannerServiceClient;
use metnos_proto::policy::v1::policy_service_client::PolicyServiceClient;
use metnos_proto::vaglio::v1::vaglio_service_client::VaglioServiceClient;
use tokio::net::TcpListener;

pub mod conversation;
pub mod error;
pub mod grpc;
pub mod outbox;
pub mod pairing;
pub mod service;
pub mod store;
pub mod telegram;
pub mod text;
pub mod transport;
pub mod web;

pub use service::{CHANNEL, SERVICE};
pub use store::MIGRATIONS;

/// The environment variable holding the bot token.
pub const TOKEN_VAR: &str = "METNOS_TELEGRAM_TOKEN";

/// Why the bot token could not be read: the errors name the file, never its content.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("telegram.token_file {}: {source}", file.display())]
    Unreadable {
        file: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("telegram.token_file {} is empty", file.display())]
    Empty { file: std::path::PathBuf },
}

/// For callers that report the error as text (`metnos doctor`).
impl From<TokenError> for String {
    fn from(error: TokenError) -> String {
        error.to_string()
    }
}

/// The bot token, if any: the environment first, then the token file. Errors name the
/// file, never its content.
pub fn bot_token(config: &Config) -> Result<Option<String>, TokenError> {
    bot_token_from(config, |name| std::env::var(name).ok())
}

/// As [`bot_token`], with the environment given.
pub fn bot_token_from(
    config: &Config,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<String>, TokenError> {
    if let Some(token) = env(TOKEN_VAR)
        && !token.trim().is_empty()
    {
        return Ok(Some(token.trim().to_owned()));
    }
    let file = &config.telegram.token_file;
    if file.as_os_str().is_empty() {
        return Ok(None);
    }
    let token = std::fs::read_to_string(file).map_err(|source| TokenError::Unreadable {
        file: file.clone(),
        source,
    })?;
    let token = token.trim();
    if token.is_empty() {
        return Err(TokenError::Empty { file: file.clone() });
    }
    Ok(Some(token.to_owned()))
}

fn settings_error(message: String) -> StartError {
    StartError::Settings {
        service: SERVICE,
        message,
    }
}

/// What is bound and read before the service starts: a bad setting stops it here, before
/// it serves anything.
struct Prepared {
    token: Option<String>,
    /// The webhook's listener and URL, in webhook mode with a token.
    webhook: Option<(TcpListener, String)>,
    /// The page's listener and certificate, when `web.enabled`.
    web: Option<(TcpListener, metnos_kit::tls::Tls)>,
}

/// Reads the token, binds the webhook's and the page's listeners, loads the page's
/// certificate.
async fn prepare(config: &Config) -> Result<Prepared, StartError> {
    let token = bot_token(config).map_err(|e| settings_error(e.to_string()))?;
    let webhook = match (config.telegram.mode, &token) {
        (metnos_kit::config::TelegramMode::Webhook, Some(_)) => {
            let listen = config.telegram.webhook_listen;
            let listener = TcpListener::bind(listen)
                .await
                .map_err(|e| settings_error(format!("telegram.webhook_listen {listen}: {e}")))?;
            Some((listener, config.telegram.webhook_url.clone()))
        }
        _ => None,
    };
    if !config.web.enabled {
        return Ok(Prepared {
            token,
            webhook,
            web: None,
        });
    }
    let listen = config.web.listen;
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| settings_error(format!("web.listen {listen}: {e}")))?;
    // The page's certificate, from the installation's folder (never the gateway's own
    // cert_file/key_file overrides).
    let mut dir_only = config.clone();
    dir_only.tls.cert_file = Default::default();
    dir_only.tls.key_file = Default::default();
    let tls = metnos_kit::tls::Tls::load(&dir_only, Identity::Web)
        .map_err(|e| settings_error(format!("the spectator page's certificate: {e}")))?;
    Ok(Prepared {
        token,
        webhook,
        web: Some((listener, tls)),
    })
}

/// The services' addresses, for the chat's clients and the page's.
struct Urls {
    planner: String,
    approval: String,
    vaglio: String,
    policy: String,
}

impl Urls {
    fn of(config: &Config) -> Urls {
        Urls {
            planner: config.service_url(ServiceName::Planner),
            approval: config.service_url(ServiceName::Approval),
            vaglio: config.service_url(ServiceName::Vaglio),
            policy: config.service_url(ServiceName::Policy),
        }
    }
}

/// Starts the page on `listener` with its own identity: it reads and revokes, and can
/// never start a turn or answer a card (the gateway's certificate stays with the chat).
/// Its sign-ins, for `CreateWebLogin`.
fn start_web(
    config: &metnos_kit::config::WebConfig,
    listener: TcpListener,
    tls: &metnos_kit::tls::Tls,
    urls: &Urls,
    background: &mut Background,
) -> Result<Arc<web::Sessions>, StartError> {
    let as_page = |who: Identity, url: &str| {
        channel(tls, who, url).map_err(|e| settings_error(e.to_string()))
    };
    let upstream = web::Upstream {
        planner: PlannerServiceClient::new(as_page(Identity::Planner, &urls.planner)?),
        approval: ApprovalServiceClient::new(as_page(Identity::Approval, &urls.approval)?),
        policy: PolicyServiceClient::new(as_page(Identity::Policy, &urls.policy)?),
        vaglio: VaglioServiceClient::new(as_page(Identity::Vaglio, &urls.vaglio)?),
    };
    let web = Arc::new(web::Web::new(config, upstream));
    let sessions = Arc::clone(&web.sessions);
    tracing::info!(listen = %config.listen, "web page on (sign in with `metnos web login`)");
    background.spawn("web page", web::serve(listener, web));
    Ok(sessions)
}

/// What became of keyed messages is kept two days; which thread a sent answer belonged to,
/// as long as the conversation's retention.
fn prune_keyed_messages(store: &store::Store, retention_ms: i64, background: &mut Background) {
    let pruning = store.clone();
    background.every("keyed messages", Duration::from_secs(3600), move || {
        let store = pruning.clone();
        async move {
            let now = metnos_kit::time::now_ms();
            if let Err(e) = store.prune_sent(now - 2 * 86_400_000).await {
                tracing::warn!(error = %e, "cannot forget old keyed messages");
            }
            if let Err(e) = store.prune_answers(now - retention_ms).await {
                tracing::warn!(error = %e, "cannot forget which thread old answers belonged to");
            }
        }
    });
}

/// The Telegram channel and its card sweep, when there is a token.
struct TelegramPlan {
    token: Option<String>,
    webhook: Option<(TcpListener, String)>,
    settings: transport::Settings,
    sweep_every: Duration,
    remind_before_ms: i64,
}

impl TelegramPlan {
    fn of(config: &Config, token: Option<String>, webhook: Option<(TcpListener, String)>) -> Self {
        TelegramPlan {
            token,
            webhook,
            settings: transport::Settings {
                api_url: config.telegram.api_url.clone(),
                poll_timeout_seconds: config.telegram.poll_timeout_seconds.get(),
                per_chat_per_second: config.telegram.per_chat_per_second.get(),
                global_per_second: config.telegram.global_per_second.get(),
            },
            sweep_every: Duration::from_secs(config.approval.sweep_interval_seconds.get()),
            remind_before_ms: i64::try_from(
                config.approval.remind_before_seconds.saturating_mul(1000),
            )
            .unwrap_or(0),
        }
    }

    /// Starts the channel and the sweep of its cards; `None` without a token or when it
    /// could not be set up.
    fn start(
        self,
        store: &store::Store,
        clients: &conversation::Clients,
        stops: conversation::StopDetector,
        background: &mut Background,
    ) -> Option<Arc<transport::Telegram>> {
        let Some(token) = self.token else {
            tracing::info!(
                "Telegram channel off: no bot token ({TOKEN_VAR} or telegram.token_file)"
            );
            return None;
        };
        let channel = transport::Telegram::new(
            token,
            &self.settings,
            store.clone(),
            clients.planner.clone(),
            clients.approval.clone(),
            stops,
        );
        let telegram = start_telegram(channel, self.webhook, background)?;
        let conversation = telegram.conversation_handle();
        let remind_before_ms = self.remind_before_ms;
        background.every("approval cards", self.sweep_every, move || {
            let conversation = Arc::clone(&conversation);
            async move { conversation.sweep_cards(remind_before_ms, None).await }
        });
        Some(telegram)
    }
}

/// Serves the gateway on `listener` until `shutdown`, with the Telegram channel when a bot
/// token is set and the spectator page when `web.enabled`.
pub async fn serve(
    config: Config,
    listener: TcpListener,
    shutdown: ShutdownFuture,
) -> Result<(), StartError> {
    let Prepared {
        token,
        webhook,
        web,
    } = prepare(&config).await?;
    let urls = Urls::of(&config);
    let web_config = config.web.clone();
    let retention_ms = config.conversation.retention_ms();
    let channel_plan = TelegramPlan::of(&config, token, webhook);
    Startup::new(SERVICE, &MIGRATIONS, &grpc::AUTHORIZATION, &config)
        .serve_with_store(listener, shutdown, move |running| {
            let client = |who: Identity, url: &str| {
                channel(running.tls, who, url).map_err(|e| settings_error(e.to_string()))
            };
            let clients = conversation::Clients {
                planner: PlannerServiceClient::new(client(Identity::Planner, &urls.planner)?),
                approval: ApprovalServiceClient::new(client(Identity::Approval, &urls.approval)?),
            };
            let stops = conversation::StopDetector::new(Some(VaglioServiceClient::new(client(
                Identity::Vaglio,
                &urls.vaglio,
            )?)));
            let web = match web {
                Some((listener, tls)) => Some(start_web(
                    &web_config,
                    listener,
                    &tls,
                    &urls,
                    running.background,
                )?),
                None => None,
            };
            let store = store::Store::new(running.db);
            prune_keyed_messages(&store, retention_ms, running.background);
            let telegram = channel_plan.start(&store, &clients, stops, running.background);
            Ok(GatewayServiceServer::new(grpc::GatewayApi {
                store,
                telegram,
                clients: Some(clients),
                web,
            })
            .max_decoding_message_size(metnos_kit::edge::MAX_REQUEST_BYTES))
        })
        .await
}

/// Starts the Telegram channel (long polling, or the webhook when it has a listener) as a
/// background task that ends with the service; `None` when it could not be set up.
fn start_telegram(
    channel: Result<transport::Telegram, transport::SetupError>,
    webhook: Option<(TcpListener, String)>,
    background: &mut Background,
) -> Option<Arc<transport::Telegram>> {
    let telegram = match channel {
        Ok(t) => Arc::new(t),
        Err(e) => {
            tracing::error!(error = %e, "Telegram channel off");
            return None;
        }
    };
    let t = Arc::clone(&telegram);
    match webhook {
        Some((listener, url)) => {
            background.spawn_graceful("telegram webhook", move |stopped| async move {
                if let Err(e) = t.webhook(listener, url, stopped).await {
                    tracing::error!(error = %e, "Telegram webhook stopped");
                }
            });
            tracing::info!("Telegram channel on (webhook)");
        }
        None => {
            background.spawn_graceful("telegram polling", move |stopped| t.poll(stopped));
            tracing::info!("Telegram channel on (long polling)");
        }
    }
    Some(telegram)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_comes_from_the_environment_or_a_file_and_errors_do_not_show_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = metnos_kit::testing::config(dir.path());
        let none = |_: &str| None;
        assert_eq!(bot_token_from(&config, none).unwrap(), None);
        let env = |name: &str| (name == TOKEN_VAR).then(|| " 1:from-env \n".to_owned());
        assert_eq!(
            bot_token_from(&config, env).unwrap().as_deref(),
            Some("1:from-env")
        );

        let file = dir.path().join("token");
        std::fs::write(&file, "1:from-file\n").unwrap();
        config.telegram.token_file = file.clone();
        assert_eq!(
            bot_token_from(&config, none).unwrap().as_deref(),
            Some("1:from-file")
        );
        // The environment wins over the file.
        assert_eq!(
            bot_token_from(&config, env).unwrap().as_deref(),
            Some("1:from-env")
        );
        std::fs::write(&file, "   \n").unwrap();
        let error = bot_token_from(&config, none).unwrap_err().to_string();
        assert!(
            error.contains("is empty") && error.contains("token"),
            "{error}"
        );
        config.telegram.token_file = dir.path().join("missing");
        let error = bot_token_from(&config, none).unwrap_err().to_string();
        assert!(error.contains("missing"), "{error}");
    }
}
