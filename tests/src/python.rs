//! Kafka's Python clients for the acceptance tests: the interpreter of the venv
//! `scripts/kafka-clients-venv` makes (`scripts/test` runs it), or `$KEEL_KAFKA_PYTHON`, and
//! the scripts in `tests/kafka_clients/`. A missing venv fails the test and says how to make
//! it (never a silent skip).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The Python with confluent-kafka and kafka-python.
pub fn python() -> PathBuf {
    let path = std::env::var_os("KEEL_KAFKA_PYTHON").map_or_else(
        || {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../target/kafka-clients-venv/bin/python")
        },
        PathBuf::from,
    );
    assert!(
        path.exists(),
        "{} is missing: run scripts/kafka-clients-venv (scripts/test does) or set \
         KEEL_KAFKA_PYTHON to a python with confluent-kafka and kafka-python",
        path.display()
    );
    path
}

/// `tests/kafka_clients/<name>`.
pub fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("kafka_clients")
        .join(name)
}

/// Runs `python args` to completion within `limit`; returns stdout, or panics with its
/// stderr (and kills it past `limit`).
pub fn run_script(args: &[&str], limit: Duration) -> String {
    let mut child = Command::new(python())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start python");
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || std::io::read_to_string(stdout).unwrap());
    let stderr = child.stderr.take().unwrap();
    let err_reader = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap());
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let out = reader.join().unwrap_or_default();
            let err = err_reader.join().unwrap_or_default();
            panic!("{args:?} did not finish within {limit:?}\nstdout:\n{out}\nstderr:\n{err}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = reader.join().unwrap();
    let err = err_reader.join().unwrap();
    assert!(
        status.success(),
        "{args:?} failed ({status}):\n{err}\nstdout:\n{out}"
    );
    out
}
