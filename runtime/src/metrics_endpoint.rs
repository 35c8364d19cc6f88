//! The observability HTTP listener (`metrics_listener`): Prometheus text on `/metrics`,
//! liveness on `/health/live`, readiness on `/health/ready`.
//!
//! The Prometheus recorder from `metrics-exporter-prometheus` is installed as the process's
//! global `metrics` recorder ([`install_prometheus_recorder`]); its text is served here with
//! axum (already in the tree through tonic) rather than with the exporter's own listener.
//! The caller binds the listener first ([`MetricsServer::bind`]) so a taken port fails
//! start-up with one line naming `metrics_listener`.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Upper bounds (seconds) of the histogram buckets of every `*_seconds` metric: 100 µs to
/// 10 s, enough for queue, commit and request latencies. Between 0.5 and 2.5 s the steps
/// are finer (0.75, 1.5, 2): metadata propagation at a broker failure of 100,000 partitions
/// lands there, against a 1 s target.
pub const LATENCY_BUCKETS_SECONDS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0,
    1.5, 2.0, 2.5, 5.0, 10.0,
];

/// How often histogram windows are drained when nobody scrapes.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Why the endpoint could not start. `Display` is one line naming the config key.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The listener could not be bound (port in use, address not local).
    #[error("metrics_listener {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The Prometheus recorder could not be built or installed.
    #[error("metrics recorder: {0}")]
    Recorder(String),
}

/// Readiness as the process reports it: `/health/ready` answers 200 when `ready`, else 503;
/// the body is `detail` either way (why not ready, or what "ready" rests on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    /// Whether the process can do its job now.
    pub ready: bool,
    /// One line for humans.
    pub detail: String,
}

impl Readiness {
    /// Not ready, because `why`.
    pub fn not_ready(why: impl Into<String>) -> Self {
        Self {
            ready: false,
            detail: why.into(),
        }
    }

    /// Ready; `detail` says on what grounds.
    pub fn ready(detail: impl Into<String>) -> Self {
        Self {
            ready: true,
            detail: detail.into(),
        }
    }
}

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the Prometheus recorder as the global `metrics` recorder (once per process; later
/// calls return the same handle). `*_seconds` histograms get [`LATENCY_BUCKETS_SECONDS`].
///
/// Errors: another global recorder is already installed.
pub fn install_prometheus_recorder() -> Result<PrometheusHandle, EndpointError> {
    if let Some(h) = HANDLE.get() {
        return Ok(h.clone());
    }
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS_SECONDS)
        .map_err(|e| EndpointError::Recorder(e.to_string()))?
        .install_recorder()
        .map_err(|e| EndpointError::Recorder(e.to_string()))?;
    Ok(HANDLE.get_or_init(|| handle).clone())
}

/// A bound, not yet serving, observability listener.
#[derive(Debug)]
pub struct MetricsServer {
    listener: TcpListener,
}

impl MetricsServer {
    /// Binds `addr` (port 0 = any free port).
    ///
    /// Errors: [`EndpointError::Bind`] (e.g. "metrics_listener 0.0.0.0:9100: Address in use").
    pub async fn bind(addr: SocketAddr) -> Result<Self, EndpointError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| EndpointError::Bind { addr, source })?;
        Ok(Self { listener })
    }

    /// The bound address (the real port when bound to port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` resolves. `readiness` is read on every `/health/ready`.
    pub async fn serve(
        self,
        handle: PrometheusHandle,
        readiness: watch::Receiver<Readiness>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let upkeep = {
            let handle = handle.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(UPKEEP_INTERVAL);
                loop {
                    tick.tick().await;
                    handle.run_upkeep();
                }
            })
        };
        let app = Router::new()
            .route("/metrics", get(metrics))
            .route("/health/live", get(live))
            .route("/health/ready", get(ready))
            .with_state(AppState { handle, readiness });
        let served = axum::serve(self.listener, app)
            .with_graceful_shutdown(shutdown)
            .await;
        upkeep.abort();
        served
    }

    /// Spawns [`serve`](Self::serve) on the current runtime until `shutdown`; errors are
    /// logged (the process keeps running without its metrics).
    pub fn spawn(
        self,
        handle: PrometheusHandle,
        readiness: watch::Receiver<Readiness>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> tokio::task::JoinHandle<()> {
        let addr = self.local_addr().ok();
        tokio::spawn(async move {
            if let Err(e) = self.serve(handle, readiness, shutdown).await {
                tracing::error!(?addr, error = %e, "metrics listener stopped");
            }
        })
    }
}

#[derive(Clone)]
struct AppState {
    handle: PrometheusHandle,
    readiness: watch::Receiver<Readiness>,
}

async fn metrics(State(s): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        s.handle.render(),
    )
}

async fn live() -> &'static str {
    "live\n"
}

async fn ready(State(s): State<AppState>) -> impl IntoResponse {
    let r = s.readiness.borrow().clone();
    let code = if r.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, format!("{}\n", r.detail))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut buf = String::new();
        s.read_to_string(&mut buf).await.unwrap();
        let code = buf[9..12].parse().unwrap();
        let body = buf.split_once("\r\n\r\n").unwrap().1.to_string();
        (code, body)
    }

    #[tokio::test]
    async fn serves_metrics_and_health_and_refuses_a_taken_port() {
        let handle = install_prometheus_recorder().unwrap();
        // Second install returns the same recorder instead of failing.
        install_prometheus_recorder().unwrap();
        metrics::counter!("keel_test_requests_total").increment(3);
        metrics::histogram!("keel_test_latency_seconds").record(0.002);
        let server = MetricsServer::bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let addr = server.local_addr().unwrap();
        let (tx, rx) = watch::channel(Readiness::not_ready("no leader yet"));
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = server.spawn(handle, rx, async {
            let _ = stop_rx.await;
        });

        let (code, body) = get(addr, "/metrics").await;
        assert_eq!(code, 200);
        assert!(body.contains("keel_test_requests_total 3"), "{body}");
        assert!(
            body.contains("keel_test_latency_seconds_bucket{le=\"0.0025\"} 1"),
            "{body}"
        );
        assert_eq!(get(addr, "/health/live").await, (200, "live\n".into()));
        assert_eq!(
            get(addr, "/health/ready").await,
            (503, "no leader yet\n".into())
        );
        tx.send_replace(Readiness::ready("leader 1"));
        assert_eq!(get(addr, "/health/ready").await, (200, "leader 1\n".into()));
        assert_eq!(get(addr, "/nope").await.0, 404);

        let e = MetricsServer::bind(addr).await.unwrap_err().to_string();
        assert!(e.starts_with(&format!("metrics_listener {addr}: ")), "{e}");
        stop_tx.send(()).unwrap();
        task.await.unwrap();
    }
}
