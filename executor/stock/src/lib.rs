//! The stock executor: the executor library (`wharf-executor`) with the built-in plugins
//! of `wharf-connectors`. Its binary is `wharf-executor`; an author's executor that should
//! offer the built-in plugins next to its own passes [`builtin_plugins`] to
//! `ExecutorBuilder::plugins_from` (docs/connector-guide.md, "Build your executor").

use wharf_connectors::file::FileRoot;
use wharf_executor::PluginSettings;
use wharf_executor::config::ConfigError;
use wharf_sdk::Plugin;

/// The built-in plugins under `settings`: postgres-audit, sqlite-audit and rabbitmq-sink
/// always; file-source and file-sink confined to `--file-root` when it is given; the
/// fault-injecting test-source and test-sink with `--enable-test-plugins`.
///
/// # Errors
/// [`ConfigError::Invalid`] naming `--file-root` when it does not exist or is not a
/// directory.
pub fn builtin_plugins(settings: &PluginSettings) -> Result<Vec<Plugin>, ConfigError> {
    let root = settings
        .file_root
        .as_deref()
        .map(|dir| {
            FileRoot::new(dir).map_err(|reason| ConfigError::Invalid {
                field: "--file-root",
                reason,
            })
        })
        .transpose()?;
    let mut plugins = wharf_connectors::builtin_plugins(root.as_ref());
    if settings.test_plugins {
        plugins.extend(wharf_connectors::test_plugins());
    }
    Ok(plugins)
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use wharf_executor::config::Cli;
    use wharf_executor::{Executor, app::ExecutorConfig};

    use super::*;

    fn names(plugins: &[Plugin]) -> Vec<&str> {
        plugins.iter().map(|p| p.name.as_str()).collect()
    }

    fn root() -> (tempfile::TempDir, wharf_connectors::file::FileRoot) {
        let dir = tempfile::tempdir().unwrap();
        let root = wharf_connectors::file::FileRoot::new(dir.path()).unwrap();
        (dir, root)
    }

    #[test]
    fn an_authors_plugin_is_offered_next_to_the_builtin_ones() {
        let (_dir, root) = root();
        let mut mine = wharf_connectors::file::sink_plugin(root);
        mine.name = "my-sink".to_owned();
        let list = Executor::builder()
            .plugins_from(builtin_plugins)
            .plugin(mine.clone())
            .plugin_list(&PluginSettings::default())
            .unwrap();
        assert!(names(&list).contains(&"sqlite-audit"));
        assert_eq!(names(&list).last(), Some(&"my-sink"));
        let only = Executor::builder()
            .plugin(mine)
            .plugin_list(&PluginSettings::default())
            .unwrap();
        assert_eq!(names(&only), ["my-sink"]);
    }

    #[test]
    fn a_plugin_named_like_a_builtin_one_is_refused() {
        let (dir, root) = root();
        let err = Executor::builder()
            .plugins_from(builtin_plugins)
            .plugin(wharf_connectors::file::sink_plugin(root))
            .plugin_list(&PluginSettings {
                file_root: Some(dir.path().to_path_buf()),
                test_plugins: false,
            })
            .unwrap_err();
        assert!(
            err.to_string().contains("\"file-sink\" is offered twice"),
            "{err}"
        );
    }

    #[test]
    fn the_builder_reads_the_same_flags_as_wharf_executor() {
        let (dir, root) = root();
        let mut mine = wharf_connectors::file::sink_plugin(root);
        mine.name = "my-sink".to_owned();
        let config = Executor::builder()
            .name("my-executor")
            .plugins_from(builtin_plugins)
            .plugin(mine)
            .config_from([
                "my-executor",
                "--listen",
                "127.0.0.1:0",
                "--control-plane",
                "http://127.0.0.1:7000",
                "--data-dir",
                "/tmp/x",
                "--enable-test-plugins",
                "--file-root",
                &dir.path().display().to_string(),
            ])
            .unwrap();
        let n = names(&config.plugins);
        assert!(n.contains(&"my-sink") && n.contains(&"test-source") && n.contains(&"file-source"));
        let no_root = Executor::builder()
            .plugins_from(builtin_plugins)
            .config_from([
                "my-executor",
                "--listen",
                "127.0.0.1:0",
                "--control-plane",
                "http://127.0.0.1:7000",
                "--data-dir",
                "/tmp/x",
            ])
            .unwrap();
        let n = names(&no_root.plugins);
        assert!(
            !n.contains(&"file-source") && !n.contains(&"file-sink") && n.contains(&"sqlite-audit"),
            "without --file-root no file plugin: {n:?}"
        );
        let err = Executor::builder()
            .name("my-executor")
            .plugins_from(builtin_plugins)
            .config_from(["my-executor", "--listen", "127.0.0.1:0"])
            .err()
            .expect("a missing --control-plane is an error");
        assert!(err.contains("--control-plane"), "{err}");
    }

    #[test]
    fn the_file_plugins_are_offered_only_under_an_existing_file_root() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().display().to_string();
        let base = [
            "wharf-executor",
            "--listen",
            "127.0.0.2:7070",
            "--control-plane",
            "http://127.0.0.1:7000",
            "--data-dir",
            "/tmp/e",
        ];
        let none = Cli::try_parse_from(base)
            .expect("parses")
            .build_with(builtin_plugins)
            .expect("builds");
        assert_eq!(none.file_root, None);
        assert!(!plugin_names(&none).iter().any(|n| n.starts_with("file-")));
        let rooted = Cli::try_parse_from(base.iter().copied().chain(["--file-root", &root]))
            .expect("parses")
            .build_with(builtin_plugins)
            .expect("builds");
        let names = plugin_names(&rooted);
        assert!(names.iter().any(|n| n == "file-source") && names.iter().any(|n| n == "file-sink"));
        let missing = dir.path().join("missing").display().to_string();
        let err = Cli::try_parse_from(base.iter().copied().chain(["--file-root", &missing]))
            .expect("parses")
            .build_with(builtin_plugins)
            .err()
            .expect("a root that does not exist");
        assert!(err.to_string().contains("--file-root"), "{err}");
    }

    fn plugin_names(config: &ExecutorConfig) -> Vec<String> {
        config.plugins.iter().map(|p| p.name.clone()).collect()
    }

    #[test]
    fn test_plugins_are_offered_only_when_enabled_and_the_flag_wins_over_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("ex.toml");
        std::fs::write(
            &file,
            "listen = \"127.0.0.2:7070\"\ncontrol_plane = \"http://127.0.0.1:7000\"\ndata_dir = \"/tmp/e\"\nenable_test_plugins = true\n",
        )
        .expect("write");
        let base = [
            "wharf-executor",
            "--listen",
            "127.0.0.2:7070",
            "--control-plane",
            "http://127.0.0.1:7000",
            "--data-dir",
            "/tmp/e",
        ];
        let default = Cli::try_parse_from(base)
            .expect("parses")
            .build_with(builtin_plugins)
            .expect("builds");
        let names = plugin_names(&default);
        assert!(names.iter().any(|n| n == "sqlite-audit"), "{names:?}");
        assert!(
            !names.iter().any(|n| n.starts_with("test-")),
            "test plugins offered by default: {names:?}"
        );

        let flag = Cli::try_parse_from(base.iter().copied().chain(["--enable-test-plugins"]))
            .expect("parses")
            .build_with(builtin_plugins)
            .expect("builds");
        let names = plugin_names(&flag);
        assert!(
            names.iter().any(|n| n == "test-source") && names.iter().any(|n| n == "test-sink"),
            "{names:?}"
        );

        let path = file.to_str().expect("utf8");
        let from_file = Cli::try_parse_from(["wharf-executor", "--config", path])
            .expect("parses")
            .build_with(builtin_plugins)
            .expect("builds");
        assert!(plugin_names(&from_file).iter().any(|n| n == "test-sink"));

        let flag_off = Cli::try_parse_from([
            "wharf-executor",
            "--config",
            path,
            "--enable-test-plugins=false",
        ])
        .expect("parses")
        .build_with(builtin_plugins)
        .expect("builds");
        assert!(
            !plugin_names(&flag_off)
                .iter()
                .any(|n| n.starts_with("test-")),
            "the flag must win over the file"
        );
    }
}
