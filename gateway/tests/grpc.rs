//! The gateway's gRPC edge on a real server (127.0.0.1:0) and the generated client, on
//! SQLite and PostgreSQL: when the store fails, the client hears UNAVAILABLE or INTERNAL in
//! general terms, never the database's own words.

mod common;

use metnos_gateway::grpc::GatewayApi;
use metnos_gateway::store::Store;
use metnos_kit::on_db;
use metnos_kit::store::Db;
use metnos_kit::testing::TestStore;
use metnos_proto::common::v1::Principal;
use metnos_proto::gateway::v1::gateway_service_client::GatewayServiceClient;
use metnos_proto::gateway::v1::gateway_service_server::GatewayServiceServer;
use metnos_proto::gateway::v1::{GetPairingRequest, ListPairingsRequest};
use tonic::transport::Channel;

/// The service over `db`, without a Telegram channel, served until the test ends.
async fn serve(db: Db) -> GatewayServiceClient<Channel> {
    let api = GatewayApi {
        store: Store::new(db),
        telegram: None,
        clients: None,
        web: None,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(GatewayServiceServer::new(api))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    GatewayServiceClient::connect(url).await.unwrap()
}

async fn a_store_failure_reaches_the_client_without_the_database_s_words(test: TestStore) {
    let db = common::open_db(&test).await;
    let mut client = serve(db.clone()).await;
    let listed = client.list_pairings(ListPairingsRequest {}).await.unwrap();
    assert!(listed.into_inner().pairings.is_empty());

    // A broken schema: the database names the missing table, the client must not hear it.
    on_db!(&db, pool => {
        sqlx::query("DROP TABLE pairings").execute(pool).await.unwrap();
    });
    let cause = Store::new(db.clone())
        .pairings()
        .await
        .unwrap_err()
        .to_string();
    assert!(cause.contains("pairings"), "{cause}");
    let status = client
        .list_pairings(ListPairingsRequest {})
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");
    assert!(!status.message().contains("pairings"), "{status:?}");
    assert!(status.message().contains("gateway store"), "{status:?}");

    // The store gone: unavailable, and again not in the driver's words.
    db.close().await;
    let status = client
        .get_pairing(GetPairingRequest {
            principal: Some(Principal {
                channel: "telegram".to_owned(),
                sender_id: "4242".to_owned(),
            }),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("gateway store is unreachable"),
        "{status:?}"
    );
    assert!(!status.message().contains("pool"), "{status:?}");
}

metnos_kit::store_suite!(a_store_failure_reaches_the_client_without_the_database_s_words);
