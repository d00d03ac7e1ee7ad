//! Where a benchmark's CPU went: the dev cluster's servers by role, the
//! benchmark's own process (with the children it has reaped, such as a
//! `backfill run` process), and the machine as a whole, read from `/proc`.
//!
//! On the 2-core development machine every benchmark runs its client,
//! PostgreSQL and six MariaDB servers on the same cores, so a ratio to a
//! raw limit is bounded by how much CPU each side needs per unit of work.
//! Printing that split with each run is what shows a target's ceiling: a
//! figure such as "the masters spent 13 µs per cell on our path and 5 µs
//! on the raw one" says which part a change could still win.

use std::time::Duration;

use devcluster::{DevCluster, Role};
use serde_json::{json, Value};

/// The groups CPU time is split into.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Group {
    Client = 0,
    Postgres = 1,
    Masters = 2,
    Minions = 3,
}

const GROUPS: [Group; 4] = [
    Group::Client,
    Group::Postgres,
    Group::Masters,
    Group::Minions,
];

impl Group {
    fn key(self) -> &'static str {
        match self {
            Group::Client => "client",
            Group::Postgres => "postgres",
            Group::Masters => "masters",
            Group::Minions => "minions",
        }
    }
}

/// The server processes to watch, read once from the running dev cluster.
pub struct CpuMeter {
    servers: Vec<(Group, i32)>,
    tick: f64,
}

/// CPU used so far by each group, and by the machine.
#[derive(Clone, Copy, Debug)]
pub struct CpuSample {
    groups: [Duration; 4],
    machine_busy: Duration,
    machine_total: Duration,
}

/// CPU used between two samples.
#[derive(Clone, Copy, Debug)]
pub struct CpuSpent {
    groups: [Duration; 4],
    machine_busy: Duration,
    machine_total: Duration,
}

impl CpuMeter {
    /// Watches the running servers of `cluster`. A server that is down is
    /// left out (and its group reads as less than it was).
    pub fn new(cluster: &DevCluster) -> CpuMeter {
        let servers = cluster
            .nodes()
            .iter()
            .filter_map(|node| {
                let group = match node.spec.role {
                    Role::Postgres => Group::Postgres,
                    Role::Master { .. } => Group::Masters,
                    Role::Minion { .. } => Group::Minions,
                };
                Some((group, node.pid()?))
            })
            .collect();
        let tick = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .filter(|&tick| tick > 0);
        CpuMeter {
            servers,
            tick: tick.map_or(100.0, |tick| tick as f64),
        }
    }

    /// CPU used so far. PostgreSQL's backends are its postmaster's
    /// children: the live ones are read one by one, and the ones that have
    /// exited are in the postmaster's own count of reaped children.
    pub fn sample(&self) -> CpuSample {
        let mut ticks = [0u64; 4];
        let stats = all_process_stats();
        if let Some(me) = read_stat("self") {
            ticks[Group::Client as usize] += me.own + me.children;
        }
        for (group, pid) in &self.servers {
            let slot = *group as usize;
            let Some(server) = stats.iter().find(|s| s.pid == *pid) else {
                continue;
            };
            ticks[slot] += server.own;
            if *group == Group::Postgres {
                ticks[slot] += server.children;
                ticks[slot] += stats
                    .iter()
                    .filter(|s| s.ppid == *pid)
                    .map(|s| s.own)
                    .sum::<u64>();
            }
        }
        let (busy, total) = machine_ticks();
        let time = |t: u64| Duration::from_secs_f64(t as f64 / self.tick);
        CpuSample {
            groups: ticks.map(time),
            machine_busy: time(busy),
            machine_total: time(total),
        }
    }
}

impl CpuSample {
    /// What was used since `earlier`.
    pub fn since(&self, earlier: &CpuSample) -> CpuSpent {
        let mut groups = [Duration::ZERO; 4];
        for (i, slot) in groups.iter_mut().enumerate() {
            *slot = self.groups[i].saturating_sub(earlier.groups[i]);
        }
        CpuSpent {
            groups,
            machine_busy: self.machine_busy.saturating_sub(earlier.machine_busy),
            machine_total: self.machine_total.saturating_sub(earlier.machine_total),
        }
    }
}

impl CpuSpent {
    /// The machine's busy share over the interval, 0–1.
    pub fn machine_busy_share(&self) -> f64 {
        if self.machine_total.is_zero() {
            return 0.0;
        }
        self.machine_busy.as_secs_f64() / self.machine_total.as_secs_f64()
    }

    /// Microseconds of the machine's CPU per unit of work, all processes.
    pub fn machine_us_per(&self, units: u64) -> f64 {
        us_per(self.machine_busy, units)
    }

    /// Microseconds of this process's CPU (and its reaped children's) per
    /// unit of work.
    pub fn client_us_per(&self, units: u64) -> f64 {
        us_per(self.groups[Group::Client as usize], units)
    }

    /// An upper bound on `ours / raw` throughput if our client cost
    /// nothing: the raw side's machine CPU per unit, scaled to a fully
    /// busy machine, over ours without the client's share. Both sides do
    /// the same work otherwise; a bound below a target means the target
    /// cannot be reached by client changes on this machine.
    pub fn ratio_bound_free_client(&self, units: u64, raw: &CpuSpent, raw_units: u64) -> f64 {
        let ours = (self.machine_us_per(units) - self.client_us_per(units)).max(f64::MIN_POSITIVE);
        let share = raw.machine_busy_share().max(f64::MIN_POSITIVE);
        raw.machine_us_per(raw_units) / share / ours
    }

    /// Microseconds of CPU per unit of work (a cell, a read) for each
    /// group, and in all, with the machine's busy share.
    pub fn per_unit_json(&self, units: u64) -> Value {
        let per = |d: Duration| (us_per(d, units) * 10.0).round() / 10.0;
        let mut object = serde_json::Map::new();
        for (i, group) in GROUPS.iter().enumerate() {
            object.insert(group.key().into(), json!(per(self.groups[i])));
        }
        object.insert("machine".into(), json!(per(self.machine_busy)));
        object.insert(
            "machine_busy_share".into(),
            json!((self.machine_busy_share() * 1000.0).round() / 1000.0),
        );
        Value::Object(object)
    }

    /// One line for the human output: µs per unit by group.
    pub fn per_unit_line(&self, units: u64, unit: &str) -> String {
        let per = |d: Duration| us_per(d, units);
        let groups: Vec<String> = GROUPS
            .iter()
            .enumerate()
            .map(|(i, g)| format!("{} {:.1}", g.key(), per(self.groups[i])))
            .collect();
        format!(
            "CPU µs per {unit}: {}; machine {:.1} ({:.0}% busy)",
            groups.join(", "),
            per(self.machine_busy),
            self.machine_busy_share() * 100.0
        )
    }
}

/// CPU time (user + system) this process has used so far.
pub fn process_cpu() -> Duration {
    use nix::sys::resource::{getrusage, UsageWho};
    use nix::sys::time::TimeValLike;
    let Ok(usage) = getrusage(UsageWho::RUSAGE_SELF) else {
        return Duration::ZERO;
    };
    let micros = (usage.user_time() + usage.system_time()).num_microseconds();
    Duration::from_micros(micros.max(0) as u64)
}

/// Microseconds of `spent` per unit of work (0 for no work).
fn us_per(spent: Duration, units: u64) -> f64 {
    if units == 0 {
        return 0.0;
    }
    spent.as_secs_f64() * 1e6 / units as f64
}

/// A process's CPU in clock ticks: its own threads, and its reaped
/// children.
struct Stat {
    pid: i32,
    ppid: i32,
    own: u64,
    children: u64,
}

fn read_stat(pid: &str) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Parses `/proc/PID/stat`. The command name (field 2) is in parentheses
/// and may hold spaces or parentheses itself, so fields are counted from
/// the last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let pid = text.split(' ').next()?.parse().ok()?;
    let rest = &text[text.rfind(')')? + 2..];
    // After the name: state(3) ppid(4) … utime(14) stime(15) cutime(16)
    // cstime(17); `rest` starts at field 3.
    let fields: Vec<&str> = rest.split(' ').collect();
    let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    Some(Stat {
        pid,
        ppid: fields.get(1)?.parse().ok()?,
        own: field(14)? + field(15)?,
        children: field(16)? + field(17)?,
    })
}

fn all_process_stats() -> Vec<Stat> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| {
            let name = e.ok()?.file_name();
            let name = name.to_str()?;
            name.bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| read_stat(name))?
        })
        .collect()
}

/// The machine's busy and total CPU ticks since boot, over all cores
/// (`/proc/stat`: idle and iowait are the idle ones).
fn machine_ticks() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = text.lines().find(|l| l.starts_with("cpu ")) else {
        return (0, 0);
    };
    let values: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: u64 = values.iter().take(8).sum();
    let idle = values.get(3).copied().unwrap_or(0) + values.get(4).copied().unwrap_or(0);
    (total.saturating_sub(idle), total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_from_the_end_of_the_name() {
        let line = "4242 (post gres) (x)) S 17 4242 4242 0 -1 4194560 100 0 0 0 \
                    250 50 7 3 20 0 1 0 1000 1000 100";
        let stat = parse_stat(line).expect("parses");
        assert_eq!(stat.pid, 4242);
        assert_eq!(stat.ppid, 17);
        assert_eq!(stat.own, 300);
        assert_eq!(stat.children, 10);
    }

    #[test]
    fn a_truncated_stat_line_is_none() {
        assert!(parse_stat("12 (x) S 1 2 3").is_none());
        assert!(parse_stat("garbage").is_none());
    }

    #[test]
    fn our_own_stat_and_the_machines_are_read() {
        let own = read_stat("self").expect("our own stat");
        assert_eq!(own.pid, std::process::id() as i32);
        let (busy, total) = machine_ticks();
        assert!(total > 0 && busy <= total);
    }
}
