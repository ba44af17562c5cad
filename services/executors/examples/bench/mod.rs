//! What the executors' load drivers share: the built-ins installed and signed in a fresh
//! catalog, and a latency line.

use std::collections::BTreeMap;
use std::path::Path;

use metnos_executors::install::{install_builtins, sign_dir};
use metnos_executors::signing::{self, Trust};

/// Installs the built-ins of `program` in `catalog_dir` and signs them as `bench` with a
/// new key; the key (to sign again) and the trust that accepts it.
pub fn signed_builtins(catalog_dir: &Path, program: &Path) -> (ed25519_dalek::SigningKey, Trust) {
    install_builtins(catalog_dir, program).unwrap();
    let key = signing::generate().unwrap();
    sign_dir(catalog_dir, &key, "bench", false).unwrap();
    let keys = BTreeMap::from([(
        "bench".to_owned(),
        signing::public_key_text(&key.verifying_key()),
    )]);
    (key, Trust::from_config(&keys).unwrap())
}

/// One line: runs, p50, p90, p99 and max in milliseconds.
pub fn report(name: &str, h: &hdrhistogram::Histogram<u64>) {
    println!(
        "{name}: {} runs, p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        h.len(),
        h.value_at_quantile(0.5) as f64 / 1e3,
        h.value_at_quantile(0.9) as f64 / 1e3,
        h.value_at_quantile(0.99) as f64 / 1e3,
        h.max() as f64 / 1e3,
    );
}
