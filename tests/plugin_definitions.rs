//! One definition per plugin version: a registration offering a plugin version that a
//! live executor offers with another definition is refused (FAILED_PRECONDITION naming
//! the plugin, its version and the live executor), and nothing is replaced: the
//! immutable-key guard still holds with the live executor's definition. Without this,
//! any process that may register (on a secured cluster: one holding a valid certificate
//! for its own executor id) could register a one-key definition of `postgres-audit` and
//! the control plane would then validate against it.
//!
//! A real control plane and a real executor; the other registrations are sent by the
//! test as an executor would send them. Build first:
//! `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use serde_json::json;
use wharf::pb::v1 as pb;
use wharf::pb::v1::executor_registry_client::ExecutorRegistryClient;
use wharf_harness::cluster::TestCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_differing_definition_of_a_plugin_version_is_refused_and_replaces_nothing() {
    let c = TestCluster::start(1).await;
    let mut admin = c.admin();
    let plugins = admin
        .list_connector_plugins(pb::ListConnectorPluginsRequest::default())
        .await
        .expect("list plugins")
        .into_inner()
        .plugins;
    let real = plugins
        .iter()
        .filter_map(|p| p.plugin.clone())
        .find(|p| p.name == "postgres-audit")
        .expect("exec-1 offers postgres-audit");
    assert!(
        real.config_defs
            .iter()
            .any(|k| k.name == "audit.table" && k.immutable),
        "audit.table is immutable in the real definition"
    );

    let mut registry = ExecutorRegistryClient::connect(c.cp_url())
        .await
        .expect("connect to the registry");
    let register = |plugin: pb::PluginInfo, id: &str| pb::RegisterExecutorRequest {
        executor_id: id.into(),
        advertised_address: "http://127.0.0.9:1".into(),
        plugins: vec![plugin],
        version: "test".into(),
        ..Default::default()
    };
    // A one-key definition of the same version: refused, naming what differs.
    let one_key = pb::PluginInfo {
        config_defs: real
            .config_defs
            .iter()
            .filter(|k| k.name == "tables")
            .cloned()
            .collect(),
        ..real.clone()
    };
    let e = registry
        .register_executor(register(one_key, "exec-rogue"))
        .await
        .expect_err("a differing definition is refused");
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e}");
    assert!(
        e.message().contains("\"postgres-audit\"")
            && e.message().contains(&format!("{:?}", real.version))
            && e.message().contains("live executor exec-1")
            && e.message().contains("lacks key"),
        "{e}"
    );
    // The audit.table key made mutable: refused too.
    let mut mutable = real.clone();
    for k in &mut mutable.config_defs {
        k.immutable = false;
    }
    let e = registry
        .register_executor(register(mutable, "exec-rogue"))
        .await
        .expect_err("a key made mutable is refused");
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e}");
    assert!(e.message().contains("differs"), "{e}");
    assert!(
        c.cp_log()
            .contains("registration refused: plugin definition"),
        "the control plane logs the refusal"
    );

    // Nothing was replaced: the plugin list and the immutable-key guard are exec-1's.
    let after = admin
        .list_connector_plugins(pb::ListConnectorPluginsRequest::default())
        .await
        .expect("list plugins")
        .into_inner()
        .plugins;
    let listed = after
        .iter()
        .find(|p| {
            p.plugin
                .as_ref()
                .is_some_and(|i| i.name == "postgres-audit")
        })
        .expect("postgres-audit listed");
    assert_eq!(listed.plugin.as_ref(), Some(&real));
    assert_eq!(listed.executor_ids, ["exec-1"]);
    let config = |table: &str| {
        json!({
            "connector.class": "postgres-audit",
            "tasks.max": "1",
            "connection.host": "127.0.0.1",
            "connection.user": "postgres",
            "connection.database": "test",
            "tables": "public.t1",
            "audit.table": table,
            "topic": "guarded",
        })
    };
    let r = c.call(
        "CreateConnector",
        json!({ "name": "guarded", "config": config("public.audit_a"), "initial_state": "TARGET_STATE_STOPPED" }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let r = c.call(
        "PutConnectorConfig",
        json!({ "name": "guarded", "config": config("public.audit_b") }),
    );
    assert_eq!(r.code, 9, "the immutable key still holds: {}", r.err);
    assert!(r.err.contains("audit.table"), "{}", r.err);

    // The same definition is one definition: another executor offering it registers.
    registry
        .register_executor(register(real.clone(), "exec-twin"))
        .await
        .expect("the same definition is admitted");
}
