//! Schema management on the servers.

use schemaless::mysql::{schema, Topology};
use schemaless::{CellStore, ReadFrom};
use serde_json::json;

use crate::harness::{cell, cluster};

#[tokio::test]
async fn dropping_an_instance_leaves_one_whose_name_extends_it_alone() {
    let short = format!("pre{}", std::process::id() % 100_000);
    let long = format!("{short}_big");
    let topology = |name: &str| {
        let config = config::Config::parse(&cluster().config_toml(name, 4), "t.toml").unwrap();
        (Topology::from_config(&config).unwrap(), config)
    };
    let (short_topology, _) = topology(&short);
    let (long_topology, long_config) = topology(&long);
    schema::apply(&short_topology).await.unwrap();
    schema::apply(&long_topology).await.unwrap();
    let store = schemaless::MySqlStore::connect(&long_config).unwrap();
    let kept = cell(1, "BASE", 1, json!({"kept": true}));
    store.put_cell(kept.clone()).await.unwrap();

    schema::drop_instance(&short_topology).await.unwrap();
    assert_eq!(
        schema::verify(&short_topology).await.unwrap(),
        vec![0, 1, 2, 3]
    );
    assert!(schema::verify(&long_topology).await.unwrap().is_empty());
    let got = store
        .get_cell(&kept.key, ReadFrom::Master)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.cell, kept);
}

#[tokio::test]
async fn a_config_built_in_code_with_a_range_past_the_shards_is_an_error() {
    let text = cluster().config_toml("codebuilt", 4);
    let mut config = config::Config::parse(&text, "t.toml").unwrap();
    config.clusters[1].shards.as_mut().unwrap().last = 9;
    let err = Topology::from_config(&config).unwrap_err();
    assert!(err.to_string().contains("past the last shard 3"), "{err}");
}
