//! The loop's stages driven one at a time, without the network: an in-process stand-in
//! for the filter services, a real SQLite store in a temporary folder, no LLM.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use metnos_core::level::AutonomyLevel;
use metnos_core::principal::Principal;
use metnos_executors::{Catalog, Runner};
use metnos_kit::config::StoreSpec;
use metnos_kit::config::TurnsConfig;
use metnos_proto::approval::v1 as approval;
use metnos_proto::vaglio::v1 as vaglio;
use serde_json::json;
use tonic::Status;

use crate::filters::{ClientError, Filters, PolicyAnswer};
use crate::llm::{LlmSlot, NoLlm};
use crate::proactive::tools::{self, Answer};
use crate::store::Store;
use crate::turn::asking::Asking;
use crate::turn::engine::{Parts, Planner};
use crate::turn::execution::Execution;
use crate::turn::record::Records;
use crate::turn::rules::Outcome;
use crate::turn::running::Running;
use crate::turn::vetting::{Refusal, Vetting};
use crate::turn::{Call, Checkpoint, FinalKind, Mode, StepLog, TurnRequest, Validation};
use crate::turnlog::TurnLog;

/// The filter services as a stage sees them: every question noted, policy allows.
#[derive(Debug, Default)]
struct Noted {
    asked: Mutex<Vec<String>>,
}

impl Noted {
    fn note(&self, what: &str) {
        self.asked.lock().unwrap().push(what.to_owned());
    }

    fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

#[tonic::async_trait]
impl Filters for Noted {
    async fn check(
        &self,
        _: AutonomyLevel,
        _: &Principal,
        capability: metnos_core::Capability,
        _: &str,
    ) -> Result<PolicyAnswer, ClientError> {
        self.note(&format!("policy {capability}"));
        Ok(PolicyAnswer {
            outcome: Outcome::Allowed,
            reason: String::new(),
            grant_id: None,
        })
    }

    async fn judge(&self, _: vaglio::JudgeRequest) -> Result<vaglio::Verdict, ClientError> {
        self.note("vaglio");
        Err(Status::unimplemented("not in these tests").into())
    }

    async fn create_pending(
        &self,
        _: approval::CreatePendingRequest,
    ) -> Result<approval::CreatePendingResponse, ClientError> {
        self.note("approval");
        Err(Status::unimplemented("not in these tests").into())
    }

    async fn get_pending(&self, _: &str) -> Result<approval::PendingApproval, ClientError> {
        Err(Status::unimplemented("not in these tests").into())
    }

    async fn wait_decision(&self, _: &str) -> Result<approval::PendingApproval, ClientError> {
        Err(Status::unimplemented("not in these tests").into())
    }

    async fn cancel(&self, _: &str, _: &str) -> Result<(), ClientError> {
        Ok(())
    }

    async fn tell(&self, _: &Principal, _: &str, _: &str) -> Result<(), ClientError> {
        Ok(())
    }

    async fn show_card(
        &self,
        _: &Principal,
        _: &str,
        _: approval::Card,
    ) -> Result<(), ClientError> {
        Ok(())
    }
}

/// What the stages are made of here.
struct Bench {
    _dir: tempfile::TempDir,
    config: TurnsConfig,
    catalog: Catalog,
    runner: Runner,
    filters: Arc<Noted>,
    store: Store,
    log: TurnLog,
    llm: LlmSlot,
}

impl Bench {
    async fn new() -> Bench {
        let dir = tempfile::tempdir().unwrap();
        let spec = StoreSpec::Sqlite {
            path: dir.path().join("planner.db"),
        };
        let db =
            metnos_kit::store::open(&spec, "planner", &crate::MIGRATIONS, Duration::from_secs(5))
                .await
                .unwrap();
        let log = TurnLog::new(dir.path().join("turns"));
        Bench {
            _dir: dir,
            config: TurnsConfig::default(),
            catalog: Catalog::default(),
            runner: Runner::default(),
            filters: Arc::new(Noted::default()),
            store: Store::new(db),
            log,
            llm: Err(NoLlm("no tier is configured ([runtime.llm])".to_owned())),
        }
    }

    /// A new turn's checkpoint, as the planner starts it.
    fn checkpoint(&self, query: &str) -> Checkpoint {
        let planner = Planner::new(Parts {
            config: self.config.clone(),
            default_mode: Mode::Local,
            llm: self.llm.clone(),
            catalog: Arc::new(Catalog::default()),
            runner: Runner::default(),
            filters: self.filters.clone(),
            store: self.store.clone(),
            log: self.log.clone(),
            conversation: metnos_kit::config::ConversationConfig::default(),
            memory: metnos_kit::config::MemoryConfig::default(),
            orders: None,
        });
        planner.start(&TurnRequest {
            principal: Principal::new("telegram", "42").unwrap(),
            level: AutonomyLevel::Supervised,
            query: query.to_owned(),
            language: None,
            mode: None,
            forwarded: false,
            thread: crate::turn::conversation::Threading::None,
        })
    }

    fn vetting(&self) -> Vetting<'_> {
        Vetting::new(
            &self.config,
            &self.catalog,
            &self.runner,
            self.filters.as_ref(),
            &self.store,
        )
    }

    fn execution(&self) -> Execution<'_> {
        let records = Records::new(&self.store, &self.log);
        Execution::new(
            &self.config,
            &self.catalog,
            &self.runner,
            &self.store,
            &self.llm,
            records,
        )
    }
}

fn call(name: &str, arguments: serde_json::Value) -> Call {
    Call {
        id: "c1".to_owned(),
        name: name.to_owned(),
        arguments,
    }
}

#[tokio::test]
async fn a_name_that_is_no_executor_is_refused_before_any_filter_is_asked() {
    let bench = Bench::new().await;
    let cp = bench.checkpoint("read my notes");
    let asked = call("delete_everything", json!({"path": "~"}));
    let (findings, result) = bench.vetting().vet(&cp, &asked, 1, Instant::now()).await;
    match result {
        Err(Refusal::Refused(why)) => assert!(
            why.starts_with("nonexistent executor: delete_everything"),
            "{why}"
        ),
        other => panic!("refused as unknown, not {other:?}"),
    }
    assert!(
        bench.filters.asked().is_empty(),
        "{:?}",
        bench.filters.asked()
    );
    // What vetting found reaches the step's log only when the loop records it.
    let mut log = StepLog::new(1, &asked, metnos_llm::Tier::Fast, &[]);
    assert_eq!(log.validation, Validation::Ok);
    let events = findings.record(&mut log);
    assert_eq!(log.validation, Validation::UnknownExecutor);
    assert!(events.is_empty(), "no policy or vaglio answer to tell");
}

#[tokio::test]
async fn an_argument_holding_the_fence_key_is_refused_before_anything_else() {
    let bench = Bench::new().await;
    let cp = bench.checkpoint("summarise the page");
    let key = cp.fence_nonce.clone();
    let asked = call("fs_read", json!({"path": format!("~/{key}")}));
    let (findings, result) = bench.vetting().vet(&cp, &asked, 1, Instant::now()).await;
    assert!(
        matches!(&result, Err(Refusal::Refused(why)) if why.contains("key of the fence")),
        "{result:?}"
    );
    let mut log = StepLog::default();
    findings.record(&mut log);
    assert_eq!(log.validation, Validation::FenceKey);
    assert!(bench.filters.asked().is_empty());
}

#[tokio::test]
async fn reading_the_scratchpad_of_a_turn_that_stored_nothing_is_refused() {
    let bench = Bench::new().await;
    let cp = bench.checkpoint("what did step 1 say?");
    let asked = call(crate::turn::scratch::TOOL, json!({"id": "sp-made-up"}));
    let (observation, labels) = bench.execution().read_scratch(&cp, &asked).await;
    assert!(!observation.ok);
    assert_eq!(
        observation.error.as_deref(),
        Some("the scratchpad is empty in this turn")
    );
    assert!(labels.is_empty(), "a refusal is the planner's own words");
}

#[tokio::test]
async fn a_planner_without_an_llm_ends_the_turn_saying_why() {
    let bench = Bench::new().await;
    let mut cp = bench.checkpoint("what time is it?");
    let asking = Asking::new(
        &bench.llm,
        &bench.catalog,
        &bench.config,
        bench.filters.as_ref(),
        &bench.store,
        false,
    );
    let (_tx, mut cancel) = tokio::sync::watch::channel(false);
    let ended = asking.ask_llm(&mut cp, &mut cancel).await;
    let Err(finish) = ended else {
        panic!("the turn ends")
    };
    assert_eq!(finish.kind, FinalKind::Error);
    // Said in the person's language; the configuration's words stay in the log.
    assert_eq!(
        finish.text,
        "I cannot answer: no language model is set up (whoever runs Metnos finds why in the planner's log)."
    );
}

#[tokio::test]
async fn standing_order_tools_refuse_where_orders_are_off() {
    let bench = Bench::new().await;
    let cp = bench.checkpoint("every morning tell me the weather");
    let asked = call(tools::CREATE, json!({"schedule": "daily@08:00"}));
    match tools::answer(None, &cp, asked).await {
        Answer::Observed(_, observation) => assert_eq!(
            observation.error.as_deref(),
            Some("standing orders are off here (scheduler.enabled)")
        ),
        Answer::Ask(..) => panic!("no card where standing orders are off"),
    }
}

#[tokio::test]
async fn a_scheduled_turn_cannot_make_standing_orders() {
    let bench = Bench::new().await;
    let mut cp = bench.checkpoint("every morning tell me the weather");
    cp.scheduled = true;
    let scheduler = crate::proactive::scheduler::Scheduler::new(
        crate::proactive::scheduler::TaskStore::new(bench.store.db().clone()),
        Arc::new(metnos_kit::clock::SystemClock),
        "test",
        Default::default(),
    );
    let asked = call(tools::CREATE, json!({"schedule": "daily@08:00"}));
    match tools::answer(Some(&scheduler), &cp, asked).await {
        Answer::Observed(_, observation) => assert_eq!(
            observation.error.as_deref(),
            Some("a standing order's firing cannot set up, change or delete standing orders")
        ),
        Answer::Ask(..) => panic!("a firing asks for no card"),
    }
}

#[test]
fn a_second_driver_of_a_turn_keeps_its_cancel_signal_when_the_first_ends() {
    let running = Running::default();
    let (_first_rx, first) = running.register("t1");
    let (second_rx, second) = running.register("t1");
    drop(first);
    assert_eq!(running.ids(), vec!["t1".to_owned()]);
    assert!(running.signal_cancel("t1"));
    assert!(*second_rx.borrow(), "the second driver is told");
    drop(second);
    assert!(running.ids().is_empty());
    assert!(
        !running.signal_cancel("t1"),
        "nobody drives it here any more"
    );
}
