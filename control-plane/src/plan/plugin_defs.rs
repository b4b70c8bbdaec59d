//! One definition per plugin version: whether a registering executor's plugins agree with
//! what the live executors offer.
//!
//! The control plane validates configs against a plugin's definition (its keys, their
//! types, which are secret, which are immutable), taken from the executors that offer it.
//! Two executors offering the same plugin name and version with different definitions
//! would let the later one replace what the control plane checks against: an executor
//! holding a valid certificate for its own id could register a one-key definition of a
//! plugin the others offer and so bypass the immutable-key guard. Such a registration is
//! refused, naming the plugin, its version and the live executor whose definition differs;
//! nothing is replaced.
//!
//! - **Compared with** the live executors (registered and not lost), other than the one
//!   registering (an executor may come back with a new build of itself once the others
//!   agree, or alone).
//! - **Equal** means the whole `PluginInfo` (kind and every key definition) is equal.
//! - A different version of the same plugin is another plugin version, not a conflict.

use wharf::pb::v1 as pb;

/// A registering executor's definition of a plugin version differs from a live one's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefinitionConflict {
    /// Plugin name.
    pub plugin: String,
    /// Plugin version.
    pub version: String,
    /// The live executor offering another definition of it.
    pub live_executor: String,
    /// What differs, in the field's terms (never a default value: defaults of secret keys
    /// are not shown).
    pub difference: String,
}

impl std::fmt::Display for DefinitionConflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "plugin {:?} version {:?} is offered by live executor {} with another definition ({}); every executor must offer one definition per plugin version (give the changed plugin a new version, or replace every executor)",
            self.plugin, self.version, self.live_executor, self.difference
        )
    }
}

/// What differs between two definitions of one plugin version, `None` when they are
/// equal.
fn difference(offered: &pb::PluginInfo, live: &pb::PluginInfo) -> Option<String> {
    if offered == live {
        return None;
    }
    if offered.kind != live.kind {
        return Some("its kind differs".into());
    }
    let names = |p: &pb::PluginInfo| -> Vec<String> {
        p.config_defs.iter().map(|k| k.name.clone()).collect()
    };
    let (mine, theirs) = (names(offered), names(live));
    if let Some(missing) = theirs.iter().find(|k| !mine.contains(k)) {
        return Some(format!("it lacks key {missing:?}"));
    }
    if let Some(extra) = mine.iter().find(|k| !theirs.contains(k)) {
        return Some(format!("it adds key {extra:?}"));
    }
    let changed = offered
        .config_defs
        .iter()
        .find(|k| live.config_defs.iter().all(|l| l != *k))
        .map_or_else(|| "the order of its keys".to_owned(), |k| k.name.clone());
    Some(format!("the definition of key {changed:?} differs"))
}

/// Whether `executor` may register offering `offered` beside the `live` executors (id
/// and plugins of each; `executor`'s own entry is skipped). Pure.
///
/// # Errors
/// The first plugin version whose definition differs from a live executor's.
pub fn admit<'a>(
    executor: &str,
    offered: &[pb::PluginInfo],
    live: impl IntoIterator<Item = (&'a str, &'a [pb::PluginInfo])>,
) -> Result<(), DefinitionConflict> {
    for (id, plugins) in live {
        if id == executor {
            continue;
        }
        for mine in offered {
            let Some(theirs) = plugins
                .iter()
                .find(|p| p.name == mine.name && p.version == mine.version)
            else {
                continue;
            };
            if let Some(difference) = difference(mine, theirs) {
                return Err(DefinitionConflict {
                    plugin: mine.name.clone(),
                    version: mine.version.clone(),
                    live_executor: id.to_owned(),
                    difference,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str, immutable: bool) -> pb::ConfigKeyDef {
        pb::ConfigKeyDef {
            name: name.into(),
            immutable,
            ..Default::default()
        }
    }

    fn plugin(version: &str, keys: Vec<pb::ConfigKeyDef>) -> pb::PluginInfo {
        pb::PluginInfo {
            name: "postgres-audit".into(),
            version: version.into(),
            kind: pb::PluginKind::Source as i32,
            config_defs: keys,
            ..Default::default()
        }
    }

    fn full() -> pb::PluginInfo {
        plugin("1.0", vec![key("tables", false), key("audit.table", true)])
    }

    #[test]
    fn the_same_definition_is_admitted() {
        let live = [full()];
        assert_eq!(admit("b", &[full()], [("a", &live[..])]), Ok(()));
    }

    #[test]
    fn a_one_key_definition_of_a_plugin_others_offer_is_refused_naming_it() {
        let live = [full()];
        let e = admit(
            "b",
            &[plugin("1.0", vec![key("tables", false)])],
            [("a", &live[..])],
        )
        .unwrap_err();
        assert_eq!(e.plugin, "postgres-audit");
        assert_eq!(e.live_executor, "a");
        assert_eq!(e.difference, "it lacks key \"audit.table\"");
        let text = e.to_string();
        assert!(
            text.contains("version \"1.0\"") && text.contains("live executor a"),
            "{text}"
        );
    }

    #[test]
    fn a_key_made_mutable_is_a_conflict() {
        let live = [full()];
        let e = admit(
            "b",
            &[plugin(
                "1.0",
                vec![key("tables", false), key("audit.table", false)],
            )],
            [("a", &live[..])],
        )
        .unwrap_err();
        assert_eq!(
            e.difference,
            "the definition of key \"audit.table\" differs"
        );
    }

    #[test]
    fn an_added_key_or_another_kind_is_a_conflict() {
        let live = [full()];
        let mut more = full();
        more.config_defs.push(key("extra", false));
        assert_eq!(
            admit("b", &[more], [("a", &live[..])])
                .unwrap_err()
                .difference,
            "it adds key \"extra\""
        );
        let mut sink = full();
        sink.kind = pb::PluginKind::Sink as i32;
        assert_eq!(
            admit("b", &[sink], [("a", &live[..])])
                .unwrap_err()
                .difference,
            "its kind differs"
        );
    }

    #[test]
    fn another_version_or_the_executors_own_record_is_no_conflict() {
        let live = [full()];
        let other_version = plugin("2.0", vec![key("tables", false)]);
        assert_eq!(admit("b", &[other_version], [("a", &live[..])]), Ok(()));
        let changed = plugin("1.0", vec![key("tables", false)]);
        assert_eq!(admit("a", &[changed], [("a", &live[..])]), Ok(()));
    }
}
