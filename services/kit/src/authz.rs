//! Who may call what: each service declares one [`Table`] — for every RPC, the identities
//! that may call it — and [`AuthorizeLayer`] enforces it on every request, before any
//! handler runs, from the identity the caller's certificate names (never from a request
//! field). No certificate: `UNAUTHENTICATED`. An RPC the caller's identity is not listed for,
//! or one missing from the table: `PERMISSION_DENIED`, naming what was missing. Health and
//! reflection answer any authenticated caller. Handlers read the caller as a [`Caller`]
//! request extension, to act only for the people that identity speaks for.

use std::convert::Infallible;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
use tower_layer::Layer;
use tower_service::Service;

use crate::tls::{Identity, identity_of};

/// One RPC and the identities that may call it.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// The method's name, as in the proto (`Check`).
    pub method: &'static str,
    pub callers: &'static [Identity],
}

/// A service's authorization table.
#[derive(Debug, Clone, Copy)]
pub struct Table {
    /// The full gRPC service name (`metnos.policy.v1.PolicyService`).
    pub service: &'static str,
    pub rules: &'static [Rule],
}

/// Answered without a client certificate (Kubernetes' probes cannot present one).
const HEALTH: &str = "grpc.health.v1.Health";

/// Services every authenticated caller may use.
const OPEN: [&str; 3] = [
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
];

/// The authenticated caller of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller(pub Identity);

impl Caller {
    /// The caller as the handler of `request` sees it (the layer put it there).
    pub fn of<T>(request: &tonic::Request<T>) -> Option<Identity> {
        request.extensions().get::<Caller>().map(|c| c.0)
    }

    /// Whether this caller speaks for people of `channel`.
    pub fn speaks_for(identity: Identity, channel: &str) -> bool {
        identity.channels().contains(&channel)
    }
}

/// Why a call is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    NoCertificate,
    NotAnIdentity(String),
    Denied {
        caller: Identity,
        rpc: String,
        needs: String,
    },
}

impl Refusal {
    pub fn status(&self) -> tonic::Status {
        match self {
            Refusal::NoCertificate => tonic::Status::unauthenticated(
                "a client certificate of this installation is required",
            ),
            Refusal::NotAnIdentity(why) => tonic::Status::permission_denied(format!(
                "the client certificate names no Metnos identity: {why}"
            )),
            Refusal::Denied { caller, rpc, needs } => tonic::Status::permission_denied(format!(
                "{} may not call {rpc} (it needs the identity {needs})",
                caller.spiffe_id()
            )),
        }
    }
}

impl Table {
    /// May `caller` call `path` (`/package.Service/Method`)?
    pub fn decide(
        &self,
        path: &str,
        caller: Result<Identity, Refusal>,
    ) -> Result<Option<Identity>, Refusal> {
        let rpc = path.trim_start_matches('/');
        let (service, method) = rpc.split_once('/').unwrap_or((rpc, ""));
        if service == HEALTH && caller == Err(Refusal::NoCertificate) {
            return Ok(None);
        }
        let caller = caller?;
        if OPEN.contains(&service) {
            return Ok(Some(caller));
        }
        let callers: &[Identity] = if service == self.service {
            self.rules
                .iter()
                .find(|r| r.method == method)
                .map_or(&[], |r| r.callers)
        } else {
            &[]
        };
        if callers.contains(&caller) {
            return Ok(Some(caller));
        }
        let needs = if callers.is_empty() {
            "of no caller: it is not open".to_owned()
        } else {
            callers
                .iter()
                .map(|c| c.spiffe_id())
                .collect::<Vec<_>>()
                .join(" or ")
        };
        Err(Refusal::Denied {
            caller,
            rpc: rpc.chars().take(200).collect(),
            needs,
        })
    }
}

/// The identity the TLS connection's client certificate names.
fn caller_of(request: &http::Request<Body>) -> Result<Identity, Refusal> {
    let certs = request
        .extensions()
        .get::<TlsConnectInfo<TcpConnectInfo>>()
        .and_then(TlsConnectInfo::peer_certs)
        .ok_or(Refusal::NoCertificate)?;
    let leaf = certs.first().ok_or(Refusal::NoCertificate)?;
    identity_of(leaf).map_err(|e| Refusal::NotAnIdentity(e.to_string()))
}

/// Enforces a [`Table`] in front of a server's services.
#[derive(Debug, Clone, Copy)]
pub struct AuthorizeLayer {
    table: &'static Table,
}

impl AuthorizeLayer {
    pub fn new(table: &'static Table) -> AuthorizeLayer {
        AuthorizeLayer { table }
    }
}

impl<S> Layer<S> for AuthorizeLayer {
    type Service = Authorize<S>;

    fn layer(&self, inner: S) -> Authorize<S> {
        Authorize {
            inner,
            table: self.table,
        }
    }
}

/// See [`AuthorizeLayer`].
#[derive(Debug, Clone)]
pub struct Authorize<S> {
    inner: S,
    table: &'static Table,
}

impl<S> Service<http::Request<Body>> for Authorize<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = futures::future::Either<
        S::Future,
        std::future::Ready<Result<http::Response<Body>, Infallible>>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        let path = request.uri().path().to_owned();
        match self.table.decide(&path, caller_of(&request)) {
            Ok(identity) => {
                if let Some(identity) = identity {
                    request.extensions_mut().insert(Caller(identity));
                }
                futures::future::Either::Left(self.inner.call(request))
            }
            Err(refusal) => {
                tracing::warn!(rpc = %path, refused = ?refusal, "call refused");
                futures::future::Either::Right(std::future::ready(Ok(refusal.status().into_http())))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: Table = Table {
        service: "metnos.policy.v1.PolicyService",
        rules: &[
            Rule {
                method: "Check",
                callers: &[Identity::Planner, Identity::Owner],
            },
            Rule {
                method: "RecordGrant",
                callers: &[Identity::Approval, Identity::Owner],
            },
        ],
    };

    #[test]
    fn a_listed_identity_passes_and_another_is_told_what_it_lacks() {
        let path = "/metnos.policy.v1.PolicyService/RecordGrant";
        assert_eq!(
            TABLE.decide(path, Ok(Identity::Approval)),
            Ok(Some(Identity::Approval))
        );
        let refused = TABLE.decide(path, Ok(Identity::Gateway)).unwrap_err();
        let status = refused.status();
        assert_eq!(status.code(), tonic::Code::PermissionDenied);
        assert_eq!(
            status.message(),
            "spiffe://metnos/gateway may not call metnos.policy.v1.PolicyService/RecordGrant \
             (it needs the identity spiffe://metnos/approval or spiffe://metnos/owner)"
        );
    }

    #[test]
    fn unlisted_rpcs_and_other_services_are_closed_and_health_is_open() {
        let unlisted = TABLE.decide(
            "/metnos.policy.v1.PolicyService/PruneGrants",
            Ok(Identity::Owner),
        );
        assert!(
            unlisted
                .unwrap_err()
                .status()
                .message()
                .contains("it is not open"),
        );
        assert!(
            TABLE
                .decide(
                    "/metnos.approval.v1.ApprovalService/Resolve",
                    Ok(Identity::Owner)
                )
                .is_err()
        );
        assert!(
            TABLE
                .decide("/grpc.health.v1.Health/Check", Ok(Identity::Gateway))
                .is_ok()
        );
        // Health answers without a certificate; reflection and the service do not.
        assert_eq!(
            TABLE.decide("/grpc.health.v1.Health/Check", Err(Refusal::NoCertificate)),
            Ok(None)
        );
        for path in [
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
            "/metnos.policy.v1.PolicyService/Check",
        ] {
            let status = TABLE
                .decide(path, Err(Refusal::NoCertificate))
                .unwrap_err()
                .status();
            assert_eq!(status.code(), tonic::Code::Unauthenticated, "{path}");
        }
    }
}
