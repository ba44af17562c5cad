//! `time_now`: the current time in a time zone (IANA database, bundled).

use serde_json::{Value, json};

use super::{BuiltinError, meta, string_arg, zone};
use crate::observation::{ExecContext, Observation};

pub fn run(args: &Value, _context: &ExecContext) -> Observation {
    match now(args) {
        Ok(observation) => observation,
        Err(error) => Observation::failure(error.to_string()),
    }
}

fn now(args: &Value) -> Result<Observation, BuiltinError> {
    let zone = match string_arg(args, "timezone")? {
        Some(name) if !name.trim().is_empty() => zone::named(name.trim()).ok_or_else(|| {
            format!(
                "unknown time zone `{}` (IANA names such as Europe/Rome, America/New_York, UTC)",
                name.chars().take(64).collect::<String>()
            )
        })?,
        _ => zone::system(),
    };
    let now = jiff::Timestamp::now().to_zoned(zone);
    // A zone read from a copied `/etc/localtime` has rules but no name.
    let name = now.time_zone().iana_name().unwrap_or("local").to_owned();
    Ok(Observation::success(
        now.strftime("%Y-%m-%dT%H:%M:%S%:z").to_string(),
        meta([
            ("timezone", json!(name)),
            ("unix", json!(now.timestamp().as_second())),
            ("weekday", json!(now.strftime("%A").to_string())),
            ("offset", json!(now.offset().to_string())),
        ]),
    ))
}
