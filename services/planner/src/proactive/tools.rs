//! Standing orders from chat (issue 22): tools the planner offers the LLM, never parsing
//! free text. `schedule_create` and `schedule_delete` ask the person on a card (the
//! schedule in words and its next firings, computed by the approval service from the
//! arguments as they will be stored) and act only once approved; `schedule_list`,
//! `schedule_pause` and `schedule_resume` act at once. Every tool acts for the turn's own
//! person only — the principal and level come from the turn, never from the model — and
//! on their own orders only.

use metnos_executors::Observation;
use metnos_llm::ToolDef;
use metnos_proto::approval::v1 as approval;
use serde_json::{Map, Value, json};

use crate::proactive::scheduler::{Notify, Order, ScheduleError, Scheduler, Task, TaskState};
use crate::turn::cards::Asked;
use crate::turn::flow::refusal;
use crate::turn::{Call, Checkpoint, PendingCall};

pub use metnos_core::names::tools::{
    SCHEDULE_CREATE as CREATE, SCHEDULE_DELETE as DELETE, SCHEDULE_LIST as LIST,
    SCHEDULE_PAUSE as PAUSE, SCHEDULE_RESUME as RESUME,
};

/// The longest request a standing order from chat may have, and its name: its card shows
/// them whole (with the schedule and its next firings, within the card's 300 characters).
pub const REQUEST_CHARS: usize = 120;
pub const NAME_CHARS: usize = 40;

/// Whether `name` is one of these tools.
pub fn is_tool(name: &str) -> bool {
    matches!(name, CREATE | LIST | PAUSE | RESUME | DELETE)
}

/// Whether `name` acts only once its card is approved (resuming: an order the person
/// paused fires again only on their yes).
pub fn is_carded(name: &str) -> bool {
    matches!(name, CREATE | DELETE | RESUME)
}

/// The tools as the LLM sees them.
pub fn tool_defs() -> Vec<ToolDef> {
    let id = json!({"type": "object", "required": ["id"], "properties": {
        "id": {"type": "string", "description": "The order's id, as schedule_list gives it"}
    }});
    vec![
        ToolDef {
            name: CREATE.to_owned(),
            description: "Set up a standing order: a request of the person run again and again \
                          on a schedule (e.g. 'every morning at 8 summarise ~/notes/today.md'). \
                          The person approves it on a card first."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "required": ["schedule", "request"],
                "properties": {
                    "schedule": {"type": "string", "description": "daily@HH:MM, `every N minutes`, `every N hours`, or a five-field cron expression such as `0 9 * * MON`, in the person's local time"},
                    "request": {"type": "string", "description": "What to do at each firing, in the person's words"},
                    "name": {"type": "string", "description": "A short name"},
                    "notify": {"type": "string", "enum": ["always", "on_change"], "description": "on_change: tell the person only when the result differs from the last run"}
                }
            }),
        },
        ToolDef {
            name: LIST.to_owned(),
            description: "List the person's standing orders: id, name, schedule, next firings."
                .to_owned(),
            parameters: json!({"type": "object", "properties": {}}),
        },
        ToolDef {
            name: PAUSE.to_owned(),
            description: "Pause one of the person's standing orders (it stops firing).".to_owned(),
            parameters: id.clone(),
        },
        ToolDef {
            name: RESUME.to_owned(),
            description:
                "Resume a paused standing order of the person (after they approve a card)."
                    .to_owned(),
            parameters: id.clone(),
        },
        ToolDef {
            name: DELETE.to_owned(),
            description: "Delete one of the person's standing orders (after they approve a card)."
                .to_owned(),
            parameters: id,
        },
    ]
}

fn text<'a>(args: &'a Value, key: &str) -> &'a str {
    args.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// An order as the LLM is shown it.
fn shown(scheduler: &Scheduler, task: &Task) -> Value {
    let next: Vec<String> = scheduler
        .upcoming(task, 3)
        .into_iter()
        .map(metnos_kit::time::rfc3339)
        .collect();
    let described = metnos_kit::schedule::Schedule::parse(&task.schedule)
        .map(|s| s.describe())
        .unwrap_or_default();
    json!({
        "id": task.id,
        "name": task.name,
        "schedule": task.schedule,
        "described": described,
        "time_zone": scheduler.zone_name(task),
        "state": task.state,
        "notify": task.notify,
        "next": next,
        "last_status": task.last_status,
    })
}

fn ok(content: Value) -> Observation {
    Observation::success(content, Map::new())
}

/// A new standing order's schedule, when its request, name and `notify` may be stored:
/// a request, visible characters only, within the limits, a known `notify`.
fn checked_order(
    scheduler: &Scheduler,
    args: &Value,
    key: &str,
    notify: &str,
) -> Result<crate::schedule::Schedule, ScheduleError> {
    let schedule = scheduler.check(text(args, "schedule"), key)?;
    let request = text(args, "request").trim();
    if request.is_empty() {
        return Err(ScheduleError::EmptyQuery);
    }
    crate::proactive::scheduler::visible(request, text(args, "name"))?;
    if request.chars().count() > REQUEST_CHARS
        || text(args, "name").trim().chars().count() > NAME_CHARS
    {
        return Err(ScheduleError::TooLong {
            request: REQUEST_CHARS,
            name: NAME_CHARS,
        });
    }
    if Notify::parse(notify).is_err() {
        return Err(ScheduleError::BadNotify(notify.chars().take(32).collect()));
    }
    Ok(schedule)
}

/// What a standing-order tool call comes to.
pub(crate) enum Answer {
    /// Observed now (done, or refused).
    Observed(Call, Observation),
    /// A card to ask first: the call as it will run once approved.
    Ask(Call, Box<Asked>),
}

/// One call of a standing-order tool: what it observes now, or the card to ask first.
/// `orders`: none when standing orders are off here.
pub(crate) async fn answer(orders: Option<&Scheduler>, cp: &Checkpoint, call: Call) -> Answer {
    let Some(scheduler) = orders else {
        let why = refusal("standing orders are off here (scheduler.enabled)");
        return Answer::Observed(call, why);
    };
    let person = cp.principal();
    let args = call.arguments.clone();
    // Standing orders come from the person's own words: not from a firing's turn, nor
    // from a turn that has read the world (a page could say "set up …").
    let refused = if cp.scheduled && call.name != LIST {
        Some("a standing order's firing cannot set up, change or delete standing orders")
    } else if cp.read_the_world() && call.name != LIST {
        Some(
            "this turn has read data from the world, so it cannot set up, change or delete \
                 standing orders; the person can ask for it in a new message",
        )
    } else if call.name != LIST && crate::turn::conversation::carries_the_world(cp, &call.arguments)
    {
        // An earlier answer of the thread made from a page: its words are not the
        // person's, however the next message says "yes".
        Some(
            "this request carries text of an earlier answer made from data from the world, \
                 so it cannot set up, change or delete standing orders; the person can ask \
                 for it in their own words",
        )
    } else {
        None
    };
    if let Some(why) = refused {
        return Answer::Observed(call, refusal(why));
    }
    let observation = match call.name.as_str() {
        CREATE => {
            let key = person.to_string();
            let notify = match text(&args, "notify") {
                "" => "always",
                n => n,
            };
            let checked = checked_order(scheduler, &args, &key, notify);
            match checked {
                Err(e) => refusal(e.to_string()),
                Ok(schedule) => {
                    // Exactly what will be stored, and what the card says.
                    // The card's next firings and the order's count from one moment.
                    let bound = json!({
                        "schedule": schedule.text(),
                        "request": text(&args, "request").trim(),
                        "name": text(&args, "name").trim(),
                        "notify": notify,
                        "anchor_at": scheduler.now_ms(),
                    });
                    return ask_card(cp, call, bound, schedule.text());
                }
            }
        }
        LIST => match scheduler
            .store
            .list(Some((person.channel(), person.sender_id())))
            .await
        {
            Ok(tasks) => ok(json!({
                "orders": tasks.iter().map(|t| shown(scheduler, t)).collect::<Vec<_>>()
            })),
            Err(e) => {
                tracing::warn!(error = %e, "cannot list a person's standing orders");
                refusal("the scheduler's store is unavailable")
            }
        },
        PAUSE | RESUME | DELETE => {
            let id = text(&args, "id");
            match own_order(scheduler, id, &person).await {
                Err(why) => refusal(why.to_string()),
                Ok(task)
                    if call.name == DELETE
                        || (call.name == RESUME && task.state == TaskState::Paused) =>
                {
                    let bound =
                        json!({"id": task.id, "name": task.name, "schedule": task.schedule});
                    return ask_card(cp, call, bound, &task.id);
                }
                Ok(task) => match scheduler.set_active(&task.id, call.name == RESUME).await {
                    Ok(task) => ok(shown(scheduler, &task)),
                    Err(e) => refusal(e.to_string()),
                },
            }
        }
        _ => refusal(format!("nonexistent executor: {}", call.name)),
    };
    Answer::Observed(call, observation)
}

/// Why a standing order is not the person's to change.
#[derive(Debug, thiserror::Error)]
enum NotOwn {
    /// Not theirs, or not there: the same words either way.
    #[error("no standing order `{0}` of yours")]
    NotFound(String),
    #[error("the scheduler's store is unavailable")]
    Unavailable,
}

/// `id` if it is `person`'s own standing order; else why not (the same words whether
/// it exists for someone else or not at all).
async fn own_order(
    scheduler: &Scheduler,
    id: &str,
    person: &metnos_core::principal::Principal,
) -> Result<Task, NotOwn> {
    let not_found = || NotOwn::NotFound(id.chars().take(64).collect());
    match scheduler.store.get(id).await {
        Ok(Some(task))
            if task.kind == crate::proactive::scheduler::Kind::Standing
                && task.channel == person.channel()
                && task.sender_id == person.sender_id() =>
        {
            Ok(task)
        }
        Ok(_) => Err(not_found()),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read a standing order");
            Err(NotOwn::Unavailable)
        }
    }
}

/// Asks the person on a card for `call` with the arguments `bound`.
fn ask_card(cp: &Checkpoint, mut call: Call, bound: Value, target: &str) -> Answer {
    call.arguments = bound.clone();
    let asked = asked(cp, &call.name, bound, target, String::new());
    Answer::Ask(call, Box::new(asked))
}

/// The card for one of the planner's own tools, `name` with the arguments `bound` (the
/// approval service says the call from them), about `target`, with `extra_json` (where
/// its text came from, for a memory); no territory.
pub(crate) fn asked(
    cp: &Checkpoint,
    name: &str,
    bound: Value,
    target: &str,
    extra_json: String,
) -> Asked {
    let italian = cp.language != Some(metnos_core::language::Language::English);
    let request = approval::CreatePendingRequest {
        requester: Some(cp.principal().to_proto()),
        request: Some(approval::ApprovalRequest {
            // Required, though the approval service says the call from its arguments.
            action_verb: name.to_owned(),
            target_summary: target.chars().take(200).collect(),
            capability_class: format!("{name}:{}", target.chars().take(200).collect::<String>()),
            language: if italian {
                metnos_core::language::Language::Italian.to_wire()
            } else {
                metnos_core::language::Language::English.to_wire()
            },
            reversibility: approval::Reversibility::Reversible as i32,
            territory_concession: approval::TerritoryConcession::None as i32,
            extra_json,
            ..Default::default()
        }),
        capability: String::new(),
        target: target.chars().take(512).collect(),
        executor: name.to_owned(),
        args_json: bound.to_string(),
        ttl_seconds: 0,
        territory_target: String::new(),
        level: 0,
    };
    Asked {
        args: bound,
        request,
        named_write: None,
    }
}

/// What an approved standing-order card does: the order made (its id from the
/// approval's token, so applying the same decision twice makes it once) or deleted.
/// `edited`: the schedule the person sent with their approval instead of the card's
/// (accept with edit), checked here as any schedule is.
pub(crate) async fn decided(
    orders: Option<&Scheduler>,
    cp: &Checkpoint,
    pending: &PendingCall,
    edited: &str,
) -> Observation {
    let Some(scheduler) = orders else {
        return refusal("standing orders are off here (scheduler.enabled)");
    };
    let person = cp.principal();
    let args = &pending.args;
    if pending.call.name == DELETE {
        let id = text(args, "id");
        return match own_order(scheduler, id, &person).await {
            Err(why) => refusal(why.to_string()),
            Ok(task) => match scheduler.delete(&task.id).await {
                Ok(()) => ok(json!({"deleted": task.id, "name": task.name})),
                Err(e) => refusal(e.to_string()),
            },
        };
    }
    if pending.call.name == RESUME {
        let id = text(args, "id");
        return match own_order(scheduler, id, &person).await {
            Err(why) => refusal(why.to_string()),
            Ok(task) => match scheduler.set_active(&task.id, true).await {
                Ok(task) => ok(shown(scheduler, &task)),
                Err(e) => refusal(e.to_string()),
            },
        };
    }
    let (schedule, anchor_ms) = if edited.is_empty() {
        (
            text(args, "schedule").to_owned(),
            args.get("anchor_at").and_then(Value::as_i64),
        )
    } else {
        match scheduler.check(edited, &person.to_string()) {
            // Counted from now: the card's firings were of the other schedule.
            Ok(schedule) => (schedule.text().to_owned(), None),
            Err(e) => return refusal(format!("the schedule you sent: {e}")),
        }
    };
    let order = Order {
        person: &person,
        schedule: &schedule,
        query: text(args, "request"),
        name: text(args, "name"),
        notify: text(args, "notify"),
        level: cp.level,
        anchor_ms,
    };
    match scheduler.create_as(&order, &pending.token).await {
        Ok(task) => ok(shown(scheduler, &task)),
        Err(e) => refusal(e.to_string()),
    }
}
