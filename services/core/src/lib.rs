//! The shared vocabulary of the Metnos services, pure and IO-free. Services talk to each
//! other only through the contracts in `metnos-proto`; what they must agree on beyond the
//! wire lives here, once, so no service crate depends on another.
//!
//! - [`accounts`]: the person's mail accounts and calendars, as config names them;
//! - [`capability`]: the closed registry of fourteen capabilities, each with its target kind;
//! - [`level`]: the autonomy level, with its contract and config spellings;
//! - [`limits`]: what a caller may send, at every service's edge;
//! - [`principal`]: a person as one channel sees them (and [`principal::TERMINAL`]);
//! - [`names`]: the planner's own tools and the kinds of proposal, spelled once;
//! - [`language`]: the language Metnos speaks to a person in;
//! - [`call`]: the hash of an executor call that an approval binds to;
//! - [`path`]: `~` as the person's home and lexical normalisation of paths;
//! - [`forbidden`]: the paths no call may read, and those no call may write;
//! - [`table`]: the autonomy x capability table, by the seed's three rules;
//! - [`target`]: a call's target and a grant's pattern, per target kind;
//! - [`html`]: escaping for channels that render HTML;
//! - [`resolve`]: why an approval could not be resolved, in the person's language;
//! - [`territory`]: what approving concedes beyond the call, as every channel says it;
//! - [`provenance`]: where a turn's data came from, as labels every service spells alike.

pub mod accounts;
pub mod call;
pub mod capability;
pub mod forbidden;
pub mod html;
pub mod language;
pub mod level;
pub mod limits;
pub mod names;
pub mod path;
pub mod principal;
pub mod provenance;
pub mod replay;
pub mod resolve;
pub mod stop;
pub mod table;
pub mod target;
pub mod territory;

pub use capability::{Capability, TargetKind};
pub use language::Language;
pub use level::AutonomyLevel;
pub use principal::Principal;
