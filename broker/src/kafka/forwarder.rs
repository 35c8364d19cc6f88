//! Forwarding to the active controller: the Kafka listener's admin calls and the group
//! coordinator's creation of `__consumer_offsets` go through one [`ControllerForwarder`]
//! (Kafka: `ForwardingManager`), which follows the active controller like the broker's other
//! controller requests ([`ActiveControllerClient`]).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

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

    /// Sends `req` with `send` to the active controller, within `deadline` if given.
    /// Failures: `req` over the controller's 8 MiB request limit is INVALID_REQUEST (nothing
    /// sent); no controller answering, or the deadline passing, REQUEST_TIMED_OUT.
    pub async fn call<Q, R, F, Fut>(
        &self,
        req: Q,
        deadline: Option<Duration>,
        send: F,
    ) -> Result<R, Failure>
    where
        Q: Message + Clone,
        R: ControllerReply,
        F: Fn(ControllerServiceClient<Channel>, Q) -> Fut,
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
        let mut client = ActiveControllerClient::new(self.channels.clone(), self.request_timeout);
        client.prefer(self.active.load(Ordering::Relaxed));
        let call = client.call(|c| send(c, req.clone()));
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
        if client.active_id >= 0 {
            self.active.store(client.active_id, Ordering::Relaxed);
        }
        outcome
    }
}
