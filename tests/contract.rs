//! The v1 wire contract, read from the descriptor set the build compiled from `proto/`
//! (`wharf::pb::FILE_DESCRIPTOR_SET`): the fields that KIP-883/KIP-901 and fencing depend
//! on keep their names, numbers and types, each service offers exactly its documented RPCs,
//! and every enum starts with an `_UNSPECIFIED` zero value.
//!
//! `buf breaking` (scripts/test) guards the whole surface against the committed baseline;
//! these tests say, in Rust, which parts of it the lifecycle protocol cannot do without.

use std::collections::BTreeMap;

use prost::Message;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{
    DescriptorProto, EnumDescriptorProto, FieldDescriptorProto, FileDescriptorSet,
    ServiceDescriptorProto,
};

const PACKAGE: &str = "wharf.v1";

/// The decoded descriptor set, indexed by fully qualified name (without the leading dot).
struct Contract {
    messages: BTreeMap<String, DescriptorProto>,
    enums: BTreeMap<String, EnumDescriptorProto>,
    services: BTreeMap<String, ServiceDescriptorProto>,
}

impl Contract {
    fn load() -> Self {
        let set = FileDescriptorSet::decode(wharf::pb::FILE_DESCRIPTOR_SET)
            .expect("wharf::pb::FILE_DESCRIPTOR_SET decodes as a FileDescriptorSet");
        let mut contract = Contract {
            messages: BTreeMap::new(),
            enums: BTreeMap::new(),
            services: BTreeMap::new(),
        };
        for file in &set.file {
            let package = file.package();
            for message in &file.message_type {
                contract.add_message(package, message);
            }
            for e in &file.enum_type {
                contract
                    .enums
                    .insert(format!("{package}.{}", e.name()), e.clone());
            }
            for service in &file.service {
                contract
                    .services
                    .insert(format!("{package}.{}", service.name()), service.clone());
            }
        }
        contract
    }

    fn add_message(&mut self, scope: &str, message: &DescriptorProto) {
        let full = format!("{scope}.{}", message.name());
        for nested in &message.nested_type {
            self.add_message(&full, nested);
        }
        for e in &message.enum_type {
            self.enums.insert(format!("{full}.{}", e.name()), e.clone());
        }
        self.messages.insert(full, message.clone());
    }

    fn message(&self, name: &str) -> &DescriptorProto {
        self.messages
            .get(&format!("{PACKAGE}.{name}"))
            .unwrap_or_else(|| panic!("message {PACKAGE}.{name} is missing from the contract"))
    }

    fn field(&self, message: &str, field: &str) -> &FieldDescriptorProto {
        self.message(message)
            .field
            .iter()
            .find(|f| f.name() == field)
            .unwrap_or_else(|| panic!("{PACKAGE}.{message} has no field `{field}`"))
    }

    /// Asserts name, number, scalar type and singular label of one field.
    fn assert_scalar(&self, message: &str, field: &str, number: i32, ty: Type) {
        let f = self.field(message, field);
        assert_eq!(
            f.number(),
            number,
            "{PACKAGE}.{message}.{field}: field number"
        );
        assert_eq!(f.r#type(), ty, "{PACKAGE}.{message}.{field}: type");
        assert_eq!(
            f.label(),
            Label::Optional,
            "{PACKAGE}.{message}.{field}: must not be repeated"
        );
        assert!(
            !f.proto3_optional(),
            "{PACKAGE}.{message}.{field}: must be a plain proto3 scalar"
        );
    }

    /// Asserts name, number and message type of one singular message field.
    fn assert_message_field(&self, message: &str, field: &str, number: i32, type_name: &str) {
        let f = self.field(message, field);
        assert_eq!(
            f.number(),
            number,
            "{PACKAGE}.{message}.{field}: field number"
        );
        assert_eq!(
            f.r#type(),
            Type::Message,
            "{PACKAGE}.{message}.{field}: type"
        );
        assert_eq!(
            f.type_name(),
            format!(".{PACKAGE}.{type_name}"),
            "{PACKAGE}.{message}.{field}"
        );
        assert_eq!(
            f.label(),
            Label::Optional,
            "{PACKAGE}.{message}.{field}: must not be repeated"
        );
    }
}

#[test]
fn connector_deleted_is_bool_field_2_in_both_executor_stop_requests() {
    let c = Contract::load();
    // KIP-901 (tasks) and KIP-883 (connector instance): the one flag the whole runtime exists
    // to deliver.
    c.assert_scalar("StopTaskRequest", "connector_deleted", 2, Type::Bool);
    c.assert_scalar(
        "ExecutorStopConnectorRequest",
        "connector_deleted",
        2,
        Type::Bool,
    );
}

#[test]
fn stop_task_request_names_the_task_as_field_1_and_its_timeout_as_field_4() {
    let c = Contract::load();
    c.assert_message_field("StopTaskRequest", "task", 1, "TaskId");
    c.assert_scalar("StopTaskRequest", "timeout_ms", 4, Type::Uint32);
    c.assert_scalar("ExecutorStopConnectorRequest", "connector", 1, Type::String);
    c.assert_scalar(
        "ExecutorStopConnectorRequest",
        "timeout_ms",
        4,
        Type::Uint32,
    );
    c.assert_scalar("TaskId", "connector", 1, Type::String);
    c.assert_scalar("TaskId", "task", 2, Type::Uint32);
}

#[test]
fn every_start_stop_and_offset_commit_request_carries_a_uint64_generation() {
    let c = Contract::load();
    let table = [
        ("StartConnectorRequest", 3),
        ("ExecutorStopConnectorRequest", 3),
        ("ComputeTaskConfigsRequest", 3),
        ("StartTaskRequest", 4),
        ("StopTaskRequest", 3),
        ("CommitOffsetsRequest", 4),
        ("RequestTaskReconfigurationRequest", 4),
    ];
    for (message, number) in table {
        c.assert_scalar(message, "generation", number, Type::Uint64);
    }
}

#[test]
fn starts_carry_the_executor_epoch_and_the_cleanup_only_mode() {
    let c = Contract::load();
    c.assert_scalar("StartConnectorRequest", "executor_epoch", 7, Type::Uint64);
    c.assert_scalar("StartTaskRequest", "executor_epoch", 9, Type::Uint64);
    c.assert_scalar("StartConnectorRequest", "cleanup_only", 5, Type::Bool);
    c.assert_scalar("StartTaskRequest", "cleanup_only", 6, Type::Bool);
    c.assert_message_field("StartTaskRequest", "task", 1, "TaskId");
    c.assert_scalar("CommitOffsetsRequest", "epoch", 2, Type::Uint64);
    c.assert_message_field("CommitOffsetsRequest", "task", 3, "TaskId");
}

#[test]
fn validate_config_answers_key_names_and_messages_never_values() {
    let c = Contract::load();
    c.assert_scalar("ValidateConfigRequest", "plugin", 1, Type::String);
    // Only a key's name and its messages travel back: a secret value has no field to ride in.
    c.assert_scalar("ConfigKeyErrors", "name", 1, Type::String);
    let errors = c.field("ConfigKeyErrors", "errors");
    assert_eq!(errors.number(), 2);
    assert_eq!(errors.r#type(), Type::String);
    assert_eq!(errors.label(), Label::Repeated);
    assert_eq!(
        c.message("ConfigKeyErrors").field.len(),
        2,
        "name and errors only"
    );
    let keys = c.field("ValidateConfigResponse", "keys");
    assert_eq!(keys.type_name(), format!(".{PACKAGE}.ConfigKeyErrors"));
    assert_eq!(keys.label(), Label::Repeated);
    // Besides the keys, what the plugin would provision: resources named by kind, name
    // and a locator that by the SDK's contract holds no secret (docs/resources.md).
    let declared = c.field("ValidateConfigResponse", "declared_resources");
    assert_eq!(declared.type_name(), format!(".{PACKAGE}.Resource"));
    assert_eq!(declared.label(), Label::Repeated);
    c.assert_scalar(
        "ValidateConfigResponse",
        "declared_resources_error",
        declared.number() + 1,
        Type::String,
    );
    assert_eq!(
        c.message("ValidateConfigResponse").field.len(),
        3,
        "keys, declared resources and why they could not be declared, only"
    );
}

/// One RPC of the documented surface: name, request, response, server streaming.
type Rpc = (&'static str, &'static str, &'static str, bool);

const CONNECTOR_ADMIN: &[Rpc] = &[
    (
        "CreateConnector",
        "CreateConnectorRequest",
        "CreateConnectorResponse",
        false,
    ),
    (
        "PutConnectorConfig",
        "PutConnectorConfigRequest",
        "PutConnectorConfigResponse",
        false,
    ),
    (
        "GetConnector",
        "GetConnectorRequest",
        "GetConnectorResponse",
        false,
    ),
    (
        "ListConnectors",
        "ListConnectorsRequest",
        "ListConnectorsResponse",
        false,
    ),
    (
        "GetConnectorStatus",
        "GetConnectorStatusRequest",
        "GetConnectorStatusResponse",
        false,
    ),
    (
        "ValidateConnectorConfig",
        "ValidateConnectorConfigRequest",
        "ValidateConnectorConfigResponse",
        false,
    ),
    (
        "ListConnectorPlugins",
        "ListConnectorPluginsRequest",
        "ListConnectorPluginsResponse",
        false,
    ),
    (
        "PauseConnector",
        "PauseConnectorRequest",
        "PauseConnectorResponse",
        false,
    ),
    (
        "ResumeConnector",
        "ResumeConnectorRequest",
        "ResumeConnectorResponse",
        false,
    ),
    (
        "StopConnector",
        "StopConnectorRequest",
        "StopConnectorResponse",
        false,
    ),
    (
        "RestartConnector",
        "RestartConnectorRequest",
        "RestartConnectorResponse",
        false,
    ),
    (
        "RestartTask",
        "RestartTaskRequest",
        "RestartTaskResponse",
        false,
    ),
    (
        "DeleteConnector",
        "DeleteConnectorRequest",
        "DeleteConnectorResponse",
        false,
    ),
    (
        "RetryCleanup",
        "RetryCleanupRequest",
        "RetryCleanupResponse",
        false,
    ),
    (
        "GetOffsets",
        "GetOffsetsRequest",
        "GetOffsetsResponse",
        false,
    ),
    (
        "AlterOffsets",
        "AlterOffsetsRequest",
        "AlterOffsetsResponse",
        false,
    ),
    (
        "ResetOffsets",
        "ResetOffsetsRequest",
        "ResetOffsetsResponse",
        false,
    ),
    (
        "ListExecutors",
        "ListExecutorsRequest",
        "ListExecutorsResponse",
        false,
    ),
    (
        "WatchConnector",
        "WatchConnectorRequest",
        "WatchConnectorResponse",
        true,
    ),
    (
        "ListAuditEntries",
        "ListAuditEntriesRequest",
        "ListAuditEntriesResponse",
        false,
    ),
    (
        "GetConnectorResources",
        "GetConnectorResourcesRequest",
        "GetConnectorResourcesResponse",
        false,
    ),
    (
        "ListOrphanedResources",
        "ListOrphanedResourcesRequest",
        "ListOrphanedResourcesResponse",
        false,
    ),
    (
        "AdoptOrphanedResources",
        "AdoptOrphanedResourcesRequest",
        "AdoptOrphanedResourcesResponse",
        false,
    ),
    (
        "PurgeOrphanedResources",
        "PurgeOrphanedResourcesRequest",
        "PurgeOrphanedResourcesResponse",
        false,
    ),
    (
        "GetConnectorTopics",
        "GetConnectorTopicsRequest",
        "GetConnectorTopicsResponse",
        false,
    ),
    (
        "ResetConnectorTopics",
        "ResetConnectorTopicsRequest",
        "ResetConnectorTopicsResponse",
        false,
    ),
];

const EXECUTOR: &[Rpc] = &[
    (
        "StartConnector",
        "StartConnectorRequest",
        "StartConnectorResponse",
        false,
    ),
    (
        "StopConnector",
        "ExecutorStopConnectorRequest",
        "ExecutorStopConnectorResponse",
        false,
    ),
    (
        "ComputeTaskConfigs",
        "ComputeTaskConfigsRequest",
        "ComputeTaskConfigsResponse",
        false,
    ),
    ("StartTask", "StartTaskRequest", "StartTaskResponse", false),
    ("StopTask", "StopTaskRequest", "StopTaskResponse", false),
    (
        "ListAssignments",
        "ListAssignmentsRequest",
        "ListAssignmentsResponse",
        false,
    ),
    (
        "ValidateConfig",
        "ValidateConfigRequest",
        "ValidateConfigResponse",
        false,
    ),
    (
        "GetSinkOffsets",
        "GetSinkOffsetsRequest",
        "GetSinkOffsetsResponse",
        false,
    ),
    (
        "AlterSinkOffsets",
        "AlterSinkOffsetsRequest",
        "AlterSinkOffsetsResponse",
        false,
    ),
];

const EXECUTOR_REGISTRY: &[Rpc] = &[
    (
        "RegisterExecutor",
        "RegisterExecutorRequest",
        "RegisterExecutorResponse",
        false,
    ),
    ("Heartbeat", "HeartbeatRequest", "HeartbeatResponse", false),
    (
        "ReportStatus",
        "ReportStatusRequest",
        "ReportStatusResponse",
        false,
    ),
    (
        "CommitOffsets",
        "CommitOffsetsRequest",
        "CommitOffsetsResponse",
        false,
    ),
    (
        "RequestTaskReconfiguration",
        "RequestTaskReconfigurationRequest",
        "RequestTaskReconfigurationResponse",
        false,
    ),
    (
        "RecordResources",
        "RecordResourcesRequest",
        "RecordResourcesResponse",
        false,
    ),
];

/// Asserts that `service` offers exactly `expected`, in any order.
fn assert_service(c: &Contract, service: &str, expected: &[Rpc]) {
    let full = format!("{PACKAGE}.{service}");
    let s = c
        .services
        .get(&full)
        .unwrap_or_else(|| panic!("service {full} is missing"));
    let actual: BTreeMap<String, (String, String, bool, bool)> = s
        .method
        .iter()
        .map(|m| {
            (
                m.name().to_owned(),
                (
                    m.input_type().to_owned(),
                    m.output_type().to_owned(),
                    m.client_streaming(),
                    m.server_streaming(),
                ),
            )
        })
        .collect();
    let wanted: BTreeMap<String, (String, String, bool, bool)> = expected
        .iter()
        .map(|(name, req, resp, server_streaming)| {
            (
                (*name).to_owned(),
                (
                    format!(".{PACKAGE}.{req}"),
                    format!(".{PACKAGE}.{resp}"),
                    false,
                    *server_streaming,
                ),
            )
        })
        .collect();
    assert_eq!(actual.len(), s.method.len(), "{full} declares an RPC twice");
    assert_eq!(
        actual, wanted,
        "{full}: (request, response, client streaming, server streaming) per RPC"
    );
}

#[test]
fn connector_admin_offers_exactly_the_documented_rpcs() {
    assert_service(&Contract::load(), "ConnectorAdmin", CONNECTOR_ADMIN);
}

#[test]
fn executor_offers_exactly_the_documented_rpcs() {
    assert_service(&Contract::load(), "Executor", EXECUTOR);
}

#[test]
fn executor_registry_offers_exactly_the_documented_rpcs() {
    assert_service(&Contract::load(), "ExecutorRegistry", EXECUTOR_REGISTRY);
}

#[test]
fn the_contract_has_exactly_three_services() {
    let c = Contract::load();
    let names: Vec<&str> = c.services.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "wharf.v1.ConnectorAdmin",
            "wharf.v1.Executor",
            "wharf.v1.ExecutorRegistry"
        ]
    );
}

/// `ConnectorEventType` -> `CONNECTOR_EVENT_TYPE`.
fn screaming_snake(name: &str) -> String {
    let mut out = String::new();
    for (i, ch) in name.chars().enumerate() {
        if ch.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(ch.to_ascii_uppercase());
    }
    out
}

#[test]
fn every_enum_starts_with_an_unspecified_zero_value() {
    let c = Contract::load();
    assert!(!c.enums.is_empty(), "the contract defines enums");
    for (full, e) in &c.enums {
        let first = e
            .value
            .first()
            .unwrap_or_else(|| panic!("enum {full} has no values"));
        let wanted = format!("{}_UNSPECIFIED", screaming_snake(e.name()));
        assert_eq!(first.name(), wanted, "first value of enum {full}");
        assert_eq!(first.number(), 0, "{full}.{wanted} must be the zero value");
        let zeros = e.value.iter().filter(|v| v.number() == 0).count();
        assert_eq!(zeros, 1, "enum {full} has exactly one zero value");
    }
}

#[test]
fn states_are_kafka_connects_plus_deleting() {
    let c = Contract::load();
    let state = c.enums.get("wharf.v1.State").expect("enum wharf.v1.State");
    let values: Vec<(&str, i32)> = state.value.iter().map(|v| (v.name(), v.number())).collect();
    assert_eq!(
        values,
        [
            ("STATE_UNSPECIFIED", 0),
            ("STATE_UNASSIGNED", 1),
            ("STATE_RUNNING", 2),
            ("STATE_PAUSED", 3),
            ("STATE_STOPPED", 4),
            ("STATE_FAILED", 5),
            ("STATE_RESTARTING", 6),
            ("STATE_DELETING", 7),
        ]
    );
}

#[test]
fn the_generated_rust_types_encode_connector_deleted_as_field_2() {
    // The Rust types come from the same build as the descriptor set; this pins the bytes a
    // peer in another language sees: field 2, wire type 0 (varint), value 1.
    let task = wharf::pb::v1::StopTaskRequest {
        connector_deleted: true,
        ..Default::default()
    };
    assert_eq!(task.encode_to_vec(), [0x10, 0x01]);
    let connector = wharf::pb::v1::ExecutorStopConnectorRequest {
        connector_deleted: true,
        ..Default::default()
    };
    assert_eq!(connector.encode_to_vec(), [0x10, 0x01]);
}
