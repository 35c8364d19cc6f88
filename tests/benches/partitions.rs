//! Partitions at scale (#26): the real binaries (release build: `cargo build --release
//! --workspace --bins` first) on loopback, 3 controllers and 3 brokers, [`partitions`]
//! partitions (default 100,000) with replication factor 3, so every broker hosts all of them.
//! Prints two tables and the target checks.
//!
//! Steps, each timed:
//! - `create`: CreateTopics of topics of at most 9,984 partitions (the most one creation may
//!   hold) until the total is reached, then until every broker hosts every partition and
//!   every leader has its full ISR (the brokers' `keel_broker_partition_count`,
//!   `keel_broker_leader_count` and `keel_broker_under_replicated_partitions` gauges);
//! - `restart broker N` (each in turn): SIGTERM until the controller fenced it (its
//!   controlled shutdown granted, target < 10 s) and until it exited (every log closed), start
//!   (open of every partition log, until unfenced), then until the whole cluster is back to
//!   every partition hosted with full ISR;
//! - `kill -9 broker N`: SIGKILL of the broker leading the most partitions; until no
//!   partition names it leader in the active controller's image (target: the broker session
//!   timeout + 2 s), then restarted until full ISR again.
//!
//! Per broker after each phase: open file descriptors (`/proc/<pid>/fd`), resident memory
//! (`VmRSS`) and that memory per hosted partition. The brokers start with the bench's
//! open-files limit, or `KEEL_BENCH_NOFILE` (`prlimit`; above the hard limit it needs
//! CAP_SYS_RESOURCE).
//!
//! Run: `cargo bench -p keel-tests --bench partitions`. `KEEL_BENCH_PARTITIONS` sets the
//! total (default 100000), `KEEL_BENCH_NOFILE` the brokers' open-files limit.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use keel_client::admin::{Admin, AdminConfig};
use keel_proto::controller::CreatableTopic;
use keel_tests::Endpoints;
use keel_tests::http::{http_get, sample};
use keel_tests::process::{Cluster, Options};

/// The most partitions one CreateTopics may create (its records fit one metadata batch).
const MAX_PER_TOPIC: u32 = 9_984;
const BROKERS: i32 = 3;
const SESSION_TIMEOUT_MS: u64 = 9_000;
/// Bound of each wait: a step that takes longer fails the bench.
const STEP_LIMIT: Duration = Duration::from_secs(900);

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn partitions() -> u32 {
    env_u64("KEEL_BENCH_PARTITIONS", 100_000) as u32
}

/// The brokers' open-files limit: `KEEL_BENCH_NOFILE`, else the bench's own (inherited).
fn nofile() -> Option<u64> {
    std::env::var("KEEL_BENCH_NOFILE")
        .ok()
        .and_then(|v| v.parse().ok())
}

/// The open-files limit the brokers run with, for the table.
fn nofile_shown() -> String {
    match nofile() {
        Some(n) => n.to_string(),
        None => std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|l| {
                l.lines()
                    .find(|l| l.starts_with("Max open files"))
                    .and_then(|l| l.split_whitespace().nth(3).map(str::to_string))
            })
            .map_or_else(|| "unknown".into(), |n| format!("{n} (inherited)")),
    }
}

/// One broker's gauges and process figures.
#[derive(Debug, Clone, Copy, Default)]
struct BrokerState {
    partitions: u64,
    leaders: u64,
    under_replicated: u64,
    fds: u64,
    rss_kib: u64,
}

async fn broker_state(c: &Cluster, id: i32) -> Option<BrokerState> {
    let port = c.broker_metrics_ports[id as usize - 1];
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let (200, text) = http_get(addr, "/metrics").await? else {
        return None;
    };
    let pid = c.broker_pid(id)?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count() as u64)
        .unwrap_or(0);
    let rss_kib = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0);
    Some(BrokerState {
        partitions: sample(&text, "keel_broker_partition_count")? as u64,
        leaders: sample(&text, "keel_broker_leader_count")? as u64,
        under_replicated: sample(&text, "keel_broker_under_replicated_partitions")? as u64,
        fds,
        rss_kib,
    })
}

/// Waits until every broker hosts `total` partitions, they lead `total` together and none
/// is under-replicated; returns the brokers' states then.
async fn wait_full(c: &Cluster, total: u64, what: &str) -> Vec<BrokerState> {
    let start = Instant::now();
    let mut last = Vec::new();
    while start.elapsed() < STEP_LIMIT {
        let mut states = Vec::new();
        for id in 1..=BROKERS {
            match broker_state(c, id).await {
                Some(s) => states.push(s),
                None => break,
            }
        }
        if states.len() == BROKERS as usize
            && states.iter().all(|s| s.partitions == total)
            && states.iter().map(|s| s.leaders).sum::<u64>() == total
            && states.iter().all(|s| s.under_replicated == 0)
        {
            return states;
        }
        last = states;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("{what}: not every partition hosted with full ISR after {STEP_LIMIT:?}: {last:?}");
}

/// Partitions whose leader is `broker` in the active controller's image, or `None` when
/// no controller answered.
async fn led_by(admin: &Admin, broker: i32) -> Option<usize> {
    let image = admin.metadata_image().await.ok()?;
    Some(
        image
            .topics()
            .by_id
            .values()
            .flat_map(|t| t.partitions.values())
            .filter(|r| r.leader == broker)
            .count(),
    )
}

struct Step {
    name: String,
    secs: f64,
    target: Option<(f64, &'static str)>,
}

fn fmt_states(phase: &str, states: &[BrokerState], rows: &mut Vec<String>) {
    for (i, s) in states.iter().enumerate() {
        rows.push(format!(
            "| {phase} | {} | {} | {} | {} | {:.0} | {:.2} |",
            i + 1,
            s.partitions,
            s.leaders,
            s.fds,
            s.rss_kib as f64 / 1024.0,
            s.rss_kib as f64 / s.partitions.max(1) as f64,
        ));
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let total = partitions();
    let mut c = Cluster::start_opts(
        3,
        BROKERS as usize,
        Options {
            broker_metrics: true,
            session_timeout_ms: SESSION_TIMEOUT_MS,
            broker_nofile: nofile(),
            ..Options::default()
        },
    );
    c.wait_unfenced(&[1, 2, 3], Duration::from_secs(60)).await;
    let admin = Admin::new(AdminConfig::new(
        c.live_controllers().into_iter().map(|(_, a)| a).collect(),
    ))
    .unwrap();
    let mut steps: Vec<Step> = Vec::new();
    let mut states_rows: Vec<String> = Vec::new();

    // Create.
    let start = Instant::now();
    let mut created = 0u32;
    let mut topic = 0;
    while created < total {
        let n = (total - created).min(MAX_PER_TOPIC);
        c.create_topic(
            CreatableTopic {
                name: format!("scale-{topic}"),
                num_partitions: n as i32,
                replication_factor: 3,
                assignments: vec![],
                configs: vec![],
            },
            Duration::from_secs(120),
        )
        .await;
        created += n;
        topic += 1;
    }
    steps.push(Step {
        name: format!("create {total} partitions ({topic} topics): committed"),
        secs: start.elapsed().as_secs_f64(),
        target: None,
    });
    let states = wait_full(&c, total as u64, "create").await;
    steps.push(Step {
        name: "create: every broker hosts all, full ISR".into(),
        secs: start.elapsed().as_secs_f64(),
        target: None,
    });
    fmt_states("created", &states, &mut states_rows);

    // Rolling restart.
    for id in 1..=BROKERS {
        let t = Instant::now();
        c.signal_broker(id, "TERM");
        c.wait_for(
            "the controlled shutdown granted (fenced)",
            STEP_LIMIT,
            || async {
                let r = c.try_describe_cluster().await?;
                r.brokers
                    .iter()
                    .any(|b| b.broker_id == id && b.fenced)
                    .then_some(())
            },
        )
        .await;
        steps.push(Step {
            name: format!("restart broker {id}: controlled shutdown (SIGTERM until fenced)"),
            secs: t.elapsed().as_secs_f64(),
            target: Some((10.0, "< 10 s")),
        });
        let status = c
            .wait_broker_exit(id, STEP_LIMIT)
            .unwrap_or_else(|| panic!("broker {id} did not exit\n{}", c.logs()));
        assert!(
            status.success(),
            "broker {id} exit {status:?}\n{}",
            c.logs()
        );
        steps.push(Step {
            name: format!("restart broker {id}: SIGTERM until exit (logs closed)"),
            secs: t.elapsed().as_secs_f64(),
            target: None,
        });
        let t = Instant::now();
        c.start_broker(id);
        c.wait_unfenced(&[id], STEP_LIMIT).await;
        steps.push(Step {
            name: format!("restart broker {id}: start until unfenced"),
            secs: t.elapsed().as_secs_f64(),
            target: None,
        });
        let states = wait_full(&c, total as u64, "restart").await;
        steps.push(Step {
            name: format!("restart broker {id}: until full ISR everywhere"),
            secs: t.elapsed().as_secs_f64(),
            target: None,
        });
        if id == BROKERS {
            fmt_states("restarted", &states, &mut states_rows);
        }
    }

    // kill -9 of the broker leading the most partitions.
    let mut most = (0, 0);
    for id in 1..=BROKERS {
        let n = led_by(&admin, id).await.unwrap_or(0);
        if n > most.1 {
            most = (id, n);
        }
    }
    let (victim, led) = most;
    let t = Instant::now();
    c.kill_broker(victim);
    loop {
        if led_by(&admin, victim).await == Some(0) {
            break;
        }
        assert!(t.elapsed() < STEP_LIMIT, "partitions still led by {victim}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    steps.push(Step {
        name: format!("kill -9 broker {victim} leading {led}: all re-led"),
        secs: t.elapsed().as_secs_f64(),
        target: Some((
            (SESSION_TIMEOUT_MS + 2_000) as f64 / 1e3,
            "< session timeout + 2 s",
        )),
    });
    let t = Instant::now();
    c.start_broker(victim);
    let states = wait_full(&c, total as u64, "after kill -9").await;
    steps.push(Step {
        name: format!("kill -9 broker {victim}: restart until full ISR everywhere"),
        secs: t.elapsed().as_secs_f64(),
        target: None,
    });
    fmt_states("after kill -9", &states, &mut states_rows);

    println!();
    println!(
        "Partitions at scale: {total} partitions x RF 3 on {BROKERS} brokers (3 controllers), \
         session timeout {SESSION_TIMEOUT_MS} ms, nofile {}, {} CPUs",
        nofile_shown(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!();
    println!("| step | seconds | target |");
    println!("|---|---|---|");
    let mut failed = 0;
    for s in &steps {
        let target = match s.target {
            Some((limit, text)) if s.secs < limit => format!("{text}: met"),
            Some((_, text)) => {
                failed += 1;
                format!("{text}: NOT met")
            }
            None => "-".into(),
        };
        println!("| {} | {:.1} | {target} |", s.name, s.secs);
    }
    println!();
    println!("| after | broker | partitions | leaders | open fds | RSS MiB | RSS KiB/partition |");
    println!("|---|---|---|---|---|---|---|");
    for r in &states_rows {
        println!("{r}");
    }
    println!();
    println!("targets not met: {failed}");
}
