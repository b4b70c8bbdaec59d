//! The dev composition: the control plane first (its bound address comes from the
//! [`App`], no file to poll), then the in-process executor registered with it, then the
//! example. At shutdown the executor stops its instances with `connector_deleted = false`
//! first, then the control plane stops.

use std::future::Future;

use tracing::info;
use wharf_control_plane::app::{App, StartError};
use wharf_executor::app::{AppError, ExecutorApp, ExecutorConfig};

use crate::config::Settings;
use crate::example::{self, ExampleError};

/// Directory (inside the data dir) of the in-process executor.
pub const DEV_EXECUTOR_DIR: &str = "dev-executor";
/// Id of the in-process executor.
pub const DEV_EXECUTOR_ID: &str = "dev";

/// Why dev mode stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DevError {
    /// The control plane could not start or failed.
    #[error(transparent)]
    ControlPlane(#[from] StartError),
    /// The in-process executor could not start.
    #[error("dev executor: {0}")]
    Executor(#[from] AppError),
    /// The example database could not be created.
    #[error("{source} (delete {dir} to start over)")]
    Example {
        /// Cause.
        source: ExampleError,
        /// The example's directory.
        dir: String,
    },
    /// The control plane's task panicked or was cancelled.
    #[error("control plane task ended abnormally: {0}")]
    Join(#[from] tokio::task::JoinError),
    /// The asked-for metrics address could not be bound.
    #[error("bind --metrics-listen {addr}: {source}")]
    Metrics {
        /// Address.
        addr: std::net::SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
}

impl DevError {
    /// What the operator can do about it.
    pub fn hint(&self) -> Option<String> {
        match self {
            DevError::ControlPlane(e) => e.hint(),
            DevError::Executor(e) => e.hint(),
            DevError::Metrics { .. } => Some(
                "pick another address with --metrics-listen IP:PORT (port 0 picks a free one) or turn it off with --metrics-listen off".into(),
            ),
            DevError::Example { .. } | DevError::Join(_) => None,
        }
    }
}

/// Exit code of bad settings (as clap's usage errors).
const EXIT_BAD_SETTINGS: u8 = 2;

/// Prints why the settings are unusable; exit code 2.
pub fn bad_settings(e: &dyn std::fmt::Display) -> std::process::ExitCode {
    eprintln!("wharf-dev: {e}\n(see --help and docs/configuration.md)");
    std::process::ExitCode::from(EXIT_BAD_SETTINGS)
}

/// Sets up logging and the span export (`--otlp-endpoint`, service `wharf-dev`), runs dev
/// mode until `shutdown` resolves and flushes the export. Exit code: 0 after a clean
/// stop, 2 when the export cannot be set up, 1 for a failure (printed with a hint).
pub async fn run_to_exit(
    settings: Settings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::process::ExitCode {
    let otlp = wharf::telemetry::Otlp::when_given(
        settings.observability.otlp_endpoint.as_deref(),
        "wharf-dev",
        || settings.config.listen.to_string(),
    );
    let (log_control, export) =
        match wharf::telemetry::init_traced(settings.observability.log_format, otlp.as_ref()) {
            Ok(t) => t.split(),
            Err(e) => return bad_settings(&e),
        };
    let result = run(settings, log_control, shutdown).await;
    export.shutdown().await;
    match result {
        Ok(()) => {
            tracing::info!("control plane stopped");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("wharf-dev: {e}");
            if let Some(hint) = e.hint() {
                eprintln!("hint: {hint}");
            }
            match e {
                DevError::ControlPlane(e) => e.exit_code(),
                _ => std::process::ExitCode::FAILURE,
            }
        }
    }
}

/// Runs dev mode until `shutdown` resolves.
///
/// # Errors
/// [`DevError`].
pub async fn run(
    settings: Settings,
    log_control: wharf::telemetry::FilterReload,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), DevError> {
    let Settings {
        config,
        example,
        enable_test_plugins,
        config_providers,
        observability,
    } = settings;
    let data_dir = config.data_dir.clone();
    let paths = if example {
        let existed = data_dir
            .join(example::EXAMPLE_DIR)
            .join(example::DATABASE_FILE)
            .exists();
        example::say(if existed {
            "wharf: using the existing example database (tables customers, orders)"
        } else {
            "wharf: creating the example SQLite database (tables customers, orders)"
        });
        Some(
            example::create_database(&data_dir).map_err(|source| DevError::Example {
                source,
                dir: data_dir.join(example::EXAMPLE_DIR).display().to_string(),
            })?,
        )
    } else {
        None
    };
    example::say(&format!(
        "wharf: starting dev mode (control plane on the embedded store, in-process executor, embedded record log) in {}",
        data_dir.display()
    ));
    let mut app = App::build(config).await?;
    // `/admin/loggers` on the REST gateway changes this process's filter.
    app.set_log_control(&wharf::telemetry::start_filter(), log_control);
    let addr = app.local_addr();
    let app_rest = app.rest_addr();
    let placeable = app.placeable();
    let mut metrics = None;
    if let Some(want) = observability.metrics_listen {
        match wharf::observability::bind(want).await {
            Ok((listener, bound)) => {
                example::say(&format!(
                    "wharf: metrics (Prometheus) on http://{bound}/metrics, health on http://{bound}/health"
                ));
                // Served once the executor runs too: one page for both.
                metrics = Some(((listener, bound), app.probe()));
            }
            Err(e) if observability.metrics_defaulted => {
                tracing::warn!(addr = %want, error = %e, "metrics listener not started (its default address is taken); pass --metrics-listen IP:PORT to choose another");
            }
            Err(e) => {
                return Err(DevError::Metrics {
                    addr: want,
                    source: e,
                });
            }
        }
    }
    let (stop_cp, cp_stopped) = tokio::sync::oneshot::channel::<()>();
    let mut cp = wharf::task::spawn(
        wharf::task::TaskKind::Service,
        "control plane",
        app.run(async move {
            let _ = cp_stopped.await;
        }),
    );
    let mut exec_config = ExecutorConfig::new(
        std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        format!("http://{addr}"),
        data_dir.join(DEV_EXECUTOR_DIR),
    );
    exec_config.executor_id = Some(DEV_EXECUTOR_ID.to_owned());
    // The file plugins are confined to the data dir (docs/security.md).
    let root = wharf_connectors::file::FileRoot::new(&data_dir).map_err(|e| {
        DevError::Executor(AppError::DataDir {
            path: data_dir.clone(),
            source: std::io::Error::other(e),
        })
    })?;
    exec_config.plugins = wharf_connectors::builtin_plugins(Some(&root));
    exec_config.file_root = Some(root.path().to_path_buf());
    if enable_test_plugins {
        exec_config.plugins.extend(wharf_connectors::test_plugins());
    }
    exec_config.config_providers = config_providers;
    let executor = ExecutorApp::start(exec_config).await?;
    info!(executor = DEV_EXECUTOR_ID, addr = %executor.local_addr(), "dev executor started in process");
    if let Some((bound, cp_probe)) = metrics {
        wharf::observability::spawn_serve(
            wharf::task::TaskKind::Detached,
            bound,
            vec![cp_probe, executor.probe()],
            std::future::pending(),
        );
    }

    // The example is set up under the signal too: Ctrl-C while it waits stops at once.
    let shutdown = async move {
        let mut shutdown = std::pin::pin!(shutdown);
        if let Some(paths) = &paths {
            example::say(&format!(
                "wharf: creating connectors {} (sqlite-audit) -> {} (file-sink)",
                example::SOURCE_NAME,
                example::SINK_NAME
            ));
            tokio::select! {
                () = &mut shutdown => return,
                created = example::create_connectors(addr, paths, || placeable(DEV_EXECUTOR_ID)) => if let Err(e) = created {
                    eprintln!("wharf-dev: {e}");
                    eprintln!("hint: dev mode keeps running; see its log above");
                },
            }
        }
        example::print_next_steps(addr, app_rest, &data_dir, paths.as_ref());
        shutdown.await;
    };
    let ended_early = tokio::select! {
        result = &mut cp => Some(result),
        () = shutdown => None,
    };
    executor.shutdown().await;
    if let Some(result) = ended_early {
        return Ok(result??);
    }
    let _ = stop_cp.send(());
    Ok(cp.await??)
}
