//! One node process of a multi-process cluster: started from a prepared [`Command`] with its
//! stdout and stderr appended to a log file (all its runs), killed (SIGKILL), terminated
//! (SIGTERM), paused and resumed (SIGSTOP/SIGCONT), and killed on drop. Shared by the
//! controller quorums of [`crate::quorum`] and the clusters of [`crate::process`].

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// A node's process slot: at most one running child at a time.
#[derive(Debug)]
pub struct NodeProcess {
    /// Label for messages, e.g. `controller 2`.
    name: String,
    /// Where every run's stdout and stderr are appended.
    log_path: PathBuf,
    child: Option<Child>,
}

impl NodeProcess {
    /// A stopped node named `name` whose output goes to `log_path`.
    pub fn new(name: String, log_path: PathBuf) -> NodeProcess {
        NodeProcess {
            name,
            log_path,
            child: None,
        }
    }

    /// Spawns `cmd` with stdout and stderr appended to the node's log.
    ///
    /// # Panics
    /// When the node already runs, or the log or the process cannot be opened/spawned.
    pub fn start(&mut self, mut cmd: Command) {
        assert!(self.child.is_none(), "{} already running", self.name);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .unwrap_or_else(|e| panic!("{}: {e}", self.log_path.display()));
        let child = cmd
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", self.name));
        self.child = Some(child);
    }

    /// Whether the node was started and has not been killed, terminated or seen exiting.
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// The running process's id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL and reap; nothing when not running.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends `signal` (a name `kill` knows: `TERM`, `STOP`, `CONT`, ...) to the running node.
    ///
    /// # Panics
    /// When the node does not run or `kill` fails.
    pub fn signal(&self, signal: &str) {
        let pid = self
            .pid()
            .unwrap_or_else(|| panic!("{} not running", self.name));
        let ok = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -{signal} {pid} ({})", self.name);
    }

    /// SIGSTOP: the process stays alive but runs nothing (a long GC pause, a frozen VM).
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// SIGCONT after [`Self::pause`].
    pub fn resume(&self) {
        self.signal("CONT");
    }

    /// Waits up to `deadline` for the node to exit on its own; its status, or `None` (still
    /// running, left running) when the deadline passes. Polls every 20 ms: bounded.
    pub fn wait_exit(&mut self, deadline: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        loop {
            let c = self
                .child
                .as_mut()
                .unwrap_or_else(|| panic!("{} not running", self.name));
            if let Some(status) = c.try_wait().unwrap() {
                self.child = None;
                return Some(status);
            }
            if start.elapsed() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then waits up to `deadline` for the exit; on timeout SIGKILLs and returns
    /// `None`.
    pub fn terminate(&mut self, deadline: Duration) -> Option<ExitStatus> {
        self.signal("TERM");
        let status = self.wait_exit(deadline);
        if status.is_none() {
            self.kill();
        }
        status
    }

    /// Everything the node wrote so far (all its runs).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The last `n` lines of the node's log under a `--- <name> (last lines) ---` header.
    pub fn log_tail(&self, n: usize) -> String {
        let text = self.log();
        let tail: Vec<&str> = text.lines().rev().take(n).collect();
        let mut s = format!("--- {} (last lines) ---\n", self.name);
        for l in tail.into_iter().rev() {
            s += l;
            s += "\n";
        }
        s
    }

    /// The node's log file.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `1@127.0.0.1:<ports[0]>,2@127.0.0.1:<ports[1]>,...`: `controller_quorum_voters` for
/// controllers on these loopback ports (ids from 1).
pub fn voters(ports: &[u16]) -> String {
    ports
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{}@127.0.0.1:{p}", i + 1))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_pause_resume_terminate_and_log() {
        let dir = tempfile::tempdir().unwrap();
        let mut n = NodeProcess::new("sleeper".into(), dir.path().join("sleeper.log"));
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo started; exec sleep 30"]);
        n.start(cmd);
        assert!(n.running());
        n.pause();
        n.resume();
        assert_eq!(n.wait_exit(Duration::from_millis(50)), None);
        let status = n.terminate(Duration::from_secs(5)).expect("exits on TERM");
        assert!(!status.success());
        assert!(!n.running());
        // The log is written before sleep starts; read it once the process is gone.
        assert_eq!(n.log(), "started\n");
        assert_eq!(n.log_tail(5), "--- sleeper (last lines) ---\nstarted\n");
        assert_eq!(voters(&[7, 8]), "1@127.0.0.1:7,2@127.0.0.1:8");
    }
}
