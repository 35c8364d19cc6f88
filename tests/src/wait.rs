//! Polling a condition with a deadline: the one way tests wait (DESIGN §8: no fixed sleeps
//! as synchronisation).

use std::future::Future;
use std::time::{Duration, Instant};

/// Interval between two polls, ms: short against every deadline tests use (>= 1 s).
pub const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Polls `f` every [`POLL_INTERVAL`] until it returns `Some`, and returns that value. Panics
/// after `deadline` with `what` and `context()` (e.g. the cluster's logs). At most
/// `deadline / POLL_INTERVAL + 1` polls: bounded.
pub async fn wait_for<T, Fut>(
    what: &str,
    deadline: Duration,
    context: impl Fn() -> String,
    mut f: impl FnMut() -> Fut,
) -> T
where
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < deadline,
            "{what}: not within {deadline:?}\n{}",
            context()
        );
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn returns_the_first_value_and_panics_past_the_deadline() {
        let mut n = 0;
        let got = wait_for("third poll", Duration::from_secs(5), String::new, || {
            n += 1;
            let v = (n == 3).then_some(n);
            async move { v }
        })
        .await;
        assert_eq!(got, 3);
        let never = tokio::spawn(wait_for(
            "never",
            Duration::from_millis(50),
            || "ctx".to_string(),
            || async { None::<()> },
        ));
        let e = never.await.unwrap_err();
        assert!(e.is_panic());
        let msg = e.into_panic();
        let msg = msg.downcast_ref::<String>().unwrap();
        assert!(
            msg.starts_with("never: not within 50ms") && msg.ends_with("ctx"),
            "{msg}"
        );
    }
}
