//! The SDK's definitions of the built-in transforms and predicates
//! (`builtin_transform_config_def`, `builtin_predicate_config_def`) beside Kafka Connect
//! 4.3's own classes: a small Java program (compiled here with `javac` against the jars
//! `scripts/setup-services connect` unpacks) prints each class's `config()` keys, and
//! every key's name, type, default, requiredness and importance must be the SDK's, in the
//! same order. What `GET /connector-plugins/{class}/config` answers for a built-in is then
//! what a Connect 4.3 worker answers, docs aside.

use std::process::Command;

use wharf::sdk::{ConfigType, Importance};

/// The jars the Java side needs: the transforms, the API they implement, and the
/// `ConfigDef` of the clients.
const JARS: [&str; 4] = [
    "connect-api-4.3.0.jar",
    "connect-transforms-4.3.0.jar",
    "kafka-clients-4.3.0.jar",
    "slf4j-api-2.0.18.jar",
];

/// Prints `class<TAB>name<TAB>TYPE<TAB>default<TAB>IMPORTANCE` per key, the default as
/// Connect's REST shows it (`ConfigDef.convertToString`), `<required>` for none and
/// `<null>` for a null one.
const DUMPER: &str = r#"
import org.apache.kafka.common.config.ConfigDef;

public class DumpConfigDefs {
    public static void main(String[] classes) throws Exception {
        for (String name : classes) {
            Object plugin = Class.forName(name).getDeclaredConstructor().newInstance();
            ConfigDef def = (ConfigDef) plugin.getClass().getMethod("config").invoke(plugin);
            for (ConfigDef.ConfigKey k : def.configKeys().values()) {
                String dflt;
                if (k.defaultValue == ConfigDef.NO_DEFAULT_VALUE) {
                    dflt = "<required>";
                } else if (k.defaultValue == null) {
                    dflt = "<null>";
                } else {
                    dflt = ConfigDef.convertToString(k.defaultValue, k.type);
                }
                System.out.println(name + "\t" + k.name + "\t" + k.type + "\t" + dflt + "\t" + k.importance);
            }
        }
    }
}
"#;

/// Connect 4.3's lines for `classes`, from the Java program.
fn connect_lines(classes: &[&str]) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("DumpConfigDefs.java");
    std::fs::write(&source, DUMPER).unwrap();
    let libs = wharf_harness::jvm::connect_libs();
    let cp = JARS
        .iter()
        .map(|j| libs.join(j).display().to_string())
        .collect::<Vec<_>>()
        .join(":");
    let status = Command::new("javac")
        .arg("-d")
        .arg(dir.path())
        .arg("-cp")
        .arg(&cp)
        .arg(&source)
        .status()
        .expect("javac runs (Java 17)");
    assert!(status.success(), "javac failed");
    let out = Command::new("java")
        .arg("-cp")
        .arg(format!("{}:{cp}", dir.path().display()))
        .arg("DumpConfigDefs")
        .args(classes)
        .output()
        .expect("java runs");
    assert!(
        out.status.success(),
        "java failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The SDK's lines in the Java program's format.
fn sdk_lines(classes: &[&str]) -> Vec<String> {
    let mut lines = Vec::new();
    for class in classes {
        let def = wharf::sdk::builtin_transform_config_def(class)
            .or_else(|| wharf::sdk::builtin_predicate_config_def(class))
            .unwrap_or_else(|| panic!("{class} has a definition"));
        for k in def.keys {
            let ty = match k.ty {
                ConfigType::String => "STRING",
                ConfigType::Int => "INT",
                ConfigType::Long => "LONG",
                ConfigType::Boolean => "BOOLEAN",
                ConfigType::List => "LIST",
                ConfigType::Password => "PASSWORD",
                ConfigType::Double => "DOUBLE",
            };
            let default = match (&k.default, k.required) {
                (Some(d), _) => d.clone(),
                (None, true) => "<required>".to_owned(),
                (None, false) => "<null>".to_owned(),
            };
            let importance = match k.importance {
                Importance::High => "HIGH",
                Importance::Medium => "MEDIUM",
                Importance::Low => "LOW",
            };
            lines.push(format!(
                "{class}\t{}\t{ty}\t{default}\t{importance}",
                k.name
            ));
        }
    }
    lines
}

#[test]
fn each_built_in_definition_has_connect_4_3s_keys_types_defaults_and_importance() {
    let classes: Vec<&str> = wharf::sdk::BUILTIN_TRANSFORMS
        .iter()
        .chain(wharf::sdk::BUILTIN_PREDICATES)
        .copied()
        .collect();
    let connect = connect_lines(&classes);
    assert!(
        connect.len() > classes.len(),
        "the Java side printed keys: {connect:?}"
    );
    let ours = sdk_lines(&classes);
    let missing: Vec<&String> = connect.iter().filter(|l| !ours.contains(l)).collect();
    let extra: Vec<&String> = ours.iter().filter(|l| !connect.contains(l)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "Connect 4.3 only: {missing:#?}\nWharf only: {extra:#?}"
    );
    assert_eq!(ours, connect, "same keys, in Connect's order");
}
