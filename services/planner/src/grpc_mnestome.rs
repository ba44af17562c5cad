//! The planner's RPCs on the mnestome (issue 46): the owner's terminal lists, shows and
//! forgets passages and wishes (`metnos mnestome`); the spectator page lists them. Names
//! only: the mnestome keeps no values.

use metnos_core::limits;
use metnos_kit::time::to_timestamp;
use metnos_proto::planner::v1 as pb;
use tonic::{Request, Response, Status};

use crate::error::Error;
use crate::store::mnestome::{MAX_NAME, Mnestome, Proto, Strength};

/// Most passages and wishes one listing returns.
pub const MAX_LISTED: u32 = 500;

fn passage(s: Strength) -> pb::Passage {
    pb::Passage {
        from_executor: s.passage.from_executor,
        from_field: s.passage.from_field,
        to_executor: s.passage.to_executor,
        to_arg: s.passage.to_arg,
        weight: s.weight,
        uses: s.uses,
        successes: s.successes,
        last_used: Some(to_timestamp(s.last_used)),
    }
}

fn wish(p: Proto) -> pb::Wish {
    pb::Wish {
        from_executor: p.from_executor,
        wanted: p.wanted,
        arg_names: p.arg_names,
        weight: p.weight,
        uses: p.uses,
        first_seen: Some(to_timestamp(p.first_seen)),
        last_used: Some(to_timestamp(p.last_used)),
    }
}

pub async fn list(
    mnestome: &Mnestome,
    request: Request<pb::ListPassagesRequest>,
) -> Result<Response<pb::ListPassagesResponse>, Status> {
    let request = request.into_inner();
    limits::number("limit", u64::from(request.limit), u64::from(MAX_LISTED))
        .map_err(Error::from)?;
    limits::bytes("executor", &request.executor, MAX_NAME).map_err(Error::from)?;
    let limit = if request.limit == 0 {
        20
    } else {
        request.limit
    };
    let (passages, total, wishes) = mnestome
        .naming(&request.executor, limit)
        .await
        .map_err(Error::from)?;
    let shortcuts = mnestome
        .shortcuts()
        .await
        .map_err(Error::from)?
        .into_iter()
        .filter(|s| {
            request.executor.is_empty()
                || s.name == request.executor
                || s.executors().any(|e| e == request.executor)
        })
        .take(limit as usize)
        .map(|s| pb::Shortcut {
            name: s.name,
            from_executor: s.from_executor,
            chain: s.chain,
            kept_at: Some(to_timestamp(s.created_at)),
        })
        .collect();
    Ok(Response::new(pb::ListPassagesResponse {
        total,
        passages: passages.into_iter().map(passage).collect(),
        wishes: wishes.into_iter().map(wish).collect(),
        shortcuts,
    }))
}

pub async fn forget(
    mnestome: &Mnestome,
    request: Request<pb::ForgetPassagesRequest>,
) -> Result<Response<pb::ForgetPassagesResponse>, Status> {
    let request = request.into_inner();
    limits::bytes("executor", &request.executor, MAX_NAME).map_err(Error::from)?;
    if request.executor.trim().is_empty() {
        return Err(Status::invalid_argument(
            "executor: an executor's name is needed",
        ));
    }
    let forgotten = mnestome
        .forget(&request.executor)
        .await
        .map_err(Error::from)?;
    tracing::info!(forgotten, "passages and wishes forgotten");
    Ok(Response::new(pb::ForgetPassagesResponse { forgotten }))
}
