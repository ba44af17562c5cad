//! The planner's RPCs on a person's long-term memory (issue 40): the owner's terminal lists,
//! searches and forgets entries (`metnos memory`); the spectator page lists them without
//! their words. And forgetting a person's conversations (`/forget`, `metnos conversations
//! forget`).

use metnos_core::limits;
use metnos_core::principal::Principal;
use metnos_kit::authz::Caller;
use metnos_kit::time::{now_ms, to_timestamp};
use metnos_kit::tls::Identity;
use metnos_proto::planner::v1 as pb;
use tonic::{Request, Response, Status};

use crate::error::Error;
use crate::store::memories::{MAX_FOUND, Memory, MemoryStore};

/// The longest query `SearchMemories` takes, in bytes.
const QUERY: usize = 1024;

/// An entry as `spectator` (the page) may see it: never its words.
fn entry(memory: Memory, spectator: bool) -> pb::MemoryEntry {
    pb::MemoryEntry {
        id: memory.id,
        text: if spectator {
            String::new()
        } else {
            memory.text
        },
        sources: memory.labels,
        turn_id: memory.turn_id,
        saved_at: Some(to_timestamp(memory.saved_at)),
        used_at: Some(to_timestamp(memory.used_at)),
    }
}

fn person(principal: Option<metnos_proto::common::v1::Principal>) -> Result<Principal, Error> {
    Ok(Principal::required("principal", principal.as_ref())?)
}

fn limit(asked: u32, default: u32) -> Result<u32, Error> {
    limits::number("limit", u64::from(asked), u64::from(MAX_FOUND))?;
    Ok(if asked == 0 { default } else { asked })
}

pub async fn list(
    memories: &MemoryStore,
    request: Request<pb::ListMemoriesRequest>,
) -> Result<Response<pb::ListMemoriesResponse>, Status> {
    let spectator = Caller::of(&request) == Some(Identity::Web);
    let request = request.into_inner();
    let who = person(request.principal)?;
    let limit = limit(request.limit, 20)?;
    let found = memories.list(&who, limit).await.map_err(Error::from)?;
    let (total, from_the_world) = memories.count(&who).await.map_err(Error::from)?;
    Ok(Response::new(pb::ListMemoriesResponse {
        entries: found.into_iter().map(|m| entry(m, spectator)).collect(),
        total,
        from_the_world,
    }))
}

pub async fn search(
    memories: &MemoryStore,
    request: Request<pb::SearchMemoriesRequest>,
) -> Result<Response<pb::SearchMemoriesResponse>, Status> {
    let request = request.into_inner();
    let who = person(request.principal)?;
    limits::bytes("query", &request.query, QUERY).map_err(Error::from)?;
    let limit = limit(request.limit, 10)?;
    let found = memories
        .search(&who, &request.query, limit, now_ms())
        .await
        .map_err(Error::from)?;
    Ok(Response::new(pb::SearchMemoriesResponse {
        entries: found.into_iter().map(|m| entry(m, false)).collect(),
    }))
}

pub async fn forget(
    memories: &MemoryStore,
    request: Request<pb::ForgetMemoryRequest>,
) -> Result<Response<pb::ForgetMemoryResponse>, Status> {
    let request = request.into_inner();
    let who = person(request.principal)?;
    limits::bytes("id", &request.id, limits::TOKEN).map_err(Error::from)?;
    memories
        .forget(&who, &request.id)
        .await
        .map_err(Error::from)?;
    tracing::info!(principal = %who, "a memory was forgotten at the owner's request");
    Ok(Response::new(pb::ForgetMemoryResponse {}))
}

/// Erases `person`'s conversations (and their memory when `memory` says), in one
/// transaction, and stops their turns that carry a thread: a waiting turn's checkpoint
/// holds the thread's words, and a running one would write its exchange back. Recorded in
/// the turn log as counts, never the words.
pub async fn forget_conversations(
    planner: &crate::Planner,
    turn_log: &crate::turnlog::TurnLog,
    caller: Identity,
    person: &Principal,
    memory: bool,
) -> Result<Response<pb::ForgetConversationsResponse>, Status> {
    let threads = crate::store::threads::ThreadStore::new(planner.store().db().clone());
    let forgotten = threads
        .forget(person, now_ms(), memory)
        .await
        .map_err(Error::from)?;
    // Committed now: a turn that began before may have read what was erased (its start
    // after the time the forget took, before its commit): it counts as begun before.
    let forgot_at = now_ms();
    if let Err(e) = threads.mark_forgotten(person, forgot_at, memory).await {
        tracing::warn!(principal = %person, error = %e, "when the person forgot could not be moved to the forget's commit");
    }
    let stopped = planner.cancel_threaded(person, forgot_at, memory).await;
    tracing::info!(principal = %person, exchanges = forgotten.exchanges, memories = forgotten.memories, stopped, "a person's conversations were erased");
    let record = forgotten_record(person, caller, forgotten, memory, stopped);
    turn_log.append(&record, now_ms()).await;
    Ok(Response::new(pb::ForgetConversationsResponse {
        exchanges: forgotten.exchanges,
        memories: forgotten.memories,
    }))
}

fn forgotten_record(
    person: &Principal,
    caller: Identity,
    forgotten: crate::store::threads::Forgotten,
    memory: bool,
    stopped: usize,
) -> serde_json::Value {
    let at = metnos_kit::time::rfc3339(now_ms());
    let mut counts = serde_json::json!({"exchanges": forgotten.exchanges});
    if memory {
        counts["memories"] = forgotten.memories.into();
    }
    if stopped > 0 {
        counts["turns_stopped"] = stopped.into();
    }
    serde_json::json!({
        "turn_id": format!("forget-{}", metnos_kit::random::hex(8)),
        "principal": person,
        "final_kind": "conversations_forgotten",
        "forgotten": counts,
        "by": caller.spiffe_id(),
        "steps": [],
        "started_at": at,
        "ended_at": at,
    })
}
