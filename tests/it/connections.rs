//! A node's connections: one whose call finished is reused without going
//! back through the pool (whose release pings it), one whose call was cut
//! off is never handed to the next caller, and closing the topology hands
//! the kept ones back so the pool closes.

use std::time::Duration;

use schemaless::mysql::topology::Node;
use schemaless::mysql::Topology;

use crate::harness::Instance;

async fn connection_id(node: &Node, conn: &mut schemaless::mysql::conn::NodeConnection) -> u64 {
    node.run(conn, |c| {
        Box::pin(sqlx::query_scalar::<_, u64>("SELECT CONNECTION_ID()").fetch_one(c))
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn a_connection_whose_call_finished_is_kept_and_reused_as_it_is() {
    let t = Instance::new(2).await;
    let topology = Topology::from_config(&t.config).unwrap();
    let node = topology.cluster(0).unwrap().master();
    let mut conn = node.acquire().await.unwrap();
    let first = connection_id(&node, &mut conn).await;
    drop(conn);
    // Kept by the node, not returned to the pool (which would ping it on
    // a task of its own and then count it idle).
    assert_eq!(node.spare_connections(), 1);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(node.pool.num_idle(), 0, "the pool did not get it back");
    let mut conn = node.acquire().await.unwrap();
    assert_eq!(node.spare_connections(), 0);
    assert_eq!(
        connection_id(&node, &mut conn).await,
        first,
        "the same connection"
    );
    drop(conn);
    // Closing hands it back, and the pool closes without waiting for it.
    tokio::time::timeout(Duration::from_secs(10), topology.close())
        .await
        .expect("the pool closes with a kept connection handed back");
    assert_eq!(node.spare_connections(), 0);
}

#[tokio::test]
async fn a_connection_whose_call_was_cut_off_is_not_handed_to_the_next_caller() {
    let t = Instance::new(2).await;
    let topology = Topology::from_config(&t.config).unwrap();
    let node = topology.cluster(0).unwrap().master();
    let mut conn = node.acquire().await.unwrap();
    let cut = connection_id(&node, &mut conn).await;
    // The caller gives up while the server is still answering.
    let gave_up = tokio::time::timeout(
        Duration::from_millis(200),
        node.run(&mut conn, |c| {
            Box::pin(sqlx::query_scalar::<_, i64>("SELECT SLEEP(2)").fetch_one(c))
        }),
    )
    .await;
    assert!(gave_up.is_err(), "the call was cut off");
    drop(conn);
    assert_eq!(
        node.spare_connections(),
        0,
        "an unsettled connection is not kept"
    );
    let mut next = node.acquire().await.unwrap();
    assert_ne!(connection_id(&node, &mut next).await, cut);
    let answer: i64 = node
        .run(&mut next, |c| {
            Box::pin(sqlx::query_scalar("SELECT 42").fetch_one(c))
        })
        .await
        .unwrap();
    assert_eq!(answer, 42, "the next caller reads its own answer");
    drop(next);
    assert_eq!(node.spare_connections(), 1, "a settled one is kept");
    // A borrow outside `run` may leave a call half done too: the kept
    // connection, borrowed so, is not kept again.
    let mut borrowed = node.acquire().await.unwrap();
    let _ = &mut **borrowed;
    drop(borrowed);
    assert_eq!(node.spare_connections(), 0, "a borrowed one is not kept");
    topology.close().await;
}

#[tokio::test]
async fn a_kept_connection_that_rested_too_long_goes_back_through_the_pool() {
    let t = Instance::new(2).await;
    let topology = Topology::from_config(&t.config).unwrap();
    let node = topology.cluster(0).unwrap().master();
    let mut conn = node.acquire().await.unwrap();
    connection_id(&node, &mut conn).await;
    drop(conn);
    assert_eq!(node.spare_connections(), 1);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    // Not trusted without a ping: handed to the pool, and the caller gets
    // one from the pool instead.
    let mut conn = node.acquire().await.unwrap();
    assert_eq!(node.spare_connections(), 0);
    connection_id(&node, &mut conn).await;
    drop(conn);
    assert_eq!(node.spare_connections(), 1);
    // Every connection is accounted for: resting on the node's stack or
    // idle in the pool once its ping is back, none leaked.
    let accounted = tokio::time::timeout(Duration::from_secs(5), async {
        while node.pool.size() as usize != node.pool.num_idle() + node.spare_connections() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(accounted.is_ok(), "a connection went missing");
    topology.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_waiting_in_the_pool_are_served_while_others_finish() {
    // Two connections, eight callers: most of them wait in the pool at any
    // moment, and must get the connections the others finish with rather
    // than watch them rest on the node's stack until their acquire times
    // out.
    let t = Instance::with_limits(
        2,
        "[storage]\nmax_connections_per_node = 2\nconnect_timeout_ms = 1000\n",
    )
    .await;
    let topology = std::sync::Arc::new(Topology::from_config(&t.config).unwrap());
    let until = std::time::Instant::now() + Duration::from_secs(3);
    let callers: Vec<_> = (0..8)
        .map(|_| {
            let topology = topology.clone();
            tokio::spawn(async move {
                let node = topology.cluster(0).unwrap().master();
                let mut calls = 0u32;
                while std::time::Instant::now() < until {
                    let mut conn = node.acquire().await?;
                    node.run(&mut conn, |c| {
                        Box::pin(sqlx::query_scalar::<_, i64>("SELECT 1").fetch_one(c))
                    })
                    .await?;
                    calls += 1;
                }
                Ok::<u32, schemaless::Error>(calls)
            })
        })
        .collect();
    for caller in callers {
        let calls = caller
            .await
            .unwrap()
            .expect("no caller times out in the pool");
        assert!(calls > 0);
    }
    let node = topology.cluster(0).unwrap().master();
    assert!(node.pool.size() <= 2);
    topology.close().await;
}

#[tokio::test]
async fn a_connection_dropped_inside_a_transaction_is_closed_and_its_rows_rolled_back() {
    let t = Instance::new(2).await;
    let topology = Topology::from_config(&t.config).unwrap();
    let node = topology.cluster(0).unwrap().master();
    let table = format!("`{}`.`entity`", topology.database(0));
    let mut conn = node.acquire().await.unwrap();
    let open = connection_id(&node, &mut conn).await;
    conn.begin_transaction();
    let sql = format!(
        "START TRANSACTION; INSERT INTO {table} (row_key, column_name, ref_key, body, created_at) \
         VALUES (X'00000000000000000000000000000001', 'LEFT', 1, X'00', 0)"
    );
    node.run(&mut conn, |c| {
        Box::pin(async move {
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(c).await?;
            Ok(())
        })
    })
    .await
    .unwrap();
    // The caller is cancelled here, before its COMMIT.
    drop(conn);
    assert_eq!(
        node.spare_connections(),
        0,
        "not kept with a transaction open"
    );
    let mut next = node.acquire().await.unwrap();
    assert_ne!(connection_id(&node, &mut next).await, open);
    let left: i64 = node
        .run(&mut next, |c| {
            Box::pin(
                sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                    "SELECT COUNT(*) FROM {table} WHERE column_name = 'LEFT'"
                )))
                .fetch_one(c),
            )
        })
        .await
        .unwrap();
    assert_eq!(left, 0, "the open transaction's row was rolled back");
    drop(next);
    topology.close().await;
}
