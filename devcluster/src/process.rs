//! Server processes: spawning them detached, finding them again by pid
//! file, signalling them, and reaping the ones this process started.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

pub use nix::sys::signal::Signal;
use nix::unistd::Pid;

use crate::Error;

/// A server process: its pid, and the child handle when this process
/// spawned it (so it can be reaped; an unreaped zombie would still look
/// alive to `kill(pid, 0)`).
#[derive(Debug)]
pub struct Process {
    pub pid: i32,
    child: Mutex<Option<Child>>,
}

impl Process {
    /// Starts `command` in its own process group (so a Ctrl-C of the
    /// command that started it, sent to the terminal's foreground group,
    /// does not reach it), output to `log`.
    pub fn spawn(mut command: Command, log: &Path) -> Result<Process, Error> {
        let out = File::options()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| Error::io(format!("opening log {}", log.display()), e))?;
        let err = out
            .try_clone()
            .map_err(|e| Error::io("duplicating a log handle", e))?;
        command.stdin(Stdio::null()).stdout(out).stderr(err);
        command.process_group(0);
        let program = format!("{:?}", command.get_program());
        let child = command
            .spawn()
            .map_err(|e| Error::io(format!("starting {program}"), e))?;
        Ok(Process {
            pid: child.id() as i32,
            child: Mutex::new(Some(child)),
        })
    }

    /// A process found by pid (started by an earlier command).
    pub fn adopt(pid: i32) -> Process {
        Process {
            pid,
            child: Mutex::new(None),
        }
    }

    /// Whether the process is still running (reaping it if it exited).
    pub fn alive(&self) -> bool {
        let mut child = self.child.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = child.as_mut() {
            return matches!(c.try_wait(), Ok(None));
        }
        pid_alive(self.pid)
    }

    /// Sends `signal`; a process that is already gone is not an error.
    pub fn signal(&self, signal: Signal) {
        let _ = nix::sys::signal::kill(Pid::from_raw(self.pid), signal);
    }

    /// Waits up to `timeout` for the process to exit.
    pub async fn wait_exit(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while tokio::time::Instant::now() < deadline {
            if !self.alive() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        !self.alive()
    }

    /// Whether the process is stopped by SIGSTOP.
    pub fn paused(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .ok()
            .and_then(|stat| {
                // The state follows the parenthesised command name.
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().next().map(|s| s == "T"))
            })
            .unwrap_or(false)
    }
}

/// Whether a process with this pid exists (and is not a zombie).
/// The processes whose parent is `pid` (a server's backends), from /proc.
pub fn children_of(pid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                .and_then(|stat| {
                    let (_, rest) = stat.rsplit_once(')')?;
                    rest.split_whitespace().nth(1)?.parse::<i32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

pub fn pid_alive(pid: i32) -> bool {
    // No signal only checks for existence.
    let exists = nix::sys::signal::kill(Pid::from_raw(pid), None).is_ok();
    exists
        && std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().next().map(|s| s != "Z"))
                    .unwrap_or(true)
            })
            .unwrap_or(true)
}

/// Reads a pid from the first line of a pid file.
pub fn read_pid_file(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}
