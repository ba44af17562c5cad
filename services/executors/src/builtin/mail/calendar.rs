//! `calendar_list` and `calendar_add`: a CalDAV collection (REPORT calendar-query with a
//! time range; PUT of a new event) or an ICS file (GET), over HTTPS with the public roots
//! and the calendar's own CA. No redirect is followed: a server that sends the request
//! elsewhere is named, and the credentials never go with it.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};

use metnos_core::accounts::CalendarSource;

use super::super::{BuiltinError, meta, required, string_arg};
use super::{Call, events};
use crate::observation::Observation;

/// The most bytes of a calendar's answer.
const MAX_CALENDAR_BYTES: usize = 32 * 1024 * 1024;

/// `calendar_list`: the events between `from` and `to`, recurrences expanded.
pub async fn list(args: &Value, call: &Call<'_>) -> Result<Observation, BuiltinError> {
    let (name, source) = call.source(args)?;
    let (from, to) = events::range(string_arg(args, "from")?, string_arg(args, "to")?)?;
    let client = client(source, call)?;
    let texts = if source.is_caldav() {
        let query = calendar_query(&from, &to);
        let request = client
            .request(
                reqwest::Method::from_bytes(b"REPORT").expect("a valid method"),
                &source.caldav_url,
            )
            .header("Depth", "1")
            .header("Content-Type", "application/xml; charset=utf-8")
            .body(query);
        let body = fetch(authorised(request, source)?, source, call).await?;
        calendar_data(&body)?
    } else {
        let request = client.get(&source.ics_url);
        vec![fetch(authorised(request, source)?, source, call).await?]
    };
    // Room for the metadata and the runner's own words beside the events.
    let room = (call.context.max_output_bytes / 2).max(1024);
    let listed = events::expand(&texts, &from, &to)?.within(room);
    Ok(Observation::success(
        Value::Array(listed.events),
        meta([
            ("source", json!(name)),
            ("from", json!(from.to_string())),
            ("to", json!(to.to_string())),
            ("limited", json!(listed.limited)),
            ("skipped", json!(listed.skipped)),
        ]),
    ))
}

/// `calendar_add`: a new event, PUT into the CalDAV collection under a new name (never
/// over an existing one).
pub async fn add(args: &Value, call: &Call<'_>) -> Result<Observation, BuiltinError> {
    let (name, source) = call.source(args)?;
    if !source.is_caldav() {
        return Err(
            format!("the calendar `{name}` is an ICS file: events cannot be added to it").into(),
        );
    }
    let title = required(args, "title")?;
    let location = string_arg(args, "location")?.unwrap_or_default();
    let start = events::moment(required(args, "start")?, "start")?;
    let end = events::moment(required(args, "end")?, "end")?;
    if end <= start {
        return Err("`end` must be after `start`".into());
    }
    let (uid, ics) = events::new_event(title, location, start, end)?;
    let base = source.caldav_url.trim_end_matches('/');
    let url = format!("{base}/{uid}.ics");
    let request = client(source, call)?
        .put(&url)
        .header("If-None-Match", "*")
        .header("Content-Type", "text/calendar; charset=utf-8")
        .body(ics);
    fetch(authorised(request, source)?, source, call).await?;
    Ok(Observation::success(
        json!({
            "added": true,
            "uid": uid,
            "title": title,
            "start": start.to_string(),
            "end": end.to_string(),
            "location": location,
        }),
        meta([("source", json!(name))]),
    ))
}

/// The HTTP client of a calendar: its roots, no redirect, no proxy, the call's time.
fn client(source: &CalendarSource, call: &Call<'_>) -> Result<reqwest::Client, BuiltinError> {
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(call.left().max(Duration::from_secs(1)))
        .user_agent(concat!("metnos-calendar/", env!("CARGO_PKG_VERSION")));
    for cert in super::extra_roots(&source.ca_file)? {
        let cert = reqwest::Certificate::from_der(&cert)
            .map_err(|e| format!("the CA file {}: {e}", source.ca_file.display()))?;
        builder = builder.add_root_certificate(cert);
    }
    Ok(builder
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?)
}

fn authorised(
    request: reqwest::RequestBuilder,
    source: &CalendarSource,
) -> Result<reqwest::RequestBuilder, BuiltinError> {
    if source.user.is_empty() {
        return Ok(request);
    }
    let password = super::password(&source.password_file)?;
    Ok(request.basic_auth(&source.user, Some(password)))
}

/// Sends `request` and reads its answer, bounded; a redirect or an error status is an
/// error naming it.
async fn fetch(
    request: reqwest::RequestBuilder,
    source: &CalendarSource,
    call: &Call<'_>,
) -> Result<String, BuiltinError> {
    let shown = shown_url(source.url());
    let response = call
        .within(|| format!("reaching the calendar at {shown}"), async {
            request.send().await.map_err(reqwest::Error::without_url)
        })
        .await?;
    let status = response.status();
    if status.is_redirection() {
        let to = response
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(shown_url)
            .unwrap_or_default();
        return Err(format!(
            "the calendar at {shown} answered {status}, sending to {to}: not followed (no credentials go elsewhere); put the right address in the config"
        )
        .into());
    }
    if !status.is_success() {
        let hint = match status.as_u16() {
            401 | 403 => ": check the user and the password file",
            404 => ": no calendar at this address",
            412 => ": an event of that name exists already",
            _ => "",
        };
        return Err(format!("the calendar at {shown} answered {status}{hint}").into());
    }
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    let read = async {
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(reqwest::Error::without_url)?;
            if body.len() + chunk.len() > MAX_CALENDAR_BYTES {
                return Ok::<bool, reqwest::Error>(false);
            }
            body.extend_from_slice(&chunk);
        }
        Ok(true)
    };
    let whole = call
        .within(|| format!("reading the calendar at {shown}"), read)
        .await?;
    if !whole {
        return Err(format!("the calendar at {shown} is over {MAX_CALENDAR_BYTES} bytes").into());
    }
    String::from_utf8(body).map_err(|_| format!("the calendar at {shown} is not UTF-8 text").into())
}

/// A URL as shown in errors: its scheme, host and port only (a published calendar's path
/// or query is often its secret).
fn shown_url(text: &str) -> String {
    match url::Url::parse(text) {
        Ok(url) => {
            let host = url.host_str().unwrap_or_default();
            let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
            format!("{}://{host}{port}", url.scheme())
        }
        Err(_) => "(not a URL)".to_owned(),
    }
}

/// The REPORT body: every VEVENT overlapping the range, with its calendar data.
fn calendar_query(from: &jiff::Timestamp, to: &jiff::Timestamp) -> String {
    let stamp = |t: &jiff::Timestamp| t.strftime("%Y%m%dT%H%M%SZ").to_string();
    format!(
        r#"<?xml version="1.0" encoding="utf-8"?>
<C:calendar-query xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:caldav">
  <D:prop><C:calendar-data/></D:prop>
  <C:filter><C:comp-filter name="VCALENDAR"><C:comp-filter name="VEVENT">
    <C:time-range start="{}" end="{}"/>
  </C:comp-filter></C:comp-filter></C:filter>
</C:calendar-query>"#,
        stamp(from),
        stamp(to)
    )
}

/// The text of every `calendar-data` element of a multistatus answer.
fn calendar_data(xml: &str) -> Result<Vec<String>, BuiltinError> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut texts = Vec::new();
    let mut inside: Option<String> = None;
    loop {
        match reader.read_event() {
            Ok(Event::Start(e)) if e.local_name().as_ref() == b"calendar-data" => {
                inside = Some(String::new());
            }
            Ok(Event::End(e)) if e.local_name().as_ref() == b"calendar-data" => {
                texts.extend(inside.take());
            }
            Ok(Event::Text(t)) => {
                if let Some(text) = inside.as_mut() {
                    let piece = t
                        .decode()
                        .map_err(|e| format!("the calendar's answer is not readable XML: {e}"))?;
                    let piece = quick_xml::escape::unescape(&piece)
                        .map_err(|e| format!("the calendar's answer is not readable XML: {e}"))?;
                    text.push_str(&piece);
                }
            }
            Ok(Event::GeneralRef(r)) => {
                if let Some(text) = inside.as_mut() {
                    let name = r.decode().unwrap_or_default();
                    let entity = format!("&{name};");
                    let piece = quick_xml::escape::unescape(&entity).unwrap_or_default();
                    text.push_str(&piece);
                }
            }
            Ok(Event::CData(t)) => {
                if let Some(text) = inside.as_mut() {
                    text.push_str(&String::from_utf8_lossy(&t));
                }
            }
            Ok(Event::Eof) => break,
            Ok(_) => {}
            Err(e) => {
                return Err(format!("the calendar's answer is not readable XML: {e}").into());
            }
        }
    }
    Ok(texts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calendar_data_is_read_from_a_multistatus_answer() {
        let xml = r#"<?xml version="1.0"?><multistatus xmlns="DAV:" xmlns:C="urn:ietf:params:xml:ns:caldav">
<response><href>/a.ics</href><propstat><prop><C:calendar-data>BEGIN:VCALENDAR&#13;
SUMMARY:Tom &amp; Jerry
END:VCALENDAR</C:calendar-data></prop></propstat></response>
<response><propstat><prop><C:calendar-data><![CDATA[BEGIN:VCALENDAR
END:VCALENDAR]]></C:calendar-data></prop></propstat></response></multistatus>"#;
        let texts = calendar_data(xml).unwrap();
        assert_eq!(texts.len(), 2);
        assert!(texts[0].contains("SUMMARY:Tom & Jerry"), "{texts:?}");
        assert!(texts[0].contains("VCALENDAR\r\n"), "{texts:?}");
        assert!(texts[1].starts_with("BEGIN:VCALENDAR"));
        assert!(calendar_data("<a><b></a>").is_err());
    }

    #[test]
    fn a_url_is_shown_without_its_credentials_path_or_query() {
        assert_eq!(
            shown_url("https://me:pw@dav.example:8443/private-3f9a/basic.ics?token=x"),
            "https://dav.example:8443"
        );
    }
}
