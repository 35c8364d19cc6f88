//! HTTP/1.1 GETs of the `/metrics` and `/health` listeners (`metrics_listener`), for tests
//! that read them as Prometheus or a load balancer would.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET path` over HTTP/1.1; `None` when the connection fails. Returns (status, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr))
        .await
        .ok()?
        .ok()?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: keel\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .ok()?;
    let mut buf = String::new();
    tokio::time::timeout(Duration::from_secs(2), s.read_to_string(&mut buf))
        .await
        .ok()?
        .ok()?;
    let status = buf.get(9..12)?.parse().ok()?;
    Some((status, buf.split_once("\r\n\r\n")?.1.to_string()))
}

/// The value of the first sample line `name value` in Prometheus text.
pub fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The cumulative buckets `(upper bound, count)` of the histogram `name` in Prometheus text
/// (`name_bucket{le="0.5"} 12`; `+Inf` as infinity), in bound order; empty when absent.
/// Samples with other labels besides `le` are summed per bound.
pub fn histogram_buckets(text: &str, name: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{name}_bucket{{");
    let mut out: Vec<(f64, f64)> = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(&prefix) else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let Some(le) = labels
            .split(',')
            .find_map(|l| l.trim().strip_prefix("le=\""))
            .and_then(|l| l.strip_suffix('"'))
        else {
            continue;
        };
        let bound = if le == "+Inf" {
            f64::INFINITY
        } else {
            match le.parse() {
                Ok(b) => b,
                Err(_) => continue,
            }
        };
        let Ok(count) = value.trim().parse::<f64>() else {
            continue;
        };
        match out.iter_mut().find(|(b, _)| *b == bound) {
            Some((_, c)) => *c += count,
            None => out.push((bound, count)),
        }
    }
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

/// Per bound, `after` minus `before` (bounds missing from `before` count from 0): the
/// samples recorded between two scrapes.
pub fn bucket_delta(before: &[(f64, f64)], after: &[(f64, f64)]) -> Vec<(f64, f64)> {
    after
        .iter()
        .map(|&(b, c)| {
            let was = before.iter().find(|(x, _)| *x == b).map_or(0.0, |x| x.1);
            (b, c - was)
        })
        .collect()
}

/// The upper bound of the bucket holding quantile `q` (0..=1) of cumulative `buckets`, and
/// the sample count; `None` without samples. The true quantile is at most that bound.
pub fn quantile_bound(buckets: &[(f64, f64)], q: f64) -> Option<(f64, f64)> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let want = (q * total).ceil().max(1.0);
    buckets
        .iter()
        .find(|(_, c)| *c >= want)
        .map(|&(b, _)| (b, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantile_bounds() {
        let before = "h_bucket{le=\"0.1\"} 1\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 1\n";
        let after = "# TYPE h histogram\nh_bucket{le=\"0.1\"} 90\nh_bucket{le=\"1\"} 99\n\
                     h_bucket{le=\"+Inf\"} 101\nh_sum 3\nother_bucket{le=\"0.1\"} 5\n";
        let d = bucket_delta(
            &histogram_buckets(before, "h"),
            &histogram_buckets(after, "h"),
        );
        assert_eq!(d, vec![(0.1, 89.0), (1.0, 98.0), (f64::INFINITY, 100.0)]);
        assert_eq!(quantile_bound(&d, 0.5), Some((0.1, 100.0)));
        assert_eq!(quantile_bound(&d, 0.98), Some((1.0, 100.0)));
        assert_eq!(quantile_bound(&d, 0.99), Some((f64::INFINITY, 100.0)));
        assert_eq!(quantile_bound(&[(1.0, 0.0)], 0.99), None);
    }
}
