//! Names every service spells alike: the planner's own tools (which reach approval cards
//! and the catalog's reserved names) and the kinds of proposal Metnos makes on its own
//! (which the telos engine, the digest and the cards tell apart).

/// The standing-order tools the planner offers the model (issue 22).
pub mod tools {
    pub const SCHEDULE_CREATE: &str = "schedule_create";
    pub const SCHEDULE_LIST: &str = "schedule_list";
    pub const SCHEDULE_PAUSE: &str = "schedule_pause";
    pub const SCHEDULE_RESUME: &str = "schedule_resume";
    pub const SCHEDULE_DELETE: &str = "schedule_delete";
    /// Every one of them: no executor of the catalog may take these names.
    pub const SCHEDULE: [&str; 5] = [
        SCHEDULE_CREATE,
        SCHEDULE_LIST,
        SCHEDULE_PAUSE,
        SCHEDULE_RESUME,
        SCHEDULE_DELETE,
    ];
    /// Large observations read back a page at a time.
    pub const SCRATCHPAD_READ: &str = "scratchpad_read";
}

/// The kinds of what Metnos proposes on its own.
pub mod proposals {
    /// A grant offered after the same approval was given again and again.
    pub const GRANT_OFFER: &str = "grant_offer";
    /// Unused grants offered for revocation.
    pub const GRANT_REVOKE: &str = "grant_revoke";
    /// A standing order's result.
    pub const STANDING_ORDER: &str = "standing_order";
}
