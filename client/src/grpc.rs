//! The gRPC clients of Keel's services as this library builds them: over a [`Dialer`]'s
//! channel, with the dialer's session token (#23, SASL/SCRAM for Keel's own clients, see
//! [`crate::admin::Admin::scram_authenticate`]) sent as `authorization: Bearer <token>` on
//! every request, and the broker API's message size limits.

use keel_proto::broker::broker_service_client::BrokerServiceClient;
use keel_proto::controller::controller_service_client::ControllerServiceClient;
use keel_runtime::tls::Dialer;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// A channel whose requests carry the session token, if any.
pub type Chan = InterceptedService<Channel, Bearer>;
/// A client of a broker's `BrokerService`.
pub type BrokerClient = BrokerServiceClient<Chan>;
/// A client of a controller's `ControllerService`.
pub type ControllerClient = ControllerServiceClient<Chan>;

/// Adds `authorization: Bearer <token>` to every request when the dialer has a token.
#[derive(Debug, Clone, Default)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl Bearer {
    /// The header of `dialer`'s token (none without one, or for a token that is not
    /// printable ASCII, which no controller issues).
    pub fn of(dialer: &Dialer) -> Bearer {
        Bearer(
            dialer
                .bearer()
                .and_then(|t| MetadataValue::try_from(format!("Bearer {t}")).ok()),
        )
    }
}

impl Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            request
                .metadata_mut()
                .insert(keel_metadata_log::authz::AUTHORIZATION, v.clone());
        }
        Ok(request)
    }
}

/// A broker client over `channel` (with the broker message size limits).
pub fn broker(dialer: &Dialer, channel: Channel) -> BrokerClient {
    BrokerServiceClient::with_interceptor(channel, Bearer::of(dialer))
        .max_decoding_message_size(keel_proto::limits::MAX_BROKER_MESSAGE_BYTES)
        .max_encoding_message_size(keel_proto::limits::MAX_BROKER_MESSAGE_BYTES)
}

/// A controller client over `channel` (message sizes are the caller's to set).
pub fn controller(dialer: &Dialer, channel: Channel) -> ControllerClient {
    ControllerServiceClient::with_interceptor(channel, Bearer::of(dialer))
}
