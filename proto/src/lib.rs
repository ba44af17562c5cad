//! The gRPC contracts of Metnos: one `metnos.<service>.v1` package per service plus
//! `metnos.common.v1`, compiled from `proto/metnos/**` by `build.rs` with protox.
//!
//! Each module re-exports the prost messages and the tonic client and server of one
//! package. [`FILE_DESCRIPTOR_SET`] is the encoded descriptor set of every package, which
//! the services register for server reflection.

#![allow(missing_debug_implementations)] // generated code
#![allow(clippy::all)]

/// Encoded `FileDescriptorSet` of every Metnos proto, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/metnos_descriptor.bin"));

/// `metnos.common.v1`: principals, autonomy levels, languages.
pub mod common {
    pub mod v1 {
        tonic::include_proto!("metnos.common.v1");
    }
}

/// `metnos.policy.v1`: the legality filter.
pub mod policy {
    pub mod v1 {
        tonic::include_proto!("metnos.policy.v1");
    }
}

/// `metnos.vaglio.v1`: the guard, the judge and the telos engine.
pub mod vaglio {
    pub mod v1 {
        tonic::include_proto!("metnos.vaglio.v1");
    }
}

/// `metnos.approval.v1`: pending approvals and cards.
pub mod approval {
    pub mod v1 {
        tonic::include_proto!("metnos.approval.v1");
    }
}

/// `metnos.planner.v1`: turns.
pub mod planner {
    pub mod v1 {
        tonic::include_proto!("metnos.planner.v1");
    }
}

/// `metnos.gateway.v1`: channels and pairings.
pub mod gateway {
    pub mod v1 {
        tonic::include_proto!("metnos.gateway.v1");
    }
}

/// Fully qualified gRPC service names, as health and reflection report them.
pub mod service_names {
    pub const POLICY: &str = "metnos.policy.v1.PolicyService";
    pub const VAGLIO: &str = "metnos.vaglio.v1.VaglioService";
    pub const APPROVAL: &str = "metnos.approval.v1.ApprovalService";
    pub const PLANNER: &str = "metnos.planner.v1.PlannerService";
    pub const GATEWAY: &str = "metnos.gateway.v1.GatewayService";
}
