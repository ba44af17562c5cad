//! The Metnos gateway service: how people reach Metnos and how approval cards go out and
//! decisions come back (seed approval_ux.md ch. 7, DESIGN §1-2).
//!
//! The Telegram channel is three modules, one concern each:
//! - [`transport`]: teloxide: the bot, long polling with the persisted offset, the webhook
//!   and its secret token, every update handled once, the token redacted;
//! - [`conversation`]: pairing codes for strangers, the stop clause, clicks resolved
//!   through approval, turns followed and resumed; pure decisions over one
//!   [`conversation::Conversations`] state;
//! - [`outbox`]: rate limits, text split and sent, cards sent, remembered and closed.
//!
//! And around it:
//! - [`grpc`]: `metnos.gateway.v1.GatewayService` (messages, cards, pairings);
//! - [`error`]: the one error enum and its one conversion to a gRPC status;
//! - [`store`]: pairings, codes, cards sent, the update offset (SQLite or PostgreSQL);
//! - [`text`]: escaping, splitting, stop phrases, callback data, sentences;
//! - [`pairing`]: pairing codes and webhook secrets;
//! - [`web`]: the owner's spectator page (`web.enabled`).
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
pub mod store;
pub mod text;
pub mod transport;
pub mod web;

pub use store::MIGRATIONS;

/// This service.
pub const SERVICE: ServiceName = ServiceName::Gateway;

/// The channel's name in principals and message references.
pub const CHANNEL: &str = "telegram";

/// The environment variable holding the bot token.
pub const TOKEN_VAR: &str = "METNOS_TELEGRAM_TOKEN";

/// The bot token, if any: the environment first, then the token file. Errors name the
/// file, never its content.
pub fn bot_token(config: &Config) -> Result<Option<String>, String> {
    bot_token_from(config, |name| std::env::var(name).ok())
}

/// As [`bot_token`], with the environment given.
pub fn bot_token_from(
    config: &Config,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<String>, String> {
    if let Some(token) = env(TOKEN_VAR)
        && !token.trim().is_empty()
    {
        return Ok(Some(token.trim().to_owned()));
    }
    let file = &config.telegram.token_file;
    if file.as_os_str().is_empty() {
        return Ok(None);
    }
    let token = std::fs::read_to_string(file)
        .map_err(|e| format!("telegram.token_file {}: {e}", file.display()))?;
    let token = token.trim();
    if token.is_empty() {
        return Err(format!("telegram.token_file {} is empty", file.display()));
    }
    Ok(Some(token.to_owned()))
}

/// Serves the gateway on `listener` until `shutdown`, with the Telegram channel when a bot
/// token is set.
pub async fn serve(
    config: Config,
    listener: TcpListener,
    shutdown: ShutdownFuture,
) -> Result<(), StartError> {
    let settings_error = |message: String| StartError::Settings {
        service: SERVICE,
        message,
    };
    let token = bot_token(&config).map_err(settings_error)?;
    let webhook = match (config.telegram.mode, &token) {
        (metnos_kit::config::TelegramMode::Webhook, Some(_)) => Some((
            TcpListener::bind(config.telegram.webhook_listen)
                .await
                .map_err(|e| {
                    settings_error(format!(
                        "telegram.webhook_listen {}: {e}",
                        config.telegram.webhook_listen
                    ))
                })?,
            config.telegram.webhook_url.clone(),
        )),
        _ => None,
    };
    let sweep_every = std::time::Duration::from_secs(config.approval.sweep_interval_seconds.get());
    let remind_before_ms =
        i64::try_from(config.approval.remind_before_seconds.saturating_mul(1000)).unwrap_or(0);
    let planner_url = config.service_url(ServiceName::Planner);
    let approval_url = config.service_url(ServiceName::Approval);
    let vaglio_url = config.service_url(ServiceName::Vaglio);
    let policy_url = config.service_url(ServiceName::Policy);
    let web_config = config.web.clone();
    let web_listener = if web_config.enabled {
        Some(
            TcpListener::bind(web_config.listen)
                .await
                .map_err(|e| settings_error(format!("web.listen {}: {e}", web_config.listen)))?,
        )
    } else {
        None
    };
    // The page's certificate, from the installation's folder (never the gateway's own
    // cert_file/key_file overrides).
    let web_tls = if web_config.enabled {
        let mut dir_only = config.clone();
        dir_only.tls.cert_file = Default::default();
        dir_only.tls.key_file = Default::default();
        Some(
            metnos_kit::tls::Tls::load(&dir_only, Identity::Web)
                .map_err(|e| settings_error(format!("the spectator page's certificate: {e}")))?,
        )
    } else {
        None
    };
    let settings = transport::Settings {
        api_url: config.telegram.api_url.clone(),
        poll_timeout_seconds: config.telegram.poll_timeout_seconds.get(),
        per_chat_per_second: config.telegram.per_chat_per_second.get(),
        global_per_second: config.telegram.global_per_second.get(),
    };
    Startup::new(SERVICE, &MIGRATIONS, &grpc::AUTHORIZATION, &config)
        .serve_with_store(listener, shutdown, move |running| {
            let client = |who: Identity, url: &str| {
                channel(running.tls, who, url).map_err(|e| settings_error(e.to_string()))
            };
            let planner = PlannerServiceClient::new(client(Identity::Planner, &planner_url)?);
            let approval = ApprovalServiceClient::new(client(Identity::Approval, &approval_url)?);
            let stops = conversation::StopDetector::new(Some(VaglioServiceClient::new(client(
                Identity::Vaglio,
                &vaglio_url,
            )?)));
            let web = match (web_listener, &web_tls) {
                (Some(listener), Some(web_tls)) => {
                    // The page's own identity: it reads and revokes, and can never start a
                    // turn or answer a card (the gateway's certificate stays with the chat).
                    let as_page = |who: Identity, url: &str| {
                        channel(web_tls, who, url).map_err(|e| settings_error(e.to_string()))
                    };
                    let upstream = web::Upstream {
                        planner: PlannerServiceClient::new(as_page(Identity::Planner, &planner_url)?),
                        approval: ApprovalServiceClient::new(as_page(
                            Identity::Approval,
                            &approval_url,
                        )?),
                        policy: PolicyServiceClient::new(as_page(Identity::Policy, &policy_url)?),
                        vaglio: VaglioServiceClient::new(as_page(Identity::Vaglio, &vaglio_url)?),
                    };
                    let web = Arc::new(web::Web::new(&web_config, upstream));
                    let sessions = Arc::clone(&web.sessions);
                    tracing::info!(listen = %web_config.listen, "web page on (sign in with `metnos web login`)");
                    running.background.spawn("web page", web::serve(listener, web));
                    Some(sessions)
                }
                _ => None,
            };
            let store = store::Store::new(running.db);
            // What became of keyed messages is kept two days.
            let pruning = store.clone();
            running
                .background
                .every("keyed messages", Duration::from_secs(3600), move || {
                    let store = pruning.clone();
                    async move {
                        let before = metnos_kit::time::now_ms() - 2 * 86_400_000;
                        if let Err(e) = store.prune_sent(before).await {
                            tracing::warn!(error = %e, "cannot forget old keyed messages");
                        }
                    }
                });
            let telegram = match token {
                Some(token) => {
                    let channel = transport::Telegram::new(
                        token,
                        &settings,
                        store.clone(),
                        planner.clone(),
                        approval.clone(),
                        stops,
                    );
                    let telegram = start_telegram(channel, webhook, running.background);
                    if let Some(telegram) = &telegram {
                        let conversation = telegram.conversation_handle();
                        running.background.every("approval cards", sweep_every, move || {
                            let conversation = Arc::clone(&conversation);
                            async move { conversation.sweep_cards(remind_before_ms, None).await }
                        });
                    }
                    telegram
                }
                None => {
                    tracing::info!(
                        "Telegram channel off: no bot token ({TOKEN_VAR} or telegram.token_file)"
                    );
                    None
                }
            };
            Ok(GatewayServiceServer::new(grpc::GatewayApi {
                store,
                telegram,
                clients: Some(conversation::Clients { planner, approval }),
                web,
            })
            .max_decoding_message_size(metnos_kit::edge::MAX_REQUEST_BYTES))
        })
        .await
}

/// Starts the Telegram channel (long polling, or the webhook when it has a listener) as a
/// background task that ends with the service; `None` when it could not be set up.
fn start_telegram(
    channel: Result<transport::Telegram, String>,
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
        let error = bot_token_from(&config, none).unwrap_err();
        assert!(
            error.contains("is empty") && error.contains("token"),
            "{error}"
        );
        config.telegram.token_file = dir.path().join("missing");
        let error = bot_token_from(&config, none).unwrap_err();
        assert!(error.contains("missing"), "{error}");
    }
}
