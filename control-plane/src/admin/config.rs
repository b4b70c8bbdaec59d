//! Creating a connector and changing its config: the checks a config passes before it
//! is stored (the runtime's and the plugin's definitions, kept secrets, immutable keys,
//! who may set `cleanup.policy = give-up`), and ValidateConnectorConfig.

use std::collections::{BTreeMap, HashMap};

use tracing::{info, warn};
use wharf::pb::v1 as pb;
use wharf::sdk::REDACTED;

use super::{connect_keys, plugin_check};
use crate::auth::{AdminAction, AuthError, Principal};
use crate::grpc::convert::{self, KnownPlugin, RawConnector};
use crate::model::{ConnectorRecord, ConnectorSpec, TargetState};
use crate::store::CreateOutcome;

use super::{Admin, ApiError, ApiResult, info_with};

impl Admin {
    /// Validates a spec against the plugins registered executors offer: a Kafka Connect
    /// runtime key Wharf does not implement, or a config-provider reference that would
    /// not be resolved (another provider, or in a key the control plane reads), is
    /// refused ([`connect_keys`]) before the values are checked.
    fn checked_spec(
        plugins: &BTreeMap<String, KnownPlugin>,
        name: &str,
        config: &HashMap<String, String>,
    ) -> ApiResult<ConnectorSpec> {
        let spec = ConnectorSpec::try_from(RawConnector { name, config })?;
        let Some(plugin) = plugins.get(&spec.plugin) else {
            return Err(ApiError::InvalidArgument {
                field: "config[connector.class]".into(),
                reason: unknown_plugin(&spec.plugin),
            });
        };
        let def = convert::full_def(Some(&plugin.info));
        // Refused before the values are checked: a key Wharf would ignore, or a value it
        // would use literally, is the more fundamental problem.
        if let Some((field, reason)) = connect_keys::first_refused(&def, spec.config.iter()) {
            return Err(ApiError::InvalidArgument { field, reason });
        }
        if let Err((field, reason)) =
            wharf::topic_creation::TopicCreation::from_config(&spec.config)
        {
            return Err(ApiError::InvalidArgument { field, reason });
        }
        convert::validate_spec(&spec, &def)?;
        Ok(spec)
    }

    /// Runs the plugin's own checks on `spec`'s config on a live executor offering the
    /// plugin ([`plugin_check`]); when none could run them, logs at WARN and accepts
    /// (the declarative checks passed; the plugin's run at start).
    ///
    /// # Errors
    /// INVALID_ARGUMENT naming `config[<key>]` of the first key the plugin's checks
    /// refuse; store errors.
    async fn plugin_accepts(
        &self,
        plugins: &BTreeMap<String, KnownPlugin>,
        name: &str,
        spec: &ConnectorSpec,
    ) -> ApiResult<Vec<wharf::sdk::Resource>> {
        let def = convert::full_def(plugins.get(&spec.plugin).map(|p| &p.info));
        let asked = plugin_check::ask(&self.cluster, &spec.plugin, &def, &spec.config).await?;
        let declared = match &asked {
            plugin_check::Asked::Answered { declared, .. } => Some(declared.clone()),
            plugin_check::Asked::NoLiveExecutor
            | plugin_check::Asked::Failed { .. }
            | plugin_check::Asked::TimedOut { .. } => None,
        };
        let check = plugin_check::decide(asked, &spec.plugin);
        if let plugin_check::PluginCheck::NotRun(why) = &check {
            warn!(connector = %name, plugin = %spec.plugin, reason = %why,
                "the plugin's own config checks did not run; config accepted on the declarative checks, the plugin checks it at start");
        }
        if let Some(e) = plugin_check::refusal(&check) {
            return Err(e);
        }
        match declared {
            Some(Ok(declared)) => Ok(declared),
            Some(Err(reason)) => Err(ApiError::InvalidArgument {
                field: "config".into(),
                reason: format!(
                    "the plugin could not declare the resources it would provision: {reason}"
                ),
            }),
            // Not asked: the claim is checked when the plugin records its intents.
            None => Ok(Vec::new()),
        }
    }

    /// Refuses `declared` (what connector `name` would provision) when another live
    /// connector holds one of them (docs/resources.md, "A second claim").
    ///
    /// # Errors
    /// [`ApiError::ResourceHeld`] naming the resource and the holder; store errors.
    fn check_claims(&self, name: &str, declared: &[wharf::sdk::Resource]) -> ApiResult<()> {
        if declared.is_empty() {
            return Ok(());
        }
        let others = self.cluster.store.connectors_shared()?;
        match super::resources::second_claim(name, declared, &others) {
            Some(reason) => {
                warn!(connector = %name, %reason, "connector refused: second claim on a resource");
                Err(ApiError::ResourceHeld {
                    connector: name.to_owned(),
                    reason,
                })
            }
            None => Ok(()),
        }
    }

    /// The config to store for a create or put: a secret value given as the
    /// [`REDACTED`] placeholder (what GET answered) keeps the stored secret, so that
    /// GET config → PUT config never stores the literal placeholder. A placeholder with
    /// no stored secret behind it is refused.
    fn with_kept_secrets(
        plugins: &BTreeMap<String, KnownPlugin>,
        stored: Option<&ConnectorRecord>,
        config: &HashMap<String, String>,
    ) -> ApiResult<HashMap<String, String>> {
        let plugin = stored
            .map(|r| r.plugin.as_str())
            .or_else(|| {
                config
                    .get(crate::model::CONNECTOR_CLASS)
                    .map(String::as_str)
            })
            .and_then(|p| plugins.get(p.trim()))
            .map(|p| &p.info);
        let def = convert::full_def(plugin);
        kept_secrets(&def, stored.map(|r| &r.config), config)
    }

    /// CreateConnector / `POST /connectors`.
    ///
    /// The plugin's own checks run on a live executor offering it before anything is
    /// stored ([`plugin_check`]; when none can, the config is accepted on the declarative
    /// checks).
    ///
    /// # Errors
    /// INVALID_ARGUMENT naming the field (a plugin validator's refusal too);
    /// ALREADY_EXISTS; FAILED_PRECONDITION while a deletion of the name runs.
    pub async fn create(
        &self,
        name: &str,
        config: &HashMap<String, String>,
        target: TargetState,
        caller: &Principal,
    ) -> ApiResult<pb::ConnectorInfo> {
        let cluster = &self.cluster;
        convert::parse_name(name)?;
        // Decoded once per call (every executor's plugin descriptors).
        let plugins = self.plugins()?;
        let config = Self::with_kept_secrets(&plugins, None, config)?;
        let spec = Self::checked_spec(&plugins, name, &config)?;
        check_cleanup_policy(caller, AdminAction::CreateConnector, false, &config)?;
        let declared = self.plugin_accepts(&plugins, name, &spec).await?;
        self.check_claims(name, &declared)?;
        let mut rec = ConnectorRecord::new(&spec, target);
        rec.declared = declared;
        if cluster.deletions.in_flight(name) {
            // A forced deletion of this name still has a skipped cleanup stop in flight.
            return Err(ApiError::StillDeleting(name.to_owned()));
        }
        match cluster.store.create_connector(&rec)? {
            CreateOutcome::Created => {}
            CreateOutcome::AlreadyExists => return Err(ApiError::AlreadyExists(name.to_owned())),
            CreateOutcome::StillDeleting => return Err(ApiError::StillDeleting(name.to_owned())),
        }
        info!(connector = %name, plugin = %spec.plugin, tasks_max = spec.tasks_max.get(), ?target, "connector created");
        cluster.changed(name);
        Ok(info_with(&self.existing(name)?, &plugins))
    }

    /// PutConnectorConfig / `PUT /connectors/{name}/config`: creates or replaces; the
    /// flag says which.
    ///
    /// # Errors
    /// As [`Admin::create`] (the plugin's own checks included); FAILED_PRECONDITION for an
    /// immutable key's change, and while the connector is being deleted (checked first:
    /// no other complaint about the config matters then).
    pub async fn put_config(
        &self,
        name: &str,
        config: &HashMap<String, String>,
        caller: &Principal,
    ) -> ApiResult<(pb::ConnectorInfo, bool)> {
        let cluster = &self.cluster;
        convert::parse_name(name)?;
        let stored = cluster.store.connector(name)?;
        if stored.as_ref().is_some_and(|r| r.deleting) {
            return Err(ApiError::StillDeleting(name.to_owned()));
        }
        // A new plugin is refused before the config is validated against it: that is the
        // more fundamental problem, and the new plugin's errors would only distract.
        if config.contains_key(crate::model::CONNECTOR_CLASS)
            && let Some(rec) = &stored
        {
            let only_class = |c: &wharf::sdk::ConfigMap| -> wharf::sdk::ConfigMap {
                c.iter()
                    .filter(|(k, _)| k.as_str() == crate::model::CONNECTOR_CLASS)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            };
            let given: wharf::sdk::ConfigMap =
                config.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            check_immutable(
                name,
                &wharf::sdk::runtime_config_def(),
                &only_class(&rec.config),
                &only_class(&given),
            )?;
        }
        let plugins = self.plugins()?;
        let config = Self::with_kept_secrets(&plugins, stored.as_ref(), config)?;
        let spec = Self::checked_spec(&plugins, name, &config)?;
        check_cleanup_policy(
            caller,
            AdminAction::PutConnectorConfig,
            stored
                .as_ref()
                .is_some_and(ConnectorRecord::cleanup_gives_up),
            &config,
        )?;
        let declared = self.plugin_accepts(&plugins, name, &spec).await?;
        self.check_claims(name, &declared)?;
        for _ in 0..2 {
            match cluster.store.connector(name)? {
                None => {
                    if cluster.deletions.in_flight(name) {
                        return Err(ApiError::StillDeleting(name.to_owned()));
                    }
                    let mut rec = ConnectorRecord::new(&spec, TargetState::Started);
                    rec.declared = declared.clone();
                    match cluster.store.create_connector(&rec)? {
                        CreateOutcome::Created => {
                            info!(connector = %name, plugin = %spec.plugin, "connector created by put");
                            cluster.changed(name);
                            return Ok((info_with(&self.existing(name)?, &plugins), true));
                        }
                        CreateOutcome::StillDeleting => {
                            return Err(ApiError::StillDeleting(name.to_owned()));
                        }
                        CreateOutcome::AlreadyExists => continue,
                    }
                }
                Some(rec) if rec.deleting => return Err(ApiError::StillDeleting(name.to_owned())),
                Some(rec) => {
                    let def = convert::full_def(plugins.get(&rec.plugin).map(|p| &p.info));
                    check_immutable(name, &def, &rec.config, &spec.config)?;
                    let mut refused = false;
                    let mut immutable = None;
                    cluster.modify_connector(name, |r| {
                        if r.deleting {
                            refused = true;
                            return None;
                        }
                        // Checked again on the record being written: a put may have
                        // landed since the read above.
                        if let Err(e) = check_immutable(&r.name, &def, &r.config, &spec.config) {
                            immutable = Some(e);
                            return None;
                        }
                        if !declared.is_empty() || r.config != spec.config {
                            r.declared = declared.clone();
                        }
                        if r.config != spec.config {
                            r.config = spec.config.clone();
                            r.plugin = spec.plugin.clone();
                            r.tasks_max = spec.tasks_max.get();
                            r.config_changed = true;
                            r.task_configs_stale = true;
                        }
                        Some(())
                    })?;
                    if refused {
                        return Err(ApiError::StillDeleting(name.to_owned()));
                    }
                    if let Some(e) = immutable {
                        return Err(e);
                    }
                    info!(connector = %name, tasks_max = spec.tasks_max.get(), "connector config replaced");
                    return Ok((info_with(&self.existing(name)?, &plugins), false));
                }
            }
        }
        Err(ApiError::Contended(name.to_owned()))
    }

    /// `PATCH /connectors/{name}/config` (KIP-477): merges `patch` into the stored config
    /// (a `None` value removes the key) and puts the result, by the rules of
    /// [`Admin::put_config`]. Secret values come back as the placeholder, which the put
    /// keeps as the stored secret.
    ///
    /// # Errors
    /// NOT_FOUND when the connector does not exist; as [`Admin::put_config`].
    pub async fn patch_config(
        &self,
        name: &str,
        patch: &BTreeMap<String, Option<String>>,
        caller: &Principal,
    ) -> ApiResult<pb::ConnectorInfo> {
        let rec = self.existing(name)?;
        if rec.deleting {
            return Err(ApiError::StillDeleting(name.to_owned()));
        }
        let mut config: HashMap<String, String> = rec.config.into_iter().collect();
        for (k, v) in patch {
            match v {
                Some(v) => config.insert(k.clone(), v.clone()),
                None => config.remove(k),
            };
        }
        Ok(self.put_config(name, &config, caller).await?.0)
    }

    /// ValidateConnectorConfig / `PUT /connector-plugins/{class}/config/validate`: one
    /// entry per defined key (errors), then one per key nobody defines (a warning each,
    /// or an error for a Kafka Connect runtime key Wharf does not implement:
    /// [`connect_keys`]); a config-provider reference is an error on its key.
    /// The plugin's own checks (validators) run on a live executor offering the plugin
    /// and their errors join their keys; when none could run them, a warning on
    /// `connector.class` says why ([`plugin_check`]).
    ///
    /// # Errors
    /// INVALID_ARGUMENT for an oversized config; store errors.
    pub async fn validate(
        &self,
        config: &HashMap<String, String>,
    ) -> ApiResult<pb::ValidateConnectorConfigResponse> {
        convert::check_config_size(config)?;
        let plugins = self.plugins()?;
        let plugin_name = config
            .get(crate::model::CONNECTOR_CLASS)
            .cloned()
            .unwrap_or_default();
        let plugin = plugins.get(&plugin_name);
        let def = convert::full_def(plugin.map(|p| &p.info));
        let config: wharf::sdk::ConfigMap =
            config.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let key_defs: BTreeMap<String, pb::ConfigKeyDef> = def
            .keys
            .iter()
            .map(|k| (k.name.clone(), wharf::wire::config_key_def(k)))
            .collect();
        let mut configs: Vec<pb::ConfigValueInfo> = def
            .validate(&config)
            .into_iter()
            .map(|v| pb::ConfigValueInfo {
                definition: key_defs.get(&v.name).cloned(),
                name: v.name,
                value: v.value.unwrap_or_default(),
                errors: v.errors,
                warnings: Vec::new(),
            })
            .collect();
        for c in &mut configs {
            if let Some(v) = config
                .get(&c.name)
                .filter(|v| connect_keys::has_provider_reference(v))
            {
                // The value is known only on the executor, at the start: the checks of
                // the reference's text would be wrong, its provider's are what counts.
                c.errors = connect_keys::runtime_key_reference_refusal(&c.name, v)
                    .or_else(|| connect_keys::provider_refusal(v))
                    .into_iter()
                    .collect();
            }
        }
        if !plugin_name.is_empty()
            && plugin.is_none()
            && let Some(c) = configs
                .iter_mut()
                .find(|c| c.name == crate::model::CONNECTOR_CLASS)
        {
            c.errors.push(unknown_plugin(&plugin_name));
        }
        let redacted = def.redact(&config);
        for (k, v) in &redacted {
            if def.key(k).is_none() {
                // A key create would refuse is an error on that key, not only unknown.
                let raw = config.get(k).map_or("", String::as_str);
                let (errors, warnings) = match convert::config_key_problem(k) {
                    Some(why) => (vec![convert::bad_key_reason(why)], Vec::new()),
                    None => match connect_keys::problem(&def, k, raw) {
                        Some(why) => (vec![why], Vec::new()),
                        // Of an unknown plugin nothing says which keys it reads: the
                        // error on connector.class is the answer, not a warning per key.
                        None if plugin.is_none() => (Vec::new(), Vec::new()),
                        // A pipeline key: the runtime reads it (an executor checks it).
                        None if connect_keys::implemented(k) => (Vec::new(), Vec::new()),
                        None => (Vec::new(), vec![unknown_key_warning(&def, k)]),
                    },
                };
                configs.push(pb::ConfigValueInfo {
                    name: k.clone(),
                    value: v.clone(),
                    errors,
                    definition: None,
                    warnings,
                });
            }
        }
        // An unknown plugin is already the error; nobody could check for it.
        if plugin.is_some() {
            let asked = plugin_check::ask(&self.cluster, &plugin_name, &def, &config).await?;
            let check = plugin_check::decide(asked, &plugin_name);
            plugin_check::merge_into(&mut configs, &check, &redacted);
        }
        let error_count = configs.iter().map(|c| c.errors.len() as u32).sum();
        let warning_count = configs.iter().map(|c| c.warnings.len() as u32).sum();
        Ok(pb::ValidateConnectorConfigResponse {
            plugin: plugin_name,
            error_count,
            configs,
            warning_count,
        })
    }
}

/// The warning for a config key that neither the runtime nor the plugin defines, naming
/// the defined key it most likely meant (one edit away, or the same without separators).
fn unknown_key_warning(def: &wharf::sdk::ConfigDef, key: &str) -> String {
    let squash = |s: &str| -> String { s.chars().filter(|c| c.is_ascii_alphanumeric()).collect() };
    let near = def
        .keys
        .iter()
        .map(|k| k.name.as_str())
        .find(|k| squash(k) == squash(key) || edit_distance_is_one(k, key));
    match near {
        Some(k) => format!(
            "unknown key {key:?}: neither the runtime nor the plugin defines it, so it is ignored; did you mean {k:?}?"
        ),
        None => format!(
            "unknown key {key:?}: neither the runtime nor the plugin defines it, so it is ignored unless the plugin reads it itself"
        ),
    }
}

/// True when `a` and `b` differ by exactly one inserted, removed or replaced character.
fn edit_distance_is_one(a: &str, b: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let (short, long) = if a.len() <= b.len() {
        (&a, &b)
    } else {
        (&b, &a)
    };
    match long.len() - short.len() {
        0 => {
            short
                .iter()
                .zip(long.iter())
                .filter(|(x, y)| x != y)
                .count()
                == 1
        }
        1 => {
            let p = short
                .iter()
                .zip(long.iter())
                .take_while(|(x, y)| x == y)
                .count();
            short[p..] == long[p + 1..]
        }
        _ => false,
    }
}

/// `config` with each secret given as [`REDACTED`] replaced by the stored secret.
///
/// # Errors
/// INVALID_ARGUMENT naming `config[<key>]` when there is no stored secret to keep.
fn kept_secrets(
    def: &wharf::sdk::ConfigDef,
    stored: Option<&wharf::sdk::ConfigMap>,
    config: &HashMap<String, String>,
) -> ApiResult<HashMap<String, String>> {
    let mut out = config.clone();
    for (k, v) in config {
        if v != REDACTED {
            continue;
        }
        // Probed with a plain value: the given one is the placeholder itself.
        let probe: wharf::sdk::ConfigMap = [(k.clone(), "x".to_owned())].into_iter().collect();
        let secret = def.redact(&probe).get(k).is_some_and(|r| r == REDACTED);
        let kept = stored.and_then(|s| s.get(k));
        match (secret, kept) {
            (true, Some(old)) => {
                out.insert(k.clone(), old.clone());
            }
            (true, None) => {
                return Err(ApiError::InvalidArgument {
                    field: format!("config[{k}]"),
                    reason: format!(
                        "{REDACTED:?} is the placeholder responses show for a secret, and no secret is stored for this key: give the value itself"
                    ),
                });
            }
            // A non-secret key whose value happens to be the placeholder text.
            (false, _) => {}
        }
    }
    Ok(out)
}

/// Refuses a config change that would orphan what the current config provisioned: the
/// deletion's cleanup runs the connector's *current* plugin with its *current* config,
/// so a new `connector.class`, or a new value of a key the plugin marks immutable (the
/// database, the file), would make it clean up the wrong place. Values compared are the
/// effective ones (given, or the key's default).
///
/// # Errors
/// [`ApiError::ImmutableConfig`] (FAILED_PRECONDITION) naming `config[<key>]`.
fn check_immutable(
    name: &str,
    def: &wharf::sdk::ConfigDef,
    old: &wharf::sdk::ConfigMap,
    new: &wharf::sdk::ConfigMap,
) -> ApiResult<()> {
    let class = crate::model::CONNECTOR_CLASS;
    if old.get(class) != new.get(class) {
        return Err(ApiError::ImmutableConfig {
            name: name.to_owned(),
            field: format!("config[{class}]"),
            change: change(old.get(class), new.get(class)).into(),
            why: "the deletion's cleanup would run the new plugin and leave behind what the old one provisioned".into(),
        });
    }
    for key in def.keys.iter().filter(|k| k.immutable) {
        let effective =
            |c: &wharf::sdk::ConfigMap| c.get(&key.name).or(key.default.as_ref()).cloned();
        let (was, now) = (effective(old), effective(new));
        if was != now {
            return Err(ApiError::ImmutableConfig {
                name: name.to_owned(),
                field: format!("config[{}]", key.name),
                change: change(was.as_ref(), now.as_ref()).into(),
                why: format!(
                    "plugin {:?} marks it immutable (it names where the connector's external objects live), and the deletion's cleanup would look only in the new place",
                    old.get(class).map_or("", String::as_str)
                ),
            });
        }
    }
    Ok(())
}

/// What a config change did to one key, without its values (an error names the key and
/// the rule, never a value).
fn change(was: Option<&String>, now: Option<&String>) -> &'static str {
    match (was, now) {
        (Some(_), None) => "removed",
        (None, Some(_)) => "set",
        (Some(_), Some(_)) | (None, None) => "changed",
    }
}

/// The error for a `connector.class` no registered executor offers; for the built-in
/// file plugins, why an executor may not offer them.
fn unknown_plugin(plugin: &str) -> String {
    match plugin {
        "file-source" | "file-sink" => format!(
            "unknown plugin {plugin:?}: no registered executor offers it (executors offer the file plugins only when started with --file-root, the directory they may touch; see docs/configuration.md)"
        ),
        _ => format!("unknown plugin {plugin:?}: no registered executor offers it"),
    }
}

/// Refuses a config that turns `cleanup.policy` to `give-up` unless `caller` may
/// (`crate::auth::cleanup_policy_role`: the role of `force`); the refusal is
/// PERMISSION_DENIED naming the key, and audited by the guard like any refused call.
fn check_cleanup_policy(
    caller: &Principal,
    rpc: AdminAction,
    stored_gives_up: bool,
    config: &HashMap<String, String>,
) -> ApiResult<()> {
    let gives_up =
        crate::model::policy_gives_up(config.get(wharf::sdk::CLEANUP_POLICY).map(String::as_str));
    let needed = crate::auth::cleanup_policy_role(stored_gives_up, gives_up);
    if caller.role >= needed {
        return Ok(());
    }
    Err(ApiError::Auth(AuthError::Forbidden {
        principal: caller.to_string(),
        rpc: rpc.rpc(),
        detail: " setting config[cleanup.policy] to give-up (a deletion could then skip its cleanup, as force does)".into(),
        needed,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_file_plugin_names_the_file_root_and_others_do_not() {
        for p in ["file-source", "file-sink"] {
            assert!(super::unknown_plugin(p).contains("--file-root"), "{p}");
        }
        assert!(!super::unknown_plugin("my-plugin").contains("--file-root"));
    }

    fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_placeholder_for_a_secret_keeps_the_stored_secret() {
        let def = wharf::sdk::runtime_config_def();
        let stored: wharf::sdk::ConfigMap = [("db.password".to_owned(), "s3cret".to_owned())]
            .into_iter()
            .collect();
        let given = map(&[("db.password", REDACTED), ("tasks.max", "2")]);
        let kept = kept_secrets(&def, Some(&stored), &given).unwrap();
        assert_eq!(kept["db.password"], "s3cret");
        assert_eq!(kept["tasks.max"], "2");
    }

    #[test]
    fn a_placeholder_with_no_stored_secret_is_refused_naming_the_key() {
        let def = wharf::sdk::runtime_config_def();
        let e = kept_secrets(&def, None, &map(&[("db.password", REDACTED)])).unwrap_err();
        assert!(
            matches!(&e, ApiError::InvalidArgument { field, .. } if field == "config[db.password]"),
            "{e}"
        );
    }

    #[test]
    fn the_placeholder_text_in_a_plain_key_is_stored_as_given() {
        let def = wharf::sdk::runtime_config_def();
        let kept = kept_secrets(&def, None, &map(&[("label", REDACTED)])).unwrap();
        assert_eq!(kept["label"], REDACTED);
    }

    #[test]
    fn an_unknown_key_warning_names_the_key_it_resembles() {
        let def = wharf::sdk::runtime_config_def();
        let w = unknown_key_warning(&def, "task.max");
        assert!(
            w.contains("\"task.max\"") && w.contains("did you mean \"tasks.max\""),
            "{w}"
        );
        let w = unknown_key_warning(&def, "tasks_max");
        assert!(w.contains("did you mean \"tasks.max\""), "{w}");
        let w = unknown_key_warning(&def, "colour");
        assert!(!w.contains("did you mean"), "{w}");
    }

    #[test]
    fn a_change_is_named_without_its_values() {
        let (a, b) = ("MARKER-a".to_owned(), "MARKER-b".to_owned());
        assert_eq!(change(Some(&a), None), "removed");
        assert_eq!(change(None, Some(&b)), "set");
        assert_eq!(change(Some(&a), Some(&b)), "changed");
        let def = wharf::sdk::runtime_config_def();
        let old: wharf::sdk::ConfigMap = [("connector.class".to_owned(), a)].into();
        let new: wharf::sdk::ConfigMap = [("connector.class".to_owned(), b)].into();
        let e = check_immutable("c", &def, &old, &new)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("config[connector.class] cannot change (changed)"),
            "{e}"
        );
        assert!(!e.contains("MARKER"), "{e}");
    }

    #[test]
    fn edit_distance_one_covers_insert_remove_and_replace() {
        assert!(edit_distance_is_one("tasks.max", "task.max"));
        assert!(edit_distance_is_one("task.max", "tasks.max"));
        assert!(edit_distance_is_one("tasks.max", "tasks.mux"));
        assert!(!edit_distance_is_one("tasks.max", "tasks.max"));
        assert!(!edit_distance_is_one("tasks.max", "t.max"));
    }
}
