//! The autonomy x capability table (seed policy.md ch. 3): the three rules live in
//! `metnos_core::table`, shared with the planner; the seed's table is pinned down here.

pub use metnos_core::table::{Outcome, table_outcome};

#[cfg(test)]
mod tests {
    use super::*;
    use Outcome::{Allowed as A, ApprovalRequired as R, Denied as D};
    use metnos_core::capability::Capability;
    use metnos_core::level::AutonomyLevel;

    /// The seed's table (ch. 3), cell by cell: capability, ReadOnly, Supervised, Full.
    const SEED_TABLE: [(&str, Outcome, Outcome, Outcome); 13] = [
        ("fs:read", R, R, A),
        ("fs:write", D, R, A),
        ("code:exec", D, R, R),
        ("network:http", D, R, A),
        ("llm:local", A, A, A),
        ("llm:online", D, R, A),
        ("mail:read", R, R, A),
        ("mail:send", D, R, R),
        ("channel:in", A, A, A),
        ("channel:out", D, R, A),
        ("time:read", A, A, A),
        ("parse:local", A, A, A),
        ("calendar:read", R, R, A),
    ];

    #[test]
    fn the_generated_table_equals_the_seed_table_cell_by_cell() {
        for (name, read_only, supervised, full) in SEED_TABLE {
            let cap = Capability::parse(name).unwrap();
            assert_eq!(
                table_outcome(AutonomyLevel::ReadOnly, cap),
                read_only,
                "ReadOnly x {name}"
            );
            assert_eq!(
                table_outcome(AutonomyLevel::Supervised, cap),
                supervised,
                "Supervised x {name}"
            );
            assert_eq!(
                table_outcome(AutonomyLevel::Full, cap),
                full,
                "Full x {name}"
            );
        }
        assert_eq!(SEED_TABLE.len(), Capability::all().count());
    }

    /// Seed case 2 [security]: is_allowed_readonly_blocca_write_e_exec.
    #[test]
    fn read_only_denies_write_exec_and_send() {
        for cap in [
            Capability::FsWrite,
            Capability::CodeExec,
            Capability::MailSend,
        ] {
            assert_eq!(
                table_outcome(AutonomyLevel::ReadOnly, cap),
                Outcome::Denied,
                "{cap}"
            );
        }
    }

    /// Seed case 3: is_allowed_supervised_richiede_approval_per_critical.
    #[test]
    fn supervised_asks_for_critical_actions_and_allows_local_llm() {
        assert_eq!(
            table_outcome(AutonomyLevel::Supervised, Capability::FsWrite),
            Outcome::ApprovalRequired
        );
        assert_eq!(
            table_outcome(AutonomyLevel::Supervised, Capability::LlmLocal),
            Outcome::Allowed
        );
        assert_eq!(
            table_outcome(AutonomyLevel::Supervised, Capability::MailSend),
            Outcome::ApprovalRequired
        );
        assert_eq!(
            table_outcome(AutonomyLevel::Supervised, Capability::CodeExec),
            Outcome::ApprovalRequired
        );
    }

    /// Seed case 4 [security]: is_allowed_full_mantiene_always_per_critical_irreversibili.
    #[test]
    fn full_still_asks_for_mail_send_and_code_exec() {
        assert_eq!(
            table_outcome(AutonomyLevel::Full, Capability::MailSend),
            Outcome::ApprovalRequired
        );
        assert_eq!(
            table_outcome(AutonomyLevel::Full, Capability::CodeExec),
            Outcome::ApprovalRequired
        );
        assert_eq!(
            table_outcome(AutonomyLevel::Full, Capability::FsWrite),
            Outcome::Allowed
        );
    }

    #[test]
    fn levels_parse_in_the_spellings_people_use() {
        for text in [
            "ReadOnly",
            "read-only",
            "read_only",
            "readonly",
            "READONLY",
            "Read Only",
        ] {
            assert_eq!(
                AutonomyLevel::parse(text),
                Ok(AutonomyLevel::ReadOnly),
                "{text}"
            );
        }
        assert_eq!(
            AutonomyLevel::parse("supervised"),
            Ok(AutonomyLevel::Supervised)
        );
        assert_eq!(AutonomyLevel::parse("Full"), Ok(AutonomyLevel::Full));
        let err = AutonomyLevel::parse("admin").unwrap_err().to_string();
        assert!(
            err.contains("`admin`") && err.contains("ReadOnly, Supervised and Full"),
            "{err}"
        );
    }
}
