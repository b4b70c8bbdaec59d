//! Conversions between SDK types and their wire form, shared by both sides so that a
//! plugin's config definition means the same on the executor that runs it and on the
//! control plane that validates against it.

use crate::pb::v1 as pb;
use crate::sdk::{ConfigDef, ConfigKey, ConfigType, Importance, Plugin, PluginKind};

/// The wire form of a plugin, as an executor advertises it.
pub fn plugin_info(plugin: &Plugin) -> pb::PluginInfo {
    pb::PluginInfo {
        name: plugin.name.clone(),
        version: plugin.version.clone(),
        kind: plugin_kind(plugin.kind()) as i32,
        config_defs: plugin.config_def.keys.iter().map(config_key_def).collect(),
        // A Rust plugin does not say: its SDK stop_with may be implemented.
        ..Default::default()
    }
}

/// Wire form of a custom transform or predicate.
pub fn transform_plugin_info(plugin: &crate::sdk::TransformPlugin) -> pb::TransformPluginInfo {
    pb::TransformPluginInfo {
        name: plugin.name.clone(),
        version: plugin.version.clone(),
        kind: match plugin.kind {
            crate::sdk::TransformKind::Transformation(_) => pb::TransformPluginKind::Transformation,
            crate::sdk::TransformKind::Predicate(_) => pb::TransformPluginKind::Predicate,
        } as i32,
        config_defs: plugin.config_def.keys.iter().map(config_key_def).collect(),
    }
}

/// Wire value of a plugin kind.
pub fn plugin_kind(kind: PluginKind) -> pb::PluginKind {
    match kind {
        PluginKind::Source => pb::PluginKind::Source,
        PluginKind::Sink => pb::PluginKind::Sink,
    }
}

/// Wire form of one config key (the validator function does not travel).
pub fn config_key_def(key: &ConfigKey) -> pb::ConfigKeyDef {
    let ty = match key.ty {
        ConfigType::String => pb::ConfigType::String,
        ConfigType::Int => pb::ConfigType::Int,
        ConfigType::Long => pb::ConfigType::Long,
        ConfigType::Boolean => pb::ConfigType::Boolean,
        ConfigType::List => pb::ConfigType::List,
        ConfigType::Password => pb::ConfigType::Password,
        ConfigType::Double => pb::ConfigType::Double,
    };
    let importance = match key.importance {
        Importance::High => pb::Importance::High,
        Importance::Medium => pb::Importance::Medium,
        Importance::Low => pb::Importance::Low,
    };
    pb::ConfigKeyDef {
        name: key.name.clone(),
        r#type: ty as i32,
        default_value: key.default.clone(),
        importance: importance as i32,
        documentation: key.documentation.clone(),
        secret: key.secret,
        required: key.required,
        allowed_values: key.allowed_values.clone(),
        immutable: key.immutable,
        required_when: key.required_when.as_ref().map(|r| pb::RequiredWhen {
            key: r.key.clone(),
            values: r.values.clone(),
        }),
    }
}

/// A config definition rebuilt from the wire (without plugin-side validators: the
/// control plane checks types, required keys and allowed values; the plugin's own checks
/// run when it starts).
pub fn config_def(keys: &[pb::ConfigKeyDef]) -> ConfigDef {
    keys.iter().fold(ConfigDef::new(), |def, k| {
        let ty = match pb::ConfigType::try_from(k.r#type).unwrap_or(pb::ConfigType::String) {
            pb::ConfigType::Int => ConfigType::Int,
            pb::ConfigType::Long => ConfigType::Long,
            pb::ConfigType::Boolean => ConfigType::Boolean,
            pb::ConfigType::List => ConfigType::List,
            pb::ConfigType::Password => ConfigType::Password,
            pb::ConfigType::Double => ConfigType::Double,
            pb::ConfigType::String | pb::ConfigType::Unspecified => ConfigType::String,
        };
        let importance = match pb::Importance::try_from(k.importance).unwrap_or(pb::Importance::Low)
        {
            pb::Importance::High => Importance::High,
            pb::Importance::Medium => Importance::Medium,
            pb::Importance::Low | pb::Importance::Unspecified => Importance::Low,
        };
        let mut key = ConfigKey::new(&k.name, ty, importance, &k.documentation);
        key.default = k.default_value.clone();
        key.secret = k.secret || ty == ConfigType::Password;
        key.required = k.required;
        key.allowed_values = k.allowed_values.clone();
        key.immutable = k.immutable;
        key.required_when = k.required_when.as_ref().map(|r| crate::sdk::RequiredWhen {
            key: r.key.clone(),
            values: r.values.clone(),
        });
        def.define(key)
    })
}

/// Wire form of a resource.
pub fn resource(r: &crate::sdk::Resource) -> pb::Resource {
    pb::Resource {
        kind: r.kind.as_str().to_owned(),
        name: r.name.clone(),
        locator: Some(pb::ResourceLocator {
            host: r.locator.host.clone(),
            database: r.locator.database.clone(),
            vhost: r.locator.vhost.clone(),
            path: r.locator.path.clone(),
        }),
        origin: match r.origin {
            crate::sdk::Origin::Created => pb::ResourceOrigin::Created,
            crate::sdk::Origin::Adopted => pb::ResourceOrigin::Adopted,
        } as i32,
    }
}

/// The resource a wire form names; an unset or unknown origin reads as
/// `unspecified_origin` (the declarations of ValidateConfig carry none; a ledger change
/// that needs one is checked by its receiver).
pub fn resource_from(
    r: &pb::Resource,
    unspecified_origin: crate::sdk::Origin,
) -> crate::sdk::Resource {
    let locator = r.locator.clone().unwrap_or_default();
    crate::sdk::Resource {
        kind: crate::sdk::ResourceKind::parse(&r.kind),
        name: r.name.clone(),
        locator: crate::sdk::Locator {
            host: locator.host,
            database: locator.database,
            vhost: locator.vhost,
            path: locator.path,
        },
        origin: match pb::ResourceOrigin::try_from(r.origin) {
            Ok(pb::ResourceOrigin::Created) => crate::sdk::Origin::Created,
            Ok(pb::ResourceOrigin::Adopted) => crate::sdk::Origin::Adopted,
            Ok(pb::ResourceOrigin::Unspecified) | Err(_) => unspecified_origin,
        },
    }
}

/// Wire value of a ledger change.
pub fn ledger_change(c: crate::sdk::LedgerChange) -> pb::ResourceChange {
    match c {
        crate::sdk::LedgerChange::Intent => pb::ResourceChange::Intent,
        crate::sdk::LedgerChange::Confirm => pb::ResourceChange::Confirm,
        crate::sdk::LedgerChange::Release => pb::ResourceChange::Release,
        crate::sdk::LedgerChange::Absent => pb::ResourceChange::Absent,
    }
}

/// The ledger change of a wire value; `None` for an unset or unknown one.
pub fn ledger_change_from(c: i32) -> Option<crate::sdk::LedgerChange> {
    match pb::ResourceChange::try_from(c).ok()? {
        pb::ResourceChange::Intent => Some(crate::sdk::LedgerChange::Intent),
        pb::ResourceChange::Confirm => Some(crate::sdk::LedgerChange::Confirm),
        pb::ResourceChange::Release => Some(crate::sdk::LedgerChange::Release),
        pb::ResourceChange::Absent => Some(crate::sdk::LedgerChange::Absent),
        pb::ResourceChange::Unspecified => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sdk::{ConfigKey, ConfigType, Importance};

    #[test]
    fn a_cross_key_requirement_travels_to_the_control_plane() {
        let key = ConfigKey::new("root", ConfigType::String, Importance::Low, "r")
            .required_when("mode", &["verify-full"]);
        let back = config_def(&[config_key_def(&key)]);
        assert_eq!(back.keys[0].required_when, key.required_when);
    }
}
