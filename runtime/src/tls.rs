//! TLS on every gRPC connection (issue #23): the server side of the controller's and broker's
//! listeners and the client side of every connection they and Keel's clients open, with
//! rustls (ring provider; no OpenSSL), PEM files, optional or required client certificates,
//! and certificates re-read without a restart.
//!
//! What it owns:
//! - [`TlsFiles`]: the PEM files (Kafka's `ssl.keystore.certificate.chain`,
//!   `ssl.keystore.key`, `ssl.truststore.certificates`) and [`ClientAuth`] (Kafka's
//!   `ssl.client.auth`);
//! - [`TlsContext`]: the rustls server and client configurations built from them, swapped
//!   as a whole by [`TlsContext::reload`] (SIGHUP or a changed file, [`TlsContext::spawn_reloader`]);
//!   a connection uses the configuration current when it was opened, so a reload affects new
//!   connections only (as Kafka's dynamic `ssl.keystore.*` update, KIP-226);
//! - [`incoming`]: the accepted connections of a gRPC listener, plaintext or after a TLS
//!   handshake, each carrying a [`PeerInfo`] (remote address, client certificate chain);
//! - [`Dialer`]: how a node or client opens a gRPC channel to `host:port`, over TLS when a
//!   context is set (the server name checked is the host as given: a DNS name or an IP).
//!
//! Invariants: a listener with a context never serves a byte of gRPC before a completed
//! handshake (a plaintext client fails its handshake and is closed); a failed reload keeps
//! the previous configuration (and says why once per change of the files); a handshake is
//! bounded in time ([`HANDSHAKE_TIMEOUT`]) and in number ([`MAX_HANDSHAKES`]).

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::{Connected, TcpConnectInfo};
use tonic::transport::{Channel, Endpoint};

/// Longest TLS handshake a listener waits for before closing the connection.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes a listener runs at once; further accepted connections wait their turn.
pub const MAX_HANDSHAKES: usize = 256;
/// How often [`TlsContext::spawn_reloader`] looks at the files' modification times.
pub const RELOAD_POLL: Duration = Duration::from_secs(5);
/// Accepted connections queued between the accept loop and the gRPC server.
const ACCEPT_QUEUE: usize = 64;
/// Failed handshakes are logged at most once per this interval (with a count of the others).
const HANDSHAKE_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Rate limit of the failed-handshake log lines of one listener.
#[derive(Debug, Default)]
struct HandshakeLog {
    /// When a line was last written, and failures not written since.
    state: std::sync::Mutex<(Option<std::time::Instant>, u64)>,
}

impl HandshakeLog {
    /// Logs a failed handshake from `peer` at INFO (Kafka logs failed SSL handshakes at INFO
    /// too: a client with the wrong settings, not a fault of the node), at most once per
    /// [`HANDSHAKE_LOG_INTERVAL`].
    fn failed(&self, peer: SocketAddr, cause: &str) {
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = std::time::Instant::now();
        if g.0
            .is_some_and(|t| now.duration_since(t) < HANDSHAKE_LOG_INTERVAL)
        {
            g.1 += 1;
            return;
        }
        let others = std::mem::take(&mut g.1);
        g.0 = Some(now);
        drop(g);
        // A non-TLS first record is a plaintext client; anything else is a TLS client whose
        // certificate or CA does not match.
        let plaintext = cause.contains("InvalidContentType") || cause.contains("corrupt message");
        tracing::info!(
            %peer,
            others_since_last_line = others,
            "TLS handshake failed, connection closed: {cause}{}",
            if plaintext {
                " (a plaintext client: this listener serves TLS only)"
            } else {
                ""
            }
        );
    }
}

/// Kafka's `ssl.client.auth`: whether a listener asks clients for a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientAuth {
    /// No client certificate is asked for (Kafka's default).
    #[default]
    None,
    /// A client may present one; if it does, it must chain to the trusted CA.
    Requested,
    /// Every client must present one chaining to the trusted CA.
    Required,
}

impl ClientAuth {
    /// Parses `none`, `requested` or `required` (Kafka's values).
    pub fn parse(s: &str) -> Option<ClientAuth> {
        match s {
            "none" => Some(ClientAuth::None),
            "requested" => Some(ClientAuth::Requested),
            "required" => Some(ClientAuth::Required),
            _ => None,
        }
    }
}

/// The PEM files of a TLS context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// CA certificates (one or more PEM `CERTIFICATE` blocks) that peers' certificates must
    /// chain to (`tls_ca_file`, Kafka's `ssl.truststore.certificates`).
    pub ca: PathBuf,
    /// This side's certificate chain (leaf first, `tls_cert_file`) and its private key
    /// (PKCS#8, PKCS#1 or SEC1 PEM, `tls_key_file`). Required to serve; optional for a
    /// client (then it presents no certificate).
    pub identity: Option<(PathBuf, PathBuf)>,
}

/// Why a TLS context could not be built. `Display` is one line naming the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no usable PEM.
    #[error("{key} {}: {detail}", path.display())]
    File {
        /// The configuration key naming the file (`tls_ca_file`, ...).
        key: &'static str,
        /// The file.
        path: PathBuf,
        /// What was wrong.
        detail: String,
    },
    /// rustls refused the combination (a key that does not match the certificate, ...).
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// The rustls configurations of one node or client, reloadable. Cheap to share (`Arc`).
#[derive(Debug)]
pub struct TlsContext {
    files: TlsFiles,
    client_auth: ClientAuth,
    loaded: RwLock<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    /// `None` without an identity (a client-only context).
    server: Option<Arc<ServerConfig>>,
    client: Arc<ClientConfig>,
    /// Modification times and sizes of the files when read.
    stamps: Vec<Option<(SystemTime, u64)>>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(key: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError::File {
        key,
        path: path.to_owned(),
        detail: e.to_string(),
    })
}

fn certs(key: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(key, path)?;
    let bad = |detail: String| TlsError::File {
        key,
        path: path.to_owned(),
        detail,
    };
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| bad(format!("not PEM certificates ({e})")))?;
    if certs.is_empty() {
        return Err(bad("holds no PEM CERTIFICATE block".into()));
    }
    Ok(certs)
}

fn private_key(key: &'static str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read(key, path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| TlsError::File {
        key,
        path: path.to_owned(),
        detail: format!("no PEM private key (PKCS#8, PKCS#1 or SEC1) ({e})"),
    })
}

fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// A node's TLS settings, validated but not yet read (`tls_cert_file`, `tls_key_file`,
/// `tls_ca_file`, `ssl_client_auth`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeTls {
    /// The files; `identity` is always set.
    pub files: TlsFiles,
    /// `ssl_client_auth`.
    pub client_auth: ClientAuth,
}

impl NodeTls {
    /// From the settings' values: `None` when none of the three files is set (plaintext).
    ///
    /// Errors: `(key, reason)` for a configuration error naming the key: only some of the
    /// three files set, or an `ssl_client_auth` other than none, requested, required.
    pub fn from_settings(
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
        ca: Option<PathBuf>,
        client_auth: &str,
    ) -> Result<Option<NodeTls>, (&'static str, String)> {
        let client_auth = ClientAuth::parse(client_auth).ok_or_else(|| {
            (
                "ssl_client_auth",
                format!("{client_auth:?} is not none, requested or required"),
            )
        })?;
        match (cert, key, ca) {
            (None, None, None) => Ok(None),
            (Some(cert), Some(key), Some(ca)) => Ok(Some(NodeTls {
                files: TlsFiles {
                    ca,
                    identity: Some((cert, key)),
                },
                client_auth,
            })),
            (cert, key, ca) => {
                let keys = [
                    ("tls_cert_file", cert.is_none()),
                    ("tls_key_file", key.is_none()),
                    ("tls_ca_file", ca.is_none()),
                ];
                let missing: Vec<&'static str> =
                    keys.iter().filter(|(_, m)| *m).map(|(k, _)| *k).collect();
                let set: Vec<&'static str> =
                    keys.iter().filter(|(_, m)| !*m).map(|(k, _)| *k).collect();
                Err((
                    missing[0],
                    format!(
                        "unset, but {} is set: TLS needs tls_cert_file, tls_key_file and \
                         tls_ca_file together",
                        set.join(" and ")
                    ),
                ))
            }
        }
    }

    /// [`Self::from_settings`] of a binary's validated settings.
    ///
    /// Errors: [`crate::settings::ConfigError::Invalid`] naming the key.
    pub fn of(
        s: &crate::settings::Settings,
    ) -> Result<Option<NodeTls>, crate::settings::ConfigError> {
        Self::from_settings(
            s.get("tls_cert_file"),
            s.get("tls_key_file"),
            s.get("tls_ca_file"),
            &s.require::<String>("ssl_client_auth"),
        )
        .map_err(|(key, reason)| crate::settings::ConfigError::Invalid { key, reason })
    }

    /// Reads the files ([`TlsContext::load`]).
    ///
    /// Errors: see [`TlsContext::load`].
    pub fn load(&self) -> Result<Arc<TlsContext>, TlsError> {
        TlsContext::load(self.files.clone(), self.client_auth)
    }
}

/// A node's TLS at start: the context of `tls` with its reloader running
/// ([`TlsContext::spawn_reloader`]), `None` for plaintext. Call inside the runtime.
///
/// Errors: see [`TlsContext::load`].
pub fn start(tls: Option<&NodeTls>) -> Result<Option<Arc<TlsContext>>, TlsError> {
    let Some(t) = tls else {
        return Ok(None);
    };
    let ctx = t.load()?;
    ctx.spawn_reloader();
    Ok(Some(ctx))
}

impl TlsContext {
    /// Reads the files and builds the configurations.
    ///
    /// Errors: a file missing or without PEM ([`TlsError::File`], naming its key), a key that
    /// does not match its certificate or a CA file rustls refuses ([`TlsError::Config`]).
    pub fn load(files: TlsFiles, client_auth: ClientAuth) -> Result<Arc<TlsContext>, TlsError> {
        let loaded = Self::build(&files, client_auth)?;
        Ok(Arc::new(TlsContext {
            files,
            client_auth,
            loaded: RwLock::new(loaded),
        }))
    }

    fn stamps(files: &TlsFiles) -> Vec<Option<(SystemTime, u64)>> {
        let mut paths = vec![files.ca.as_path()];
        if let Some((c, k)) = &files.identity {
            paths.extend([c.as_path(), k.as_path()]);
        }
        paths.into_iter().map(stamp).collect()
    }

    fn build(files: &TlsFiles, client_auth: ClientAuth) -> Result<Loaded, TlsError> {
        let stamps = Self::stamps(files);
        let mut roots = RootCertStore::empty();
        for c in certs("tls_ca_file", &files.ca)? {
            roots.add(c).map_err(|e| TlsError::File {
                key: "tls_ca_file",
                path: files.ca.clone(),
                detail: format!("not a usable CA certificate ({e})"),
            })?;
        }
        let roots = Arc::new(roots);
        let identity = match &files.identity {
            Some((cert, key)) => Some((
                certs("tls_cert_file", cert)?,
                private_key("tls_key_file", key)?,
            )),
            None => None,
        };
        let config_err = |e: rustls::Error| TlsError::Config(e.to_string());
        // A key that does not belong to its certificate names both files.
        let identity_err = |e: rustls::Error| match &files.identity {
            Some((cert, key)) => TlsError::Config(format!(
                "tls_cert_file {} and tls_key_file {}: {e} (the key does not belong to the \
                 certificate?)",
                cert.display(),
                key.display()
            )),
            None => TlsError::Config(e.to_string()),
        };
        let client_builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(config_err)?
            .with_root_certificates(roots.clone());
        let mut client = match &identity {
            Some((chain, key)) => client_builder
                .with_client_auth_cert(chain.clone(), key.clone_key())
                .map_err(identity_err)?,
            None => client_builder.with_no_client_auth(),
        };
        client.alpn_protocols = vec![b"h2".to_vec()];
        let server = match identity {
            None => None,
            Some((chain, key)) => {
                let builder = ServerConfig::builder_with_provider(provider())
                    .with_safe_default_protocol_versions()
                    .map_err(config_err)?;
                let builder = match client_auth {
                    ClientAuth::None => builder.with_no_client_auth(),
                    ClientAuth::Requested | ClientAuth::Required => {
                        let verifier =
                            WebPkiClientVerifier::builder_with_provider(roots, provider());
                        let verifier = if client_auth == ClientAuth::Requested {
                            verifier.allow_unauthenticated()
                        } else {
                            verifier
                        };
                        builder.with_client_cert_verifier(
                            verifier
                                .build()
                                .map_err(|e| TlsError::Config(e.to_string()))?,
                        )
                    }
                };
                let mut server = builder.with_single_cert(chain, key).map_err(identity_err)?;
                server.alpn_protocols = vec![b"h2".to_vec()];
                Some(Arc::new(server))
            }
        };
        Ok(Loaded {
            server,
            client: Arc::new(client),
            stamps,
        })
    }

    /// Re-reads the files and swaps the configurations in (new connections use them).
    ///
    /// Errors: as [`Self::load`]; the previous configuration then stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let loaded = Self::build(&self.files, self.client_auth)?;
        *self.loaded.write().unwrap_or_else(|p| p.into_inner()) = loaded;
        Ok(())
    }

    /// Whether a file changed (modification time or size) since it was last read.
    pub fn files_changed(&self) -> bool {
        let now = Self::stamps(&self.files);
        self.loaded.read().unwrap_or_else(|p| p.into_inner()).stamps != now
    }

    /// The server configuration, `None` for a context without an identity.
    pub fn server_config(&self) -> Option<Arc<ServerConfig>> {
        self.loaded
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .server
            .clone()
    }

    /// The client configuration.
    pub fn client_config(&self) -> Arc<ClientConfig> {
        self.loaded
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .client
            .clone()
    }

    /// The files it reads.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// Reloads on SIGHUP and whenever a file's modification time or size changes (looked at
    /// every [`RELOAD_POLL`]), logging each reload at INFO and a failed one at WARN (once per
    /// change of the files). Runs until the runtime stops.
    pub fn spawn_reloader(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let ctx = self.clone();
        tokio::spawn(async move {
            let mut hangup =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
            let mut tick = tokio::time::interval(RELOAD_POLL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            // The stamps of a failed reload, so it is reported once.
            let mut failed_at: Option<Vec<Option<(SystemTime, u64)>>> = None;
            loop {
                let signalled = tokio::select! {
                    _ = tick.tick() => false,
                    Some(()) = async {
                        match hangup.as_mut() {
                            Some(h) => h.recv().await,
                            None => std::future::pending().await,
                        }
                    } => true,
                };
                let stamps = Self::stamps(&ctx.files);
                if !signalled && (!ctx.files_changed() || failed_at.as_ref() == Some(&stamps)) {
                    continue;
                }
                match ctx.reload() {
                    Ok(()) => {
                        failed_at = None;
                        tracing::info!(
                            cause = if signalled {
                                "SIGHUP"
                            } else {
                                "a file changed"
                            },
                            "TLS certificates reloaded; new connections use them"
                        );
                    }
                    Err(e) => {
                        failed_at = Some(stamps);
                        tracing::warn!(
                            "TLS certificates not reloaded, the previous ones stay: {e}"
                        );
                    }
                }
            }
        })
    }
}

/// What a gRPC handler knows of its peer (the `ConnectInfo` of [`ServerIo`]; in
/// `request.extensions()`; [`peer_info`] reads it).
#[derive(Debug, Clone)]
pub struct PeerInfo {
    /// The peer's address, when known.
    pub remote_addr: Option<SocketAddr>,
    /// The certificate chain the client presented (leaf first); `None` over plaintext or
    /// without a client certificate.
    pub peer_certs: Option<Arc<Vec<CertificateDer<'static>>>>,
}

/// The [`PeerInfo`] of a request served from [`incoming`].
pub fn peer_info<T>(request: &tonic::Request<T>) -> Option<&PeerInfo> {
    request.extensions().get::<PeerInfo>()
}

/// One accepted connection: plaintext, or TLS after a completed handshake.
#[derive(Debug)]
pub enum ServerIo {
    /// A plaintext connection (a listener without TLS).
    Plain(TcpStream),
    /// A TLS connection.
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl Connected for ServerIo {
    type ConnectInfo = PeerInfo;

    fn connect_info(&self) -> PeerInfo {
        match self {
            ServerIo::Plain(s) => PeerInfo {
                remote_addr: tcp_info(s).remote_addr,
                peer_certs: None,
            },
            ServerIo::Tls(s) => {
                let (tcp, session) = s.get_ref();
                PeerInfo {
                    remote_addr: tcp_info(tcp).remote_addr,
                    peer_certs: session
                        .peer_certificates()
                        .map(|c| Arc::new(c.iter().map(|c| c.clone().into_owned()).collect())),
                }
            }
        }
    }
}

fn tcp_info(s: &TcpStream) -> TcpConnectInfo {
    s.connect_info()
}

impl AsyncRead for ServerIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ServerIo::Plain(s) => Pin::new(s).poll_read(cx, buf),
            ServerIo::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ServerIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ServerIo::Plain(s) => Pin::new(s).poll_write(cx, buf),
            ServerIo::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ServerIo::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            ServerIo::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            ServerIo::Plain(s) => s.is_write_vectored(),
            ServerIo::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ServerIo::Plain(s) => Pin::new(s).poll_flush(cx),
            ServerIo::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ServerIo::Plain(s) => Pin::new(s).poll_shutdown(cx),
            ServerIo::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The connections `listener` accepts, for `tonic`'s `serve_with_incoming*`: TCP_NODELAY set
/// on each (small replies must not wait for delayed ACKs, ~40 ms), and with `tls` a completed
/// handshake first (a failed or slow one, [`HANDSHAKE_TIMEOUT`], closes the connection and is
/// logged at INFO with the peer and the cause, at most once per 10 s with a count). Accept errors (out of file descriptors)
/// are logged at WARN and retried after 100 ms; the stream never yields an error. The accept
/// task ends when the stream is dropped.
pub fn incoming(
    listener: TcpListener,
    tls: Option<Arc<TlsContext>>,
) -> ReceiverStream<io::Result<ServerIo>> {
    let (tx, rx) = mpsc::channel(ACCEPT_QUEUE);
    let handshakes = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
    let log = Arc::new(HandshakeLog::default());
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                () = tx.closed() => return,
            };
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("accepting a connection: {e}; retrying in 100 ms");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let server = tls.as_ref().and_then(|t| t.server_config());
            let Some(server) = server else {
                if tx.send(Ok(ServerIo::Plain(stream))).await.is_err() {
                    return;
                }
                continue;
            };
            let Ok(permit) = handshakes.clone().acquire_owned().await else {
                return;
            };
            let tx = tx.clone();
            let log = log.clone();
            tokio::spawn(async move {
                let acceptor = tokio_rustls::TlsAcceptor::from(server);
                let done = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await;
                drop(permit);
                match done {
                    Ok(Ok(s)) => {
                        let _ = tx.send(Ok(ServerIo::Tls(Box::new(s)))).await;
                    }
                    Ok(Err(e)) => log.failed(peer, &e.to_string()),
                    Err(_) => log.failed(peer, "no handshake within 10 s"),
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

/// How channels are opened: plaintext, or TLS with a context's client configuration; and
/// the session token (#23, SASL/SCRAM for gRPC) clients built on its channels send.
#[derive(Debug, Clone, Default)]
pub struct Dialer {
    tls: Option<Arc<TlsContext>>,
    bearer: Option<Arc<str>>,
}

/// Why [`Dialer::endpoint`] refused an address.
#[derive(Debug, thiserror::Error)]
#[error("{addr:?} is not a host:port address ({detail})")]
pub struct BadAddress {
    /// The address as given.
    pub addr: String,
    /// The parser's complaint.
    pub detail: String,
}

impl Dialer {
    /// A dialer over plaintext (`tls` None) or TLS.
    pub fn new(tls: Option<Arc<TlsContext>>) -> Dialer {
        Dialer { tls, bearer: None }
    }

    /// This dialer with a session token that clients send as `authorization: Bearer
    /// <token>` on every RPC (the controller's `ScramAuthenticate` gives it).
    pub fn with_bearer(mut self, token: impl Into<Arc<str>>) -> Dialer {
        self.bearer = Some(token.into());
        self
    }

    /// The session token, if any.
    pub fn bearer(&self) -> Option<&str> {
        self.bearer.as_deref()
    }

    /// Whether channels use TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The endpoint of `addr` (`host:port`), to set timeouts on before
    /// [`Self::connect_lazy`] or [`Self::connect`].
    ///
    /// Errors: `addr` is not a valid `host:port` authority.
    pub fn endpoint(addr: &str) -> Result<Endpoint, BadAddress> {
        Endpoint::from_shared(format!("http://{addr}")).map_err(|e| BadAddress {
            addr: addr.to_string(),
            detail: e.to_string(),
        })
    }

    /// [`Self::endpoint`] with the HTTP/2 settings of BrokerService connections: TCP_NODELAY
    /// (small replies otherwise wait for delayed ACKs), the flow-control windows
    /// [`keel_proto::limits::BROKER_STREAM_WINDOW_BYTES`] and
    /// [`keel_proto::limits::BROKER_CONNECTION_WINDOW_BYTES`], and frames up to
    /// [`keel_proto::limits::BROKER_MAX_FRAME_BYTES`] (the broker's server takes the same).
    ///
    /// Errors: `addr` is not a valid `host:port` authority.
    pub fn broker_endpoint(addr: &str) -> Result<Endpoint, BadAddress> {
        use keel_proto::limits::{
            BROKER_CONNECTION_WINDOW_BYTES, BROKER_MAX_FRAME_BYTES, BROKER_STREAM_WINDOW_BYTES,
        };
        Ok(Self::endpoint(addr)?
            .tcp_nodelay(true)
            .initial_stream_window_size(BROKER_STREAM_WINDOW_BYTES)
            .initial_connection_window_size(BROKER_CONNECTION_WINDOW_BYTES)
            .max_frame_size(BROKER_MAX_FRAME_BYTES))
    }

    /// A channel that connects on first use (and reconnects after a failure), through TLS
    /// when this dialer has a context. The endpoint's connect timeout bounds the TCP connect
    /// and the handshake together.
    pub fn connect_lazy(&self, endpoint: &Endpoint) -> Channel {
        match &self.tls {
            None => endpoint.connect_lazy(),
            Some(tls) => endpoint.connect_with_connector_lazy(TlsConnector { tls: tls.clone() }),
        }
    }

    /// Connects now.
    ///
    /// Errors: the connection or the handshake failed (the error's sources name the cause,
    /// e.g. an unknown CA or a certificate not valid for the host).
    pub async fn connect(&self, endpoint: &Endpoint) -> Result<Channel, tonic::transport::Error> {
        match &self.tls {
            None => endpoint.connect().await,
            Some(tls) => {
                endpoint
                    .connect_with_connector(TlsConnector { tls: tls.clone() })
                    .await
            }
        }
    }
}

/// tonic's connector for TLS channels: TCP (with TCP_NODELAY) then a rustls handshake with
/// the context's client configuration current at that moment, checking the URI's host.
#[derive(Debug, Clone)]
struct TlsConnector {
    tls: Arc<TlsContext>,
}

/// How long a new TLS channel waits for the server's first bytes (its HTTP/2 SETTINGS; an
/// h2 server sends them before it reads anything) after the handshake. In TLS 1.3 the
/// server checks the client's certificate after the client has finished its handshake, so a
/// refusal (an alert such as `UnknownCA` or `CertificateRequired`) arrives only with the
/// first read: waiting for it here makes the connect fail with that cause instead of a
/// later RPC failing with "connection closed". A server that sends nothing within this time
/// is used as it is.
const FIRST_BYTES_WAIT: Duration = Duration::from_secs(5);

type ClientIo = hyper_util::rt::TokioIo<Prefixed<tokio_rustls::client::TlsStream<TcpStream>>>;
type ConnectFuture = Pin<Box<dyn std::future::Future<Output = io::Result<ClientIo>> + Send>>;

/// A stream whose first reads return `prefix` (bytes already read from `inner`).
#[derive(Debug)]
struct Prefixed<T> {
    prefix: Vec<u8>,
    /// Bytes of `prefix` already returned. Invariant: `pos <= prefix.len()`.
    pos: usize,
    inner: T,
}

impl<T: AsyncRead + Unpin> AsyncRead for Prefixed<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        debug_assert!(this.pos <= this.prefix.len());
        if this.pos < this.prefix.len() {
            let n = (this.prefix.len() - this.pos).min(buf.remaining());
            buf.put_slice(&this.prefix[this.pos..this.pos + n]);
            this.pos += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Prefixed<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl tower_service::Service<tonic::codegen::http::Uri> for TlsConnector {
    type Response = ClientIo;
    type Error = io::Error;
    type Future = ConnectFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: tonic::codegen::http::Uri) -> Self::Future {
        let config = self.tls.client_config();
        Box::pin(async move {
            let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
            let host = uri
                .host()
                .ok_or_else(|| invalid(format!("{uri}: no host")))?
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            let port = uri
                .port_u16()
                .ok_or_else(|| invalid(format!("{uri}: no port")))?;
            let name = ServerName::try_from(host.clone())
                .map_err(|e| invalid(format!("{host}: not a TLS server name ({e})")))?;
            let tcp = TcpStream::connect((host.as_str(), port)).await?;
            let _ = tcp.set_nodelay(true);
            let mut tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await?;
            let mut first = vec![0u8; 16 * 1024];
            let n = match tokio::time::timeout(
                FIRST_BYTES_WAIT,
                tokio::io::AsyncReadExt::read(&mut tls, &mut first),
            )
            .await
            {
                Ok(Ok(0)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "the server closed the connection right after the TLS handshake \
                         (it may have refused this client's certificate)",
                    ));
                }
                Ok(Ok(n)) => n,
                Ok(Err(e)) => return Err(e),
                Err(_) => 0,
            };
            first.truncate(n);
            Ok(hyper_util::rt::TokioIo::new(Prefixed {
                prefix: first,
                pos: 0,
                inner: tls,
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

    /// A CA and a `localhost` leaf signed by it, as PEM (cert, key).
    struct Pki {
        ca_params: CertificateParams,
        ca_key: KeyPair,
        ca_pem: String,
    }

    impl Pki {
        fn new(name: &str) -> Pki {
            let mut p = CertificateParams::default();
            p.distinguished_name.push(DnType::CommonName, name);
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            let key = KeyPair::generate().unwrap();
            let ca_pem = p.self_signed(&key).unwrap().pem();
            Pki {
                ca_params: p,
                ca_key: key,
                ca_pem,
            }
        }

        fn leaf(&self, cn: &str) -> (String, String) {
            let mut p = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
            p.distinguished_name.push(DnType::CommonName, cn);
            let key = KeyPair::generate().unwrap();
            let issuer = Issuer::from_params(&self.ca_params, &self.ca_key);
            (
                p.signed_by(&key, &issuer).unwrap().pem(),
                key.serialize_pem(),
            )
        }
    }

    fn files(dir: &Path) -> TlsFiles {
        TlsFiles {
            ca: dir.join("ca.pem"),
            identity: Some((dir.join("node.pem"), dir.join("node-key.pem"))),
        }
    }

    fn write_node(dir: &Path, pki: &Pki, cn: &str) -> String {
        let (cert, key) = pki.leaf(cn);
        std::fs::write(dir.join("ca.pem"), &pki.ca_pem).unwrap();
        std::fs::write(dir.join("node.pem"), &cert).unwrap();
        std::fs::write(dir.join("node-key.pem"), key).unwrap();
        cert
    }

    /// Handshakes `server` with `client` over an in-memory pipe; the server's certificate
    /// as the client saw it (PEM body compared by DER), or the client's error.
    async fn handshake(
        server: &TlsContext,
        client: &TlsContext,
    ) -> Result<CertificateDer<'static>, String> {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let acceptor = tokio_rustls::TlsAcceptor::from(server.server_config().unwrap());
        let s = tokio::spawn(async move { acceptor.accept(a).await.map(|_| ()) });
        let connector = tokio_rustls::TlsConnector::from(client.client_config());
        let name = ServerName::try_from("localhost").unwrap();
        let c = connector
            .connect(name, b)
            .await
            .map_err(|e| e.to_string())?;
        let cert = c.get_ref().1.peer_certificates().unwrap()[0].clone();
        s.await.unwrap().map_err(|e| e.to_string())?;
        Ok(cert.into_owned())
    }

    fn der(pem: &str) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
    }

    #[tokio::test]
    async fn a_reload_serves_the_new_certificate_and_a_bad_file_keeps_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::new("test CA");
        let first = write_node(dir.path(), &pki, "node-a");
        let ctx = TlsContext::load(files(dir.path()), ClientAuth::Required).unwrap();
        assert_eq!(handshake(&ctx, &ctx).await.unwrap(), der(&first));
        assert!(!ctx.files_changed());

        // New certificate and key in the same files: served after the reload only.
        std::thread::sleep(Duration::from_millis(20));
        let second = write_node(dir.path(), &pki, "node-b");
        assert!(ctx.files_changed());
        assert_eq!(handshake(&ctx, &ctx).await.unwrap(), der(&first));
        ctx.reload().unwrap();
        assert_eq!(handshake(&ctx, &ctx).await.unwrap(), der(&second));

        // A broken file: the reload fails naming it, the previous configuration stays.
        std::fs::write(dir.path().join("node.pem"), "not pem").unwrap();
        let e = ctx.reload().unwrap_err().to_string();
        assert!(
            e.starts_with("tls_cert_file ") && e.contains("node.pem"),
            "{e}"
        );
        assert_eq!(handshake(&ctx, &ctx).await.unwrap(), der(&second));
    }

    #[tokio::test]
    async fn a_server_of_another_ca_or_a_client_without_a_certificate_is_refused() {
        let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        write_node(d1.path(), &Pki::new("CA one"), "node");
        write_node(d2.path(), &Pki::new("CA two"), "node");
        let one = TlsContext::load(files(d1.path()), ClientAuth::Required).unwrap();
        let two = TlsContext::load(files(d2.path()), ClientAuth::Required).unwrap();
        let e = handshake(&one, &two).await.unwrap_err();
        assert!(e.contains("UnknownIssuer"), "{e}");
        // A client of the right CA without a certificate: the server refuses it.
        let anonymous = TlsContext::load(
            TlsFiles {
                ca: d1.path().join("ca.pem"),
                identity: None,
            },
            ClientAuth::None,
        )
        .unwrap();
        assert!(anonymous.server_config().is_none());
        let (a, b) = tokio::io::duplex(64 * 1024);
        let acceptor = tokio_rustls::TlsAcceptor::from(one.server_config().unwrap());
        let server = tokio::spawn(async move { acceptor.accept(a).await.map(|_| ()) });
        let connector = tokio_rustls::TlsConnector::from(anonymous.client_config());
        let _ = connector
            .connect(ServerName::try_from("localhost").unwrap(), b)
            .await;
        let e = server.await.unwrap().unwrap_err().to_string();
        assert!(e.contains("certificate"), "{e}");
    }

    #[test]
    fn settings_need_all_three_files_and_a_known_client_auth() {
        let p = |s: &str| Some(PathBuf::from(s));
        assert_eq!(NodeTls::from_settings(None, None, None, "none"), Ok(None));
        let t = NodeTls::from_settings(p("c"), p("k"), p("ca"), "required")
            .unwrap()
            .unwrap();
        assert_eq!(t.client_auth, ClientAuth::Required);
        let (key, reason) = NodeTls::from_settings(p("c"), None, p("ca"), "none").unwrap_err();
        assert_eq!(key, "tls_key_file");
        assert!(
            reason.contains("tls_cert_file and tls_ca_file is set"),
            "{reason}"
        );
        let (key, _) = NodeTls::from_settings(None, None, None, "always").unwrap_err();
        assert_eq!(key, "ssl_client_auth");
        let e = TlsContext::load(
            TlsFiles {
                ca: PathBuf::from("/nonexistent/ca.pem"),
                identity: None,
            },
            ClientAuth::None,
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("tls_ca_file /nonexistent/ca.pem: "), "{e}");
    }
}
