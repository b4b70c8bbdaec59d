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
