//! A policy store with N grants, for the benchmark and the load driver.
//!
//! N grants over up to 1000 people, each person's grants on their own
//! folders `/home/u<p>/d<i>/*` spread over fs:read, fs:write and network:http hosts. The
//! checked person is `u7`: at 1M grants they hold about a thousand.

#![allow(dead_code)] // each user of the fixture uses a part

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use metnos_core::capability::Capability;
use metnos_core::principal::Principal;
use metnos_core::target::Pattern;
use metnos_policy::grant::NewGrant;
use metnos_policy::service::Policy;
use metnos_policy::store::{GrantStore, MIGRATIONS};

pub const HOME: &str = "/home/u7";

#[derive(Debug)]
pub struct Fixture {
    pub policy: Arc<Policy>,
    pub db: metnos_kit::store::Db,
    pub dir: tempfile::TempDir,
    pub principal: Principal,
    /// A target one of the principal's grants matches.
    pub hit: String,
    /// A target none of them matches.
    pub miss: String,
}

pub fn store_path(dir: &Path) -> PathBuf {
    dir.join("policy.db")
}

pub async fn fixture(n: usize) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let spec = metnos_kit::config::StoreSpec::Sqlite {
        path: store_path(dir.path()),
    };
    let db = metnos_kit::store::open(&spec, "policy", &MIGRATIONS, Duration::from_secs(10))
        .await
        .unwrap();
    // 1k grants: 10 people x 100; 100k: 1000 x 100; 1M: 1000 x 1000.
    let people = (n / 100).clamp(1, 1000);
    let per_person = n / people;
    let home = Path::new(HOME);
    let store = GrantStore::new(db.clone());
    let mut batch = Vec::with_capacity(10_000);
    for p in 0..people {
        let principal = Principal::new("telegram", &format!("u{p}")).unwrap();
        for i in 0..per_person {
            let (capability, target) = match i % 3 {
                0 => (Capability::FsRead, format!("/home/u{p}/d{i}/*")),
                1 => (Capability::FsWrite, format!("/home/u{p}/d{i}/*")),
                _ => (Capability::NetworkHttp, format!("*.h{i}.example.com")),
            };
            let pattern = Pattern::parse(capability.spec().target_kind, &target, home).unwrap();
            batch.push(NewGrant {
                principal: principal.clone(),
                capability,
                target,
                pattern,
                expires_at: None,
                granted_by: "bench".to_owned(),
                idempotency_key: None,
            });
            if batch.len() == batch.capacity() {
                store.record_many(&batch, 1).await.unwrap();
                batch.clear();
            }
        }
    }
    store.record_many(&batch, 1).await.unwrap();
    // The checked folder: fs:write grants sit at i % 3 == 1.
    let i = (per_person.saturating_sub(1) / 3) * 3 + 1;
    let i = if i < per_person { i } else { 1 };
    Fixture {
        policy: Arc::new(Policy::new(db.clone(), PathBuf::from(HOME))),
        db,
        dir,
        principal: Principal::new("telegram", "u7").unwrap(),
        hit: format!("~/d{i}/report.pdf"),
        miss: "~/elsewhere/report.pdf".to_owned(),
    }
}
