//! `metnos chat`: an interactive session with the running stack. Line editing and history
//! (arrow keys; kept in `<data_dir>/chat_history`), each line a turn with its steps shown
//! live and its approval cards answered with y/n; Ctrl-C or `/stop` stops the running
//! turn, `/quit` or Ctrl-D leaves. It opens with the proposals waiting for a session
//! ([`crate::session_cli`]).

use std::process::ExitCode;

use metnos_kit::Config;
use metnos_proto::planner::v1 as pb;

use crate::ask_cli::{Session, TurnOptions};

#[derive(Debug, clap::Args)]
pub struct ChatArgs {
    #[command(flatten)]
    pub options: TurnOptions,
    /// Offer the proposals waiting for a session even when stdin is not a terminal (a
    /// script that answers them); on a terminal they are always offered.
    #[arg(long)]
    pub proposals: bool,
}

enum Line {
    Text(String),
    Interrupted,
    End,
}

/// The next line the person typed (or a script piped), off the runtime's threads; the
/// editor comes back with it. `None`: the reading task died.
async fn next_line(
    mut editor: rustyline::DefaultEditor,
    piped: bool,
) -> Option<(rustyline::DefaultEditor, Line)> {
    tokio::task::spawn_blocking(move || {
        // Piped input is read as the card prompts read it, so neither takes lines
        // buffered for the other; a terminal goes through the line editor.
        if piped {
            return (
                editor,
                match crate::ask_cli::read_line(None) {
                    Some(text) => Line::Text(text),
                    None => Line::End,
                },
            );
        }
        let line = match editor.readline("you> ") {
            Ok(text) => Line::Text(text),
            Err(rustyline::error::ReadlineError::Interrupted) => Line::Interrupted,
            Err(_) => Line::End,
        };
        (editor, line)
    })
    .await
    .ok()
}

pub async fn chat(config: &Config, args: ChatArgs) -> ExitCode {
    let mut session = match Session::connect(config) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let history = config.data_dir.join(metnos_kit::datadir::CHAT_HISTORY);
    let mut editor = match rustyline::DefaultEditor::new() {
        Ok(editor) => editor,
        Err(e) => {
            eprintln!("metnos: cannot start the line editor: {e}");
            return ExitCode::FAILURE;
        }
    };
    let _ = editor.load_history(&history);
    // The stop clause is the vaglio's to recognise (the same words as on Telegram); when it
    // cannot be asked, the same recogniser linked here answers.
    let stops = metnos_gateway::conversation::StopDetector::new(
        crate::admin::connect(config, metnos_kit::ServiceName::Vaglio)
            .ok()
            .map(|(channel, _)| {
                metnos_proto::vaglio::v1::vaglio_service_client::VaglioServiceClient::new(channel)
            }),
    );
    eprintln!("Metnos — one request per line; Ctrl-C or /stop stops a running turn, /quit leaves.");
    let piped = {
        use std::io::IsTerminal;
        !std::io::stdin().is_terminal()
    };
    // What Metnos proposed on its own since the last session (two new ones at most). Not
    // to a script's input unless it asks: its lines are requests, not answers to cards it
    // never saw.
    if !piped || args.proposals {
        let language = metnos_core::Language::from_wire(
            args.options
                .request(config, &session.principal, String::new())
                .language,
        )
        .unwrap_or(metnos_core::Language::Italian);
        session.offer_proposals(language, &stops).await;
    }
    // Each message goes on with the conversation, unless `/new` started another.
    let mut thread = pb::Thread::Continue;
    loop {
        let Some((back, line)) = next_line(editor, piped).await else {
            return ExitCode::FAILURE;
        };
        editor = back;
        let text = match line {
            Line::End => break,
            Line::Interrupted => continue,
            Line::Text(text) => text,
        };
        let text = text.trim().to_owned();
        if text.is_empty() {
            continue;
        }
        let _ = editor.add_history_entry(text.as_str());
        if matches!(text.as_str(), "/quit" | "/exit") {
            break;
        }
        if text == "/new" {
            // The next message starts a new conversation; nothing is sent now.
            thread = pb::Thread::New;
            eprintln!("a new conversation starts with your next message");
            continue;
        }
        let me = metnos_core::Principal::try_from(&session.principal);
        // The next message after an answer that asked what would let Metnos do something
        // (a non-retreat attempt): a stop is the attempt's.
        let attempt = session.attempt.take();
        let stop = match &me {
            Ok(me) => stops.detect(me, &text, attempt.as_ref()).await.0,
            Err(_) => metnos_gateway::text::stop_of(&text),
        };
        if let (metnos_gateway::text::Stop::Clear, Some(attempt)) = (stop, &attempt) {
            eprintln!(
                "all right: I will not look for a way to `{}` again today",
                attempt.wanted
            );
            continue;
        }
        if stop == metnos_gateway::text::Stop::Clear {
            let stopped = session.cancel().await;
            eprintln!(
                "{}",
                if stopped {
                    "stopped"
                } else {
                    "nothing to stop"
                }
            );
            continue;
        }
        let mut request = args.options.request(config, &session.principal, text);
        request.thread = thread as i32;
        thread = pb::Thread::Continue;
        let (mut canceller, principal) = session.canceller();
        tokio::select! {
            _ = session.turn(request) => {}
            _ = tokio::signal::ctrl_c() => {
                let request = pb::CancelTurnRequest {
                    target: Some(pb::cancel_turn_request::Target::Principal(principal)),
                    reason: "Ctrl-C in metnos chat".to_owned(),
                    ..Default::default()
                };
                let _ = canceller.cancel_turn(request).await;
                eprintln!("\nstopped");
            }
        }
    }
    let _ = metnos_kit::datadir::create_dir_all(&config.data_dir);
    let _ = editor.save_history(&history);
    ExitCode::SUCCESS
}
