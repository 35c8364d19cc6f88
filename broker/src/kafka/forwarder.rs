//! Forwarding to the active controller: the Kafka listener's admin calls and the group
//! coordinator's creation of `__consumer_offsets` go through one [`ControllerForwarder`]
//! (Kafka: `ForwardingManager`), which follows the active controller like the broker's other
//! controller requests ([`ActiveControllerClient`]). A call on behalf of a client carries the
//! client's principal and host ([`forwarded`]; Kafka's EnvelopeRequest, KIP-590): the
//! controllers authorize the client, not this broker, which needs CLUSTER_ACTION to forward.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use keel_metadata_log::authz::{Caller, FORWARDED_HOST, FORWARDED_PRINCIPAL};
use keel_proto::ErrorCode;
use keel_proto::controller::controller_service_client::ControllerServiceClient;
use keel_proto::limits::MAX_CONTROLLER_REQUEST_BYTES;
use prost::Message;
use tonic::transport::Channel;

use super::convert::admin::{self as conv, Failure};
use crate::lifecycle::{ActiveControllerClient, ControllerChannels, ControllerReply};

/// Sends admin requests to the active controller; clones share the channels and the last
/// known active controller (so a call after the first goes straight to it).
#[derive(Debug, Clone)]
pub struct ControllerForwarder {
    channels: ControllerChannels,
    request_timeout: Duration,
    active: Arc<AtomicI32>,
}

impl ControllerForwarder {
    /// A forwarder over `channels`; each attempt is bounded by `request_timeout`.
    pub fn new(channels: ControllerChannels, request_timeout: Duration) -> Self {
        Self {
            channels,
            request_timeout,
            active: Arc::new(AtomicI32::new(-1)),
        }
    }

    /// Sends `req` with `send` to the active controller, within `deadline` if given, on
    /// behalf of `client` if given (see [`forwarded`]; `None`: this broker's own request).
    /// Failures: `req` over the controller's 8 MiB request limit is INVALID_REQUEST (nothing
    /// sent); no controller answering, or the deadline passing, REQUEST_TIMED_OUT.
    pub async fn call<Q, R, F, Fut>(
        &self,
        client: Option<&Caller>,
        req: Q,
        deadline: Option<Duration>,
        send: F,
    ) -> Result<R, Failure>
    where
        Q: Message + Clone,
        R: ControllerReply,
        F: Fn(ControllerServiceClient<Channel>, tonic::Request<Q>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<R>, tonic::Status>>,
    {
        let size = req.encoded_len();
        if size > MAX_CONTROLLER_REQUEST_BYTES {
            return Err(Failure::new(
                ErrorCode::InvalidRequest,
                format!(
                    "the request is {size} bytes for the controller, over its limit of \
                     {MAX_CONTROLLER_REQUEST_BYTES}"
                ),
            ));
        }
        let mut active = ActiveControllerClient::new(self.channels.clone(), self.request_timeout);
        active.prefer(self.active.load(Ordering::Relaxed));
        let call = active.call(|c| send(c, forwarded(req.clone(), client)));
        let outcome = match deadline {
            Some(d) => match tokio::time::timeout(d, call).await {
                Ok(r) => r.map_err(|e| conv::timed_out(e.to_string())),
                Err(_) => Err(conv::timed_out(format!(
                    "the controller did not answer within timeout_ms {} (the operation may \
                     still complete)",
                    d.as_millis()
                ))),
            },
            None => call.await.map_err(|e| conv::timed_out(e.to_string())),
        };
        if active.active_id >= 0 {
            self.active.store(active.active_id, Ordering::Relaxed);
        }
        outcome
    }
}

/// `req` as a gRPC request carrying `client`'s principal and host in [`FORWARDED_PRINCIPAL`]
/// and [`FORWARDED_HOST`] (binary metadata: a principal may be any UTF-8), so the controllers
/// authorize the client (Kafka's EnvelopeRequest, KIP-590). A client without a principal
/// (no authorizer, or refused already) and `None` add nothing: the request is this broker's.
pub fn forwarded<Q>(req: Q, client: Option<&Caller>) -> tonic::Request<Q> {
    let mut request = tonic::Request::new(req);
    if let Some(Caller {
        principal: Ok(principal),
        host,
        ..
    }) = client
    {
        let metadata = request.metadata_mut();
        metadata.insert_bin(
            FORWARDED_PRINCIPAL,
            tonic::metadata::MetadataValue::from_bytes(principal.as_bytes()),
        );
        if !host.is_empty() {
            metadata.insert_bin(
                FORWARDED_HOST,
                tonic::metadata::MetadataValue::from_bytes(host.as_bytes()),
            );
        }
    }
    request
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_request_carries_the_clients_principal_and_host() {
        let alice = Caller {
            principal: Ok("User:älice".into()),
            host: "10.0.0.7".into(),
            token_refused: false,
        };
        let r = forwarded((), Some(&alice));
        let m = r.metadata();
        let text = |k: &str| {
            m.get_bin(k)
                .map(|v| String::from_utf8(v.to_bytes().unwrap().to_vec()).unwrap())
        };
        assert_eq!(text(FORWARDED_PRINCIPAL).as_deref(), Some("User:älice"));
        assert_eq!(text(FORWARDED_HOST).as_deref(), Some("10.0.0.7"));
        // The broker's own requests, and a client without a principal, carry nothing.
        let unmapped = Caller {
            principal: Err("no rule maps CN=x".into()),
            host: String::new(),
            token_refused: false,
        };
        for client in [None, Some(&unmapped)] {
            assert!(forwarded((), client).metadata().is_empty());
        }
    }
}
