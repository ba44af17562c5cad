//! `metnos schedules`: the standing orders and the scheduler's maintenance tasks — list
//! them, add one of the owner's own, pause, resume, delete, or fire one now.

use std::process::ExitCode;

use clap::Subcommand;
use metnos_core::level::AutonomyLevel;
use metnos_kit::{Config, ServiceName};
use metnos_proto::planner::v1 as pb;
use metnos_proto::planner::v1::planner_service_client::PlannerServiceClient;

use crate::admin::{connect, failed, say};
use crate::ask_cli::cli_principal;

#[derive(Debug, Subcommand)]
pub enum SchedulesCommand {
    /// Every standing order and maintenance task: when it fires next and how it last went.
    List {
        /// One line of JSON per schedule instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// A standing order of your own: REQUEST run as a turn on SCHEDULE —
    /// `daily@08:00`, `every 2 hours`, or a cron expression such as `0 9 * * MON`.
    Add {
        schedule: String,
        request: String,
        /// A short name (default: the request's beginning).
        #[arg(long)]
        name: Option<String>,
        /// Tell you only when the result differs from the last run.
        #[arg(long)]
        on_change: bool,
        /// ReadOnly, Supervised or Full (at most turns.cli_level, its default).
        #[arg(long)]
        level: Option<AutonomyLevel>,
    },
    /// Stops one from firing until it is resumed.
    Pause { id: String },
    /// Fires it again from its next slot (what it missed while paused never fires).
    Resume { id: String },
    /// Removes a standing order (its runs stay in the store).
    Delete { id: String },
    /// Fires it at the scheduler's next tick; its cadence goes on after.
    Run { id: String },
}

fn when(ts: &prost_types::Timestamp, zone: &str) -> String {
    let Some(ms) = metnos_kit::time::from_timestamp(ts) else {
        return "?".to_owned();
    };
    let Ok(t) = jiff::Timestamp::from_millisecond(ms) else {
        return "?".to_owned();
    };
    let zone = jiff::tz::TimeZone::get(zone).unwrap_or_else(|_| jiff::tz::TimeZone::system());
    t.to_zoned(zone).strftime("%a %d %b %H:%M").to_string()
}

fn shown(s: &pb::Schedule) -> Vec<String> {
    let who = s
        .principal
        .as_ref()
        .map(|p| format!("{}:{}", p.channel, p.sender_id))
        .unwrap_or_else(|| "maintenance".to_owned());
    let next: Vec<String> = s.next.iter().map(|t| when(t, &s.time_zone)).collect();
    let mut lines = vec![format!(
        "{}  {}  [{}] {} — {} ({})",
        s.id, who, s.state, s.name, s.described, s.time_zone
    )];
    if !next.is_empty() {
        lines.push(format!(
            "    next: {}{}",
            next.join(", "),
            if s.deferred {
                " (waiting for a protected window to end)"
            } else {
                ""
            }
        ));
    }
    if !s.last_status.is_empty() {
        let last = s
            .last_run_at
            .as_ref()
            .map(|t| when(t, &s.time_zone))
            .unwrap_or_default();
        let output = s.last_output.lines().next().unwrap_or_default();
        lines.push(format!("    last: {last} {}: {output}", s.last_status));
    }
    lines
}

fn json_of(s: &pb::Schedule) -> serde_json::Value {
    let ms = |t: &prost_types::Timestamp| {
        metnos_kit::time::from_timestamp(t).map(metnos_kit::time::rfc3339)
    };
    serde_json::json!({
        "id": s.id,
        "kind": s.kind,
        "name": s.name,
        "principal": s.principal.as_ref().map(|p| format!("{}:{}", p.channel, p.sender_id)),
        "schedule": s.schedule,
        "described": s.described,
        "time_zone": s.time_zone,
        "query": s.query,
        "notify": s.notify,
        "state": s.state,
        "deferred": s.deferred,
        "next": s.next.iter().filter_map(ms).collect::<Vec<_>>(),
        "last_run_at": s.last_run_at.as_ref().and_then(ms),
        "last_status": s.last_status,
        "last_output": s.last_output,
    })
}

pub async fn schedules(config: &Config, command: SchedulesCommand) -> ExitCode {
    let (channel, url) = match connect(config, ServiceName::Planner) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let mut planner = PlannerServiceClient::new(channel);
    let fail = |status: tonic::Status| failed(ServiceName::Planner, &url, &status);
    let one = |s: Option<pb::Schedule>| {
        for line in shown(&s.unwrap_or_default()) {
            say(&line);
        }
    };
    match command {
        SchedulesCommand::List { json } => {
            match planner
                .list_schedules(pb::ListSchedulesRequest::default())
                .await
            {
                Ok(r) => {
                    let schedules = r.into_inner().schedules;
                    if !json && schedules.is_empty() {
                        say("no schedules");
                    }
                    for s in &schedules {
                        if json {
                            say(&json_of(s).to_string());
                        } else {
                            for line in shown(s) {
                                say(&line);
                            }
                        }
                    }
                }
                Err(status) => return fail(status),
            }
        }
        SchedulesCommand::Add {
            schedule,
            request,
            name,
            on_change,
            level,
        } => {
            let request = pb::CreateScheduleRequest {
                principal: Some(cli_principal()),
                schedule,
                query: request,
                name: name.unwrap_or_default(),
                notify: if on_change { "on_change" } else { "always" }.to_owned(),
                level: level.map(|l| l.to_proto() as i32).unwrap_or_default(),
            };
            match planner.create_schedule(request).await {
                Ok(r) => one(r.into_inner().schedule),
                Err(status) => return fail(status),
            }
        }
        SchedulesCommand::Pause { id } => {
            let request = pb::SetScheduleStateRequest { id, active: false };
            match planner.set_schedule_state(request).await {
                Ok(r) => one(r.into_inner().schedule),
                Err(status) => return fail(status),
            }
        }
        SchedulesCommand::Resume { id } => {
            let request = pb::SetScheduleStateRequest { id, active: true };
            match planner.set_schedule_state(request).await {
                Ok(r) => one(r.into_inner().schedule),
                Err(status) => return fail(status),
            }
        }
        SchedulesCommand::Delete { id } => {
            match planner
                .delete_schedule(pb::DeleteScheduleRequest { id: id.clone() })
                .await
            {
                Ok(_) => say(&format!("deleted {id}")),
                Err(status) => return fail(status),
            }
        }
        SchedulesCommand::Run { id } => {
            match planner.run_schedule(pb::RunScheduleRequest { id }).await {
                Ok(r) => one(r.into_inner().schedule),
                Err(status) => return fail(status),
            }
        }
    }
    ExitCode::SUCCESS
}
