//! Issue 41: under load every verdict answered is in the verdict log. Eight clients judge at
//! once through the real server over mutual TLS, the log's queue kept tiny so it is full
//! most of the time; once the server has stopped, the log holds exactly one line per
//! verdict answered, its chain intact. (Before, a full queue dropped lines — 62 % of them
//! with this queue in `vaglio_flood` — and the chain still verified.)

use std::num::NonZero;
use std::time::Duration;

use metnos_kit::ServiceName;
use metnos_kit::runtime::spawn_on_loopback;
use metnos_kit::tls::{Identity, Tls};
use metnos_proto::vaglio::v1::JudgeRequest;
use metnos_proto::vaglio::v1::vaglio_service_client::VaglioServiceClient;

const CLIENTS: usize = 8;
const CALLS: usize = 150;

#[test]
fn eight_clients_at_once_every_verdict_answered_is_logged() {
    let data = tempfile::tempdir().unwrap();
    let mut config = metnos_kit::testing::config(data.path());
    config.vaglio.log_queue_lines = NonZero::new(2).unwrap();
    let planner = Tls::load(&config, Identity::Planner).unwrap();
    let log_dir = config.data_dir.join(metnos_kit::datadir::VERDICTS_DIR);
    let (url, server) = spawn_on_loopback(ServiceName::Vaglio, move |listener, shutdown| {
        metnos_vaglio::serve(config, listener, shutdown)
    })
    .unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let answered = runtime.block_on(async {
        let channel = metnos_kit::client::channel(&planner, Identity::Vaglio, &url).unwrap();
        let mut clients = tokio::task::JoinSet::new();
        for client in 0..CLIENTS {
            let mut vaglio = VaglioServiceClient::new(channel.clone());
            clients.spawn(async move {
                let mut answered = 0;
                for call in 0..CALLS {
                    let request = JudgeRequest {
                        intent: format!("read note {client}-{call}"),
                        executor: "fs_read".into(),
                        args_json: r#"{"path":"/tmp/notes.txt"}"#.into(),
                        context: None,
                    };
                    // The server may still be starting: a refused connection is retried.
                    loop {
                        match vaglio.judge(request.clone()).await {
                            Ok(_) => break,
                            Err(s) if s.code() == tonic::Code::Unavailable && answered == 0 => {
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                            Err(s) => panic!("client {client}, call {call}: {s:?}"),
                        }
                    }
                    answered += 1;
                }
                answered
            });
        }
        let mut answered = 0;
        while let Some(done) = clients.join_next().await {
            answered += done.unwrap();
        }
        answered
    });
    runtime.block_on(server.stop()).unwrap();
    assert_eq!(answered, CLIENTS * CALLS);
    let report = metnos_kit::chain::verify(&log_dir, None, &|_| false).unwrap();
    assert_eq!(report.broken, None);
    assert_eq!(report.not_logged, 0);
    assert_eq!(
        report.lines,
        (CLIENTS * CALLS) as u64,
        "one line per verdict answered"
    );
}
