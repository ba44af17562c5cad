//! Time zones for the built-in programs, from the IANA database bundled in them.
//!
//! A built-in runs as a new process at every call. jiff's default database is the
//! system's `/usr/share/zoneinfo`, which it indexes by walking its ~1 800 files before
//! the first lookup: about a millisecond of CPU at every `time_now` (issue 45). The
//! bundled copy needs no walk. A name only the system's copy knows (tzdata newer than
//! this program) is still found there.

use std::path::Path;
use std::sync::OnceLock;

use jiff::tz::{TimeZone, TimeZoneDatabase};

/// The machine's zone setting, as libc reads it.
const LOCALTIME: &str = "/etc/localtime";

fn bundled() -> &'static TimeZoneDatabase {
    static DB: OnceLock<TimeZoneDatabase> = OnceLock::new();
    DB.get_or_init(TimeZoneDatabase::bundled)
}

/// The zone an IANA name stands for; `None` for a name neither database knows.
pub fn named(name: &str) -> Option<TimeZone> {
    bundled().get(name).or_else(|_| TimeZone::get(name)).ok()
}

/// The machine's zone: the one `/etc/localtime` links to; UTC when there is none.
pub fn system() -> TimeZone {
    // Not a link into a zoneinfo folder (a copied file, or no setting at all): jiff
    // reads the file itself, without a name and without indexing a database.
    linked(Path::new(LOCALTIME)).unwrap_or_else(|| TimeZone::try_system().unwrap_or(TimeZone::UTC))
}

/// The zone whose name `localtime` links to, when the database knows it.
fn linked(localtime: &Path) -> Option<TimeZone> {
    linked_name(localtime).as_deref().and_then(named)
}

/// The IANA name in the link's target (`…/zoneinfo/Europe/Rome` → `Europe/Rome`).
fn linked_name(localtime: &Path) -> Option<String> {
    let target = std::fs::read_link(localtime).ok()?;
    let target = target.to_str()?;
    let (_, name) = target.rsplit_once("zoneinfo/")?;
    Some(name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_from_the_bundled_database_and_unknown_ones_do_not() {
        let rome = named("Europe/Rome").unwrap();
        assert_eq!(rome.iana_name(), Some("Europe/Rome"));
        // Summer and winter offsets: the zone's rules, not a fixed offset.
        let summer: jiff::Timestamp = "2026-07-01T12:00:00Z".parse().unwrap();
        let winter: jiff::Timestamp = "2026-01-01T12:00:00Z".parse().unwrap();
        assert_eq!(rome.to_offset(summer).seconds(), 7200);
        assert_eq!(rome.to_offset(winter).seconds(), 3600);
        assert!(named("Europe/Atlantis").is_none());
        assert!(named("../../etc/passwd").is_none());
        assert!(named("").is_none());
    }

    #[test]
    fn the_machine_s_zone_is_the_one_its_localtime_links_to() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("localtime");
        std::os::unix::fs::symlink("/usr/share/zoneinfo/America/New_York", &link).unwrap();
        // The target need not exist here: the name is what the bundled database reads.
        let zone = |link: &Path| linked(link).and_then(|z| z.iana_name().map(str::to_owned));
        assert_eq!(zone(&link).as_deref(), Some("America/New_York"));

        let elsewhere = dir.path().join("elsewhere");
        std::os::unix::fs::symlink("../zoneinfo/Asia/Tokyo", &elsewhere).unwrap();
        assert_eq!(zone(&elsewhere).as_deref(), Some("Asia/Tokyo"));

        // A link to something that is no zone, and no link at all: no linked zone (the
        // machine's is then read from the file, or UTC).
        let odd = dir.path().join("odd");
        std::os::unix::fs::symlink("/usr/share/zoneinfo/Not/AZone", &odd).unwrap();
        assert!(linked(&odd).is_none());
        assert!(linked(&dir.path().join("missing")).is_none());
    }
}
