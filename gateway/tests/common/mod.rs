//! What the gateway's integration tests share.

use std::time::Duration;

use metnos_gateway::store::MIGRATIONS;
use metnos_kit::store::Db;
use metnos_kit::testing::TestStore;

/// The gateway's store, opened and migrated on `test`.
pub async fn open_db(test: &TestStore) -> Db {
    metnos_kit::store::open(
        &test.spec(),
        "gateway",
        &MIGRATIONS,
        Duration::from_secs(10),
    )
    .await
    .unwrap()
}
