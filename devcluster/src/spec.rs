//! Which servers a dev cluster has, and on which loopback ports.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::Error;

/// Every port [`Spec::free_ports`] handed out in this process.
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// One MariaDB cluster: a master and its minions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterSpec {
    /// The cluster's name; nodes are called `<name>-master`,
    /// `<name>-minion1`, ….
    pub name: String,
    /// The master's port.
    pub master_port: u16,
    /// One port per minion.
    pub minion_ports: Vec<u16>,
    /// The node that is the master now, when a minion has been promoted
    /// (`mezzanine cluster promote`); nodes keep their names and folders,
    /// only their roles change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub master: Option<String>,
}

impl ClusterSpec {
    /// The names and ports of its nodes: `<name>-master` first, then
    /// `<name>-minion1`, … (the names they were created with).
    pub fn members(&self) -> Vec<(String, u16)> {
        std::iter::once((format!("{}-master", self.name), self.master_port))
            .chain(
                self.minion_ports
                    .iter()
                    .enumerate()
                    .map(|(i, p)| (format!("{}-minion{}", self.name, i + 1), *p)),
            )
            .collect()
    }

    /// The node that is the master now.
    pub fn current_master(&self) -> String {
        self.master
            .clone()
            .unwrap_or_else(|| format!("{}-master", self.name))
    }
}

/// A whole dev cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec {
    /// The PostgreSQL server's port.
    pub postgres_port: u16,
    /// The MariaDB clusters.
    pub clusters: Vec<ClusterSpec>,
}

/// The part a node plays.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// The PostgreSQL server (the legacy store).
    Postgres,
    /// A MariaDB cluster's master.
    Master {
        /// Its cluster.
        cluster: String,
        /// How many minions replicate from it. With none, its commits do
        /// not wait for a semi-synchronous acknowledgement that could never
        /// come.
        minions: usize,
    },
    /// A MariaDB replica.
    Minion {
        /// Its cluster.
        cluster: String,
        /// Where it replicates from.
        master_port: u16,
    },
}

impl Role {
    /// Whether the node is a MariaDB server.
    pub fn is_mariadb(&self) -> bool {
        !matches!(self, Role::Postgres)
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Role::Postgres => f.write_str("postgres"),
            Role::Master { cluster, .. } => write!(f, "master of {cluster}"),
            Role::Minion { cluster, .. } => write!(f, "minion of {cluster}"),
        }
    }
}

/// One server of the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSpec {
    /// `postgres`, `a-master`, `a-minion1`, ….
    pub name: String,
    /// What it is.
    pub role: Role,
    /// Its loopback port.
    pub port: u16,
    /// MariaDB `server_id`, unique in the dev cluster (0 for PostgreSQL).
    pub server_id: u32,
}

impl Spec {
    /// The ports of `config/examples/local.toml`: PostgreSQL on 55432,
    /// clusters `a` (33061-33063) and `b` (33071-33073).
    pub fn local() -> Spec {
        Spec {
            postgres_port: 55432,
            clusters: vec![
                ClusterSpec {
                    name: "a".into(),
                    master_port: 33061,
                    minion_ports: vec![33062, 33063],
                    master: None,
                },
                ClusterSpec {
                    name: "b".into(),
                    master_port: 33071,
                    minion_ports: vec![33072, 33073],
                    master: None,
                },
            ],
        }
    }

    /// Clusters with these names, `minions` minions each, on free ports.
    ///
    /// The ports are drawn below the kernel's ephemeral range
    /// (`net.ipv4.ip_local_port_range`), never from it: a port the kernel
    /// hands out for `bind(0)` is also what it hands the next outgoing
    /// connection, so with many clients about, a server's port could be
    /// taken by a client socket between the pick and the server's bind (or
    /// a readiness ping could connect to itself on it). Each is checked by
    /// binding it, and every listener is held until all are chosen so none
    /// repeats. A port is never handed out twice in one process
    /// ([`HANDED_OUT`]): released when chosen, it is free again until its
    /// server binds it, a second or more for MariaDB, and a test starting
    /// a cluster of its own alongside could pick it in that window (CI saw
    /// a minion refused with "Address already in use").
    pub fn free_ports(names: &[&str], minions: usize) -> Result<Spec, Error> {
        let mut handed = HANDED_OUT
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = 1 + names.len() * (1 + minions);
        let (low, high) = server_port_range();
        let span = u64::from(high - low);
        let mut state = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ (u64::from(std::process::id()) << 32);
        let mut listeners: Vec<TcpListener> = Vec::with_capacity(count);
        for _ in 0..count * 200 {
            if listeners.len() == count {
                break;
            }
            // xorshift64*: no need for a crate to spread picks out.
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            let port = low + (state.wrapping_mul(0x2545_f491_4f6c_dd1d) % span) as u16;
            if handed.contains(&port) {
                continue;
            }
            if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) {
                listeners.push(listener);
            }
        }
        if listeners.len() < count {
            return Err(Error::io(
                "finding free ports",
                std::io::Error::new(
                    std::io::ErrorKind::AddrInUse,
                    format!("fewer than {count} free ports in {low}-{high}"),
                ),
            ));
        }
        let ports = listeners
            .iter()
            .map(|l| l.local_addr().map(|a| a.port()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Error::io("finding free ports", e))?;
        handed.extend(ports.iter().copied());
        let mut ports = ports.into_iter();
        let mut next = || ports.next().expect("one port per node");
        let postgres_port = next();
        let clusters = names
            .iter()
            .map(|name| ClusterSpec {
                name: name.to_string(),
                master_port: next(),
                minion_ports: (0..minions).map(|_| next()).collect(),
                master: None,
            })
            .collect();
        Ok(Spec {
            postgres_port,
            clusters,
        })
    }

    /// Every node, PostgreSQL first, then each master and its minions.
    pub fn nodes(&self) -> Vec<NodeSpec> {
        let mut nodes = vec![NodeSpec {
            name: "postgres".into(),
            role: Role::Postgres,
            port: self.postgres_port,
            server_id: 0,
        }];
        let mut server_id = 1;
        for c in &self.clusters {
            let master = c.current_master();
            let members = c.members();
            let master_port = members
                .iter()
                .find(|(name, _)| *name == master)
                .map_or(c.master_port, |(_, port)| *port);
            let minions = members.len().saturating_sub(1);
            for (name, port) in members {
                let role = if name == master {
                    Role::Master {
                        cluster: c.name.clone(),
                        minions,
                    }
                } else {
                    Role::Minion {
                        cluster: c.name.clone(),
                        master_port,
                    }
                };
                nodes.push(NodeSpec {
                    name,
                    role,
                    port,
                    server_id,
                });
                server_id += 1;
            }
        }
        nodes
    }

    /// This spec with the promotions recorded in `recorded`, if both
    /// describe the same servers.
    pub fn with_roles_of(&self, recorded: &Spec) -> Spec {
        let mut spec = self.clone();
        for (mine, theirs) in spec.clusters.iter_mut().zip(&recorded.clusters) {
            if mine.name == theirs.name
                && mine.master_port == theirs.master_port
                && mine.minion_ports == theirs.minion_ports
            {
                mine.master = theirs.master.clone();
            }
        }
        spec
    }

    pub(crate) fn write(&self, path: &Path) -> Result<(), Error> {
        let text = serde_json::to_string_pretty(self).expect("a spec always serializes");
        std::fs::write(path, text).map_err(|e| Error::io(format!("writing {}", path.display()), e))
    }

    pub(crate) fn read(path: &Path) -> Result<Spec, Error> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        serde_json::from_str(&text).map_err(|e| {
            Error::Server(format!(
                "{} is not a dev cluster record: {e}",
                path.display()
            ))
        })
    }
}

/// Where dev servers' ports are drawn from: from 10000 up to just below
/// the kernel's ephemeral range (read from /proc; 32768 when unreadable,
/// Linux's default start).
fn server_port_range() -> (u16, u16) {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    // A range that starts this low leaves no room below it; no area is
    // clear of it then, and the top, past Linux's default range, is the
    // least used.
    if ephemeral_low > 12000 {
        (10000, ephemeral_low)
    } else {
        (61000, 65535)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_distinct_and_below_the_ephemeral_range() {
        let spec = Spec::free_ports(&["a", "b", "c"], 2).unwrap();
        let ports: Vec<u16> = spec.nodes().iter().map(|n| n.port).collect();
        assert_eq!(ports.len(), 10);
        let distinct: std::collections::BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
        let (low, high) = super::server_port_range();
        assert!(
            ports.iter().all(|p| (low..high).contains(p)),
            "{ports:?} not in {low}-{high}"
        );
    }

    #[test]
    fn nodes_are_named_by_cluster_and_role_with_unique_server_ids() {
        let nodes = Spec::local().nodes();
        let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "postgres",
                "a-master",
                "a-minion1",
                "a-minion2",
                "b-master",
                "b-minion1",
                "b-minion2"
            ]
        );
        let mut ids: Vec<u32> = nodes.iter().map(|n| n.server_id).collect();
        ids.dedup();
        assert_eq!(ids.len(), 7);
        assert_eq!(
            nodes[5].role,
            Role::Minion {
                cluster: "b".into(),
                master_port: 33071
            }
        );
    }

    #[test]
    fn a_promoted_minion_is_the_master_and_the_others_follow_it() {
        let mut spec = Spec::local();
        spec.clusters[0].master = Some("a-minion1".into());
        let nodes = spec.nodes();
        let role = |name: &str| nodes.iter().find(|n| n.name == name).unwrap().role.clone();
        assert_eq!(
            role("a-minion1"),
            Role::Master {
                cluster: "a".into(),
                minions: 2
            }
        );
        assert_eq!(
            role("a-master"),
            Role::Minion {
                cluster: "a".into(),
                master_port: 33062
            }
        );
        assert_eq!(
            role("a-minion2"),
            Role::Minion {
                cluster: "a".into(),
                master_port: 33062
            }
        );
        assert_eq!(Spec::local().with_roles_of(&spec), spec);
        let text = serde_json::to_string(&Spec::local()).unwrap();
        assert!(
            !text.contains("\"master\":"),
            "no promotion, no field: {text}"
        );
    }

    #[test]
    fn free_ports_are_distinct() {
        let spec = Spec::free_ports(&["a", "b"], 2).unwrap();
        let mut ports: Vec<u16> = spec.nodes().iter().map(|n| n.port).collect();
        ports.sort();
        ports.dedup();
        assert_eq!(ports.len(), 7);
    }

    #[test]
    fn a_port_is_never_handed_out_twice_in_a_process() {
        // Released at once, as a cluster's are until its servers bind:
        // later picks still do not repeat them.
        let mut seen = BTreeSet::new();
        for _ in 0..50 {
            let spec = Spec::free_ports(&["a"], 2).unwrap();
            for node in spec.nodes() {
                assert!(
                    seen.insert(node.port),
                    "port {} handed out twice",
                    node.port
                );
            }
        }
    }
}
