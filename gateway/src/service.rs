//! Who this service is: its name, and its channel's name in principals and message
//! references. A leaf every module may name (the crate root re-exports both).

use metnos_kit::ServiceName;

/// This service.
pub const SERVICE: ServiceName = ServiceName::Gateway;

/// The channel's name in principals and message references.
pub const CHANNEL: &str = "telegram";
