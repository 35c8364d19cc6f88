//! One line for a failed RPC: a gRPC status's message and its distinct causes.
//!
//! tonic's transport failures carry the cause only in the status's source chain: the
//! message alone is `transport error`, which does not say whether the peer refused the
//! connection, reset it or timed out. The chain repeats each layer ("tcp connect error;
//! source: tcp connect error; ..."), so only causes not already contained in the line are
//! added.

/// Longest cause chain followed: a tonic chain is a handful of layers.
const MAX_CAUSES: usize = 8;

/// `message: cause: cause`, each part only when the line does not contain it yet, e.g.
/// `transport error: tcp connect error: Connection refused (os error 111)`. Empty parts are
/// skipped; a status with no message and no source gives an empty string.
pub fn status_line(status: &tonic::Status) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut push = |s: String| {
        if !s.is_empty() && !parts.iter().any(|p| p.contains(s.as_str())) {
            parts.push(s);
        }
    };
    push(status.message().to_string());
    let mut source = std::error::Error::source(status);
    for _ in 0..MAX_CAUSES {
        let Some(e) = source else { break };
        push(e.to_string());
        source = e.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|l| l as _)
        }
    }

    #[test]
    fn the_causes_follow_the_message_once_each() {
        let cause = Layer(
            "tcp connect error",
            Some(Box::new(Layer(
                "tcp connect error",
                Some(Box::new(Layer("Connection refused (os error 111)", None))),
            ))),
        );
        let status =
            tonic::Status::from_error(Box::new(Layer("transport error", Some(Box::new(cause)))));
        assert_eq!(
            status_line(&status),
            "transport error: tcp connect error: Connection refused (os error 111)"
        );
        assert_eq!(status_line(&tonic::Status::unavailable("")), "");
        assert_eq!(status_line(&tonic::Status::unavailable("gone")), "gone");
    }
}
