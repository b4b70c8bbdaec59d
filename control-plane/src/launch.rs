//! What `wharf-control-plane` does once its settings are assembled: the logging and span
//! export, the [`App`], its metrics listener, the run until a shutdown signal, and the
//! exit code; and the `token` subcommand. The binary's `main` only parses and dispatches.

use std::process::ExitCode;

use wharf::config::flags::Observability;

use crate::app::{App, Config, StoreOptions};
use crate::auth::{Role, token};

/// The binary's name, as its messages start.
const NAME: &str = "wharf-control-plane";

pub use crate::app::EXIT_BAD_SETTINGS;

/// Everything `wharf-control-plane` runs with.
#[derive(Debug)]
pub struct Settings {
    /// The control plane's settings.
    pub config: Config,
    /// The state store backend.
    pub store: StoreOptions,
    /// Metrics listener, log format and span export.
    pub observability: Observability,
}

/// Runs the control plane with `settings` until SIGTERM or Ctrl-C. Exit code: 0 after a
/// clean stop, 2 when the span export cannot be set up, 1 for any other failure (printed
/// on stderr with a hint when there is one).
pub async fn run(settings: Settings) -> ExitCode {
    let Settings {
        config,
        store,
        observability,
    } = settings;
    // Bound first, so that the span export names this replica by the address it serves
    // on: with `--listen 127.0.0.1:0` the flag names no port, and every replica started
    // so would have the same name.
    let admin = match crate::app::bind_admin(config.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("{NAME}: {e}");
            if let Some(hint) = e.hint() {
                eprintln!("hint: {hint}");
            }
            return ExitCode::FAILURE;
        }
    };
    let bound = admin.local_addr().unwrap_or(config.listen);
    // After the settings (they name the format); their errors go to stderr as text.
    let otlp =
        wharf::telemetry::Otlp::when_given(observability.otlp_endpoint.as_deref(), NAME, || {
            instance_id(&store, bound)
        });
    let telemetry = match wharf::telemetry::init_traced(observability.log_format, otlp.as_ref()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{NAME}: {e}\n(see --help and docs/configuration.md)");
            return ExitCode::from(EXIT_BAD_SETTINGS);
        }
    };
    let (log_control, export) = telemetry.split();
    // Bound before the app, so that a taken port fails the start before the control plane
    // announces itself and writes `listen.addr`.
    let metrics = match observability.metrics_listen {
        None => None,
        Some(addr) => match wharf::observability::bind(addr).await {
            Ok(bound) => Some(bound),
            Err(e) => {
                eprintln!("{NAME}: cannot listen on {addr} (--metrics-listen): {e}");
                eprintln!(
                    "hint: pick another --metrics-listen than {addr} (port 0 picks a free one), or turn it off with --metrics-listen off"
                );
                return ExitCode::FAILURE;
            }
        },
    };
    let result = match App::build_on(config, store, Some(admin)).await {
        Ok(mut app) => {
            app.set_log_control(&wharf::telemetry::start_filter(), log_control);
            if let Some(bound) = metrics {
                wharf::observability::spawn_serve(
                    wharf::task::TaskKind::Detached,
                    bound,
                    vec![app.probe()],
                    std::future::pending(),
                );
            }
            app.run(wharf::server::shutdown_signal()).await
        }
        Err(e) => Err(e),
    };
    export.shutdown().await;
    match result {
        Ok(()) => {
            tracing::info!("control plane stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{NAME}: {e}");
            if let Some(hint) = e.hint() {
                eprintln!("hint: {hint}");
            }
            e.exit_code()
        }
    }
}

/// This replica's `service.instance.id`: its `--advertise` URL when it has one (what the
/// other replicas and executors call it), else the address its admin API is bound to.
/// `OTEL_RESOURCE_ATTRIBUTES=service.instance.id=...` overrides either.
fn instance_id(store: &StoreOptions, bound: std::net::SocketAddr) -> String {
    match store {
        StoreOptions::Etcd {
            advertise: Some(url),
            ..
        } => url.clone(),
        StoreOptions::Etcd { .. } | StoreOptions::Redb => bound.to_string(),
    }
}

/// `token --name NAME --role ROLE`: prints the token file line (name, role, SHA-256 of
/// the token) on stdout and the token itself on stderr, shown only now. Exit code 2 for
/// a name the token file cannot hold.
pub fn mint(name: &str, role: Role) -> ExitCode {
    if !token::valid_name(name) {
        eprintln!("{NAME} token: invalid --name {name:?}: use 1 to 128 of A-Z a-z 0-9 . _ @ -");
        return ExitCode::from(EXIT_BAD_SETTINGS);
    }
    let t = token::mint_token();
    println!("{}", token::file_line(name, role, &t));
    eprintln!(
        "token for {name} (role {role}), shown only now; the line on stdout holds only its hash:\n{t}"
    );
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn etcd(advertise: Option<&str>) -> StoreOptions {
        StoreOptions::Etcd {
            etcd: Default::default(),
            election_ttl_secs: 10,
            advertise: advertise.map(str::to_owned),
        }
    }

    #[test]
    fn a_replica_with_an_advertised_url_is_named_by_it() {
        let bound = "0.0.0.0:7000".parse().expect("addr");
        assert_eq!(
            instance_id(&etcd(Some("https://cp-2.example:7000")), bound),
            "https://cp-2.example:7000"
        );
    }

    #[test]
    fn a_replica_without_one_is_named_by_its_bound_address() {
        let bound = "127.0.0.1:38851".parse().expect("addr");
        assert_eq!(instance_id(&etcd(None), bound), "127.0.0.1:38851");
    }

    #[test]
    fn a_single_control_plane_is_named_by_its_bound_address() {
        let bound = "127.0.0.1:7000".parse().expect("addr");
        assert_eq!(instance_id(&StoreOptions::Redb, bound), "127.0.0.1:7000");
    }
}
