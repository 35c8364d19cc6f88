//! `keelctl partition reassign`: Kafka's `kafka-reassign-partitions` over
//! AlterPartitionReassignments / ListPartitionReassignments (KIP-455).
//!
//! The plan file is Kafka's JSON: `{"version": 1, "partitions": [{"topic": "t", "partition":
//! 0, "replicas": [2, 3, 4]}, ...]}` (`log_dirs` is accepted and must be absent or all
//! `"any"`: Keel has one log dir per broker). `--execute` prints the current assignment of the
//! plan's partitions in the same format first (save it to roll back), refuses a plan naming a
//! partition that is already moving unless `--additional` (as Kafka's tool), then starts the
//! moves. `--verify` says per partition whether the move completed, is in progress, or left
//! other replicas; it exits 0 only when every partition of the plan has its target replicas
//! and none is moving. `--cancel` cancels the plan's moves in progress (the added replicas are
//! dropped, the original replicas kept). `--list` shows every move in progress.
//! `--generate --brokers 1,2,4 --topics t1,t2` proposes a plan ([`generate`]) and changes
//! nothing. `--execute --throttle B` first throttles the moves (KIP-73, [`throttle_plan`]);
//! a `--verify` that finds the plan complete, and `--cancel`, remove the throttles (unless
//! `--preserve-throttles`), as Kafka's tool does. `--execute` refuses a plan naming an
//! unregistered broker, a broker twice or no replica before it changes anything (Kafka's tool
//! checks the broker ids first too).

use std::path::PathBuf;

use keel_proto::ErrorCode;
use serde::{Deserialize, Serialize};

use super::{CliError, CliResult, Ctx};

/// Arguments of `partition reassign`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("action").required(true).args(["execute", "verify", "cancel", "list", "generate"])))]
pub struct ReassignArgs {
    /// Propose a plan moving the partitions of --topics onto --brokers (printed, nothing
    /// changes): replica counts balanced, racks spread, leaders spread, fewest moves.
    #[arg(long, requires_all = ["brokers", "topics"])]
    pub generate: bool,
    /// With --generate: the brokers to place replicas on (comma-separated ids).
    #[arg(long)]
    pub brokers: Option<String>,
    /// With --generate: the topics whose partitions to place (comma-separated names).
    #[arg(long)]
    pub topics: Option<String>,
    /// Start the moves of this plan (Kafka's reassignment JSON).
    #[arg(long, value_name = "FILE")]
    pub execute: Option<PathBuf>,
    /// Check whether the moves of this plan completed.
    #[arg(long, value_name = "FILE")]
    pub verify: Option<PathBuf>,
    /// Cancel the moves of this plan that are in progress.
    #[arg(long, value_name = "FILE")]
    pub cancel: Option<PathBuf>,
    /// List the moves in progress.
    #[arg(long)]
    pub list: bool,
    /// With --execute: also change partitions that are already moving (their new target
    /// replaces the old one).
    #[arg(long, requires = "execute")]
    pub additional: bool,
    /// With --execute: throttle the moves to this many bytes per second (KIP-73): sets
    /// `leader.replication.throttled.rate` and `follower.replication.throttled.rate` on every
    /// broker of the moves and the topics' throttled-replicas lists, before the moves start;
    /// replication of replicas already in sync is not throttled. `--verify` removes the
    /// throttle once the plan is done, `--cancel` when it cancels. Run --execute --additional
    /// again to change it.
    #[arg(
        long,
        value_name = "BYTES_PER_SEC",
        requires = "execute",
        allow_hyphen_values = true
    )]
    pub throttle: Option<u64>,
    /// With --verify or --cancel: keep the throttles (Kafka's `--preserve-throttles`).
    #[arg(long, conflicts_with_all = ["execute", "list", "generate"])]
    pub preserve_throttles: bool,
}

/// `(partition, broker)` pairs of a throttled-replicas list.
pub type ReplicaPairs = Vec<(i32, i32)>;

/// The throttle settings of a plan (Kafka `ReassignPartitionsCommand.calculateLeaderThrottles`
/// / `calculateFollowerThrottles` / `modifyInterBrokerThrottle`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThrottlePlan {
    /// Per topic: `(leader list, follower list)` of `partition:broker` pairs, sorted; the
    /// leader list names the replicas the partition has now (they send), the follower list
    /// the replicas the move adds (they fetch).
    pub topics: std::collections::BTreeMap<String, (ReplicaPairs, ReplicaPairs)>,
    /// Every broker of a moving partition, now or in its target: they get the rates.
    pub brokers: std::collections::BTreeSet<i32>,
}

/// The throttles of the partitions of `plan` that move: `current(topic, partition)` is the
/// partition's replicas now (`None`: unknown partition, left to the controller's answer).
/// Partitions whose target equals their replicas are left out.
pub fn throttle_plan(
    plan: &[PlanPartition],
    current: &dyn Fn(&str, i32) -> Option<Vec<i32>>,
) -> ThrottlePlan {
    let mut out = ThrottlePlan::default();
    for p in plan {
        let Some(now) = current(&p.topic, p.partition) else {
            continue;
        };
        if now == p.replicas {
            continue;
        }
        let (leaders, followers) = out.topics.entry(p.topic.clone()).or_default();
        leaders.extend(now.iter().map(|b| (p.partition, *b)));
        followers.extend(
            p.replicas
                .iter()
                .filter(|b| !now.contains(b))
                .map(|b| (p.partition, *b)),
        );
        out.brokers.extend(now.iter().chain(&p.replicas));
    }
    for (leaders, followers) in out.topics.values_mut() {
        leaders.sort_unstable();
        leaders.dedup();
        followers.sort_unstable();
        followers.dedup();
    }
    out
}

/// A throttled-replicas value: `existing` (the topic's current value, if any) with `pairs`
/// added; `*` stays `*`.
pub fn merged_throttle_list(existing: Option<&str>, pairs: &[(i32, i32)]) -> String {
    use keel_metadata_log::configs::ThrottledReplicas;
    let mut all = match existing.map(ThrottledReplicas::parse) {
        Some(Ok(ThrottledReplicas::All)) => return "*".into(),
        Some(Ok(ThrottledReplicas::Listed(l))) => l,
        _ => Vec::new(),
    };
    all.extend_from_slice(pairs);
    all.sort_unstable();
    all.dedup();
    all.iter()
        .map(|(p, b)| format!("{p}:{b}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The throttle keys `keelctl partition reassign` sets and clears (KIP-73).
const LEADER_REPLICAS: &str = "leader.replication.throttled.replicas";
const FOLLOWER_REPLICAS: &str = "follower.replication.throttled.replicas";
const LEADER_RATE: &str = "leader.replication.throttled.rate";
const FOLLOWER_RATE: &str = "follower.replication.throttled.rate";

/// Sets the throttle of `tp` at `rate` bytes/s (before the moves start).
async fn set_throttles(
    admin: &crate::admin::Admin,
    image: &keel_metadata_log::MetadataImage,
    tp: &ThrottlePlan,
    rate: u64,
) -> Result<(), CliError> {
    use crate::admin::ConfigTarget;
    use keel_metadata_log::ConfigResource;
    for (topic, (leaders, followers)) in &tp.topics {
        let res = ConfigResource::Topic(topic.clone());
        let set = vec![
            (
                LEADER_REPLICAS.to_string(),
                merged_throttle_list(image.config(&res, LEADER_REPLICAS), leaders),
            ),
            (
                FOLLOWER_REPLICAS.to_string(),
                merged_throttle_list(image.config(&res, FOLLOWER_REPLICAS), followers),
            ),
        ];
        admin
            .alter_configs(&ConfigTarget::Topic(topic.clone()), &set, &[], false)
            .await?;
    }
    let rates = vec![
        (LEADER_RATE.to_string(), rate.to_string()),
        (FOLLOWER_RATE.to_string(), rate.to_string()),
    ];
    for b in tp.brokers.iter().filter(|b| image.broker(**b).is_some()) {
        admin
            .alter_configs(&ConfigTarget::Broker(*b), &rates, &[], false)
            .await?;
    }
    Ok(())
}

/// Removes the throttles of a completed plan (Kafka `clearAllThrottles`): the rates of every
/// registered broker that has one, the throttled-replicas lists of the plan's topics. Returns
/// what it cleared, for the output.
async fn clear_throttles(
    admin: &crate::admin::Admin,
    image: &keel_metadata_log::MetadataImage,
    plan: &Plan,
) -> Result<(Vec<i32>, Vec<String>), CliError> {
    use crate::admin::ConfigTarget;
    use keel_metadata_log::ConfigResource;
    let rates = [LEADER_RATE.to_string(), FOLLOWER_RATE.to_string()];
    let mut brokers = Vec::new();
    for b in image.brokers().keys() {
        let res = ConfigResource::Broker(*b);
        if rates.iter().any(|k| image.config(&res, k).is_some()) {
            admin
                .alter_configs(&ConfigTarget::Broker(*b), &[], &rates, false)
                .await?;
            brokers.push(*b);
        }
    }
    let lists = [LEADER_REPLICAS.to_string(), FOLLOWER_REPLICAS.to_string()];
    let mut topics: Vec<String> = Vec::new();
    for p in &plan.partitions {
        let res = ConfigResource::Topic(p.topic.clone());
        if !topics.contains(&p.topic) && lists.iter().any(|k| image.config(&res, k).is_some()) {
            admin
                .alter_configs(&ConfigTarget::Topic(p.topic.clone()), &[], &lists, false)
                .await?;
            topics.push(p.topic.clone());
        }
    }
    Ok((brokers, topics))
}

/// Kafka's reassignment JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// Always 1.
    pub version: i32,
    /// The partitions and their target replicas.
    pub partitions: Vec<PlanPartition>,
}

/// One partition of a [`Plan`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanPartition {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// Target replicas, the first the preferred leader.
    pub replicas: Vec<i32>,
    /// Kafka's per-replica log directories; only `"any"` is accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_dirs: Option<Vec<String>>,
}

/// Most partitions a plan may name (the AlterPartitionReassignments bound).
const MAX_PLAN_PARTITIONS: usize = keel_proto::limits::MAX_PARTITIONS_PER_REQUEST;

/// Parses and checks a plan (pure): version 1, at least one partition, no partition twice,
/// `log_dirs` absent or all `"any"` with one per replica. The replica lists themselves are
/// checked by the controller (INVALID_REPLICA_ASSIGNMENT).
///
/// Errors name what is wrong (usage errors).
pub fn parse_plan(text: &str) -> Result<Plan, String> {
    let plan: Plan =
        serde_json::from_str(text).map_err(|e| format!("not a reassignment plan: {e}"))?;
    if plan.version != 1 {
        return Err(format!("version {} is not supported (1 is)", plan.version));
    }
    if plan.partitions.is_empty() {
        return Err("the plan names no partition".into());
    }
    if plan.partitions.len() > MAX_PLAN_PARTITIONS {
        return Err(format!(
            "the plan names {} partitions, more than {MAX_PLAN_PARTITIONS}",
            plan.partitions.len()
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for p in &plan.partitions {
        if !seen.insert((p.topic.as_str(), p.partition)) {
            return Err(format!(
                "partition {}-{} appears twice",
                p.topic, p.partition
            ));
        }
        if let Some(dirs) = &p.log_dirs
            && (dirs.len() != p.replicas.len() || dirs.iter().any(|d| d != "any"))
        {
            return Err(format!(
                "partition {}-{}: log_dirs must be \"any\" for each replica (Keel has one log \
                 directory per broker)",
                p.topic, p.partition
            ));
        }
    }
    Ok(plan)
}

fn read_plan(path: &PathBuf) -> Result<Plan, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::usage(format!("{}: {e}", path.display())))?;
    parse_plan(&text).map_err(|e| CliError::usage(format!("{}: {e}", path.display())))
}

/// What `--verify` says of one partition (pure).
fn verify_line(p: &PlanPartition, current: Option<(&[i32], bool)>) -> (bool, String) {
    let name = format!("{}-{}", p.topic, p.partition);
    match current {
        None => (false, format!("Partition {name} does not exist.")),
        Some((_, true)) => (
            false,
            format!("Reassignment of partition {name} is still in progress."),
        ),
        Some((replicas, false)) if replicas == p.replicas.as_slice() => (
            true,
            format!("Reassignment of partition {name} is completed."),
        ),
        Some((replicas, false)) => (
            false,
            format!(
                "There is no active reassignment of partition {name}, but replica set is \
                 {replicas:?} rather than {:?}.",
                p.replicas
            ),
        ),
    }
}

/// One partition for [`generate`]: topic, index and current replicas (preferred first).
pub type Placed = (String, i32, Vec<i32>);

/// A plan placing every partition of `partitions` on `brokers` (pure; Kafka's
/// `--generate` places from scratch, this keeps what it can): each partition keeps its
/// replication factor; replicas already on an allowed broker stay while that broker holds
/// fewer than its share (`ceil(replicas / brokers)`); the others go to the allowed broker with
/// the fewest replicas, preferring racks the partition does not use yet (`rack_of`, `None` =
/// no rack), then the lower id. The preferred leader is the current one when it stays and has
/// fewer than its share of leaderships, else the member leading the fewest partitions so far.
///
/// Errors: no broker, or a replication factor above the number of brokers.
pub fn generate(
    partitions: &[Placed],
    brokers: &[i32],
    rack_of: &dyn Fn(i32) -> Option<String>,
) -> Result<Vec<PlanPartition>, String> {
    if brokers.is_empty() {
        return Err("no broker to place replicas on".into());
    }
    let total: usize = partitions.iter().map(|p| p.2.len()).sum();
    let share = total.div_ceil(brokers.len());
    let leader_share = partitions.len().div_ceil(brokers.len());
    let mut load: std::collections::BTreeMap<i32, usize> =
        brokers.iter().map(|b| (*b, 0)).collect();
    let mut leads: std::collections::BTreeMap<i32, usize> =
        brokers.iter().map(|b| (*b, 0)).collect();
    let mut out = Vec::with_capacity(partitions.len());
    for (topic, partition, current) in partitions {
        let rf = current.len();
        if rf > brokers.len() {
            return Err(format!(
                "{topic}-{partition} has {rf} replicas but only {} brokers were given",
                brokers.len()
            ));
        }
        let mut chosen: Vec<i32> = Vec::with_capacity(rf);
        for b in current {
            if let Some(l) = load.get_mut(b)
                && *l < share
            {
                *l += 1;
                chosen.push(*b);
            }
        }
        while chosen.len() < rf {
            let racks: Vec<Option<String>> = chosen.iter().map(|b| rack_of(*b)).collect();
            let pick = brokers
                .iter()
                .copied()
                .filter(|b| !chosen.contains(b))
                .min_by_key(|b| {
                    let rack = rack_of(*b);
                    let rack_used = rack.is_some() && racks.contains(&rack);
                    (rack_used, load[b], *b)
                })
                .expect("rf <= brokers leaves a broker to pick");
            *load.get_mut(&pick).expect("an allowed broker") += 1;
            chosen.push(pick);
        }
        let keep_leader = current
            .first()
            .filter(|l| chosen.contains(l) && leads[*l] < leader_share)
            .copied();
        let leader = keep_leader.unwrap_or_else(|| {
            *chosen
                .iter()
                .min_by_key(|b| (leads[*b], **b))
                .expect("a partition has replicas")
        });
        *leads.get_mut(&leader).expect("an allowed broker") += 1;
        let mut replicas = vec![leader];
        replicas.extend(chosen.into_iter().filter(|b| *b != leader));
        out.push(PlanPartition {
            topic: topic.clone(),
            partition: *partition,
            replicas,
            log_dirs: None,
        });
    }
    Ok(out)
}

/// The moves that take every replica off broker `leaving` (pure): in each partition of
/// `partitions` that has it, `leaving` is replaced, in place, by the broker of `targets` that
/// the partition does not have, preferring racks the partition does not use yet, then the
/// fewest replicas (`load`, counted over the whole cluster and updated as it goes), then the
/// lower id. Partitions without `leaving` are left out.
///
/// Errors: a partition with no broker of `targets` left to take the replica.
pub fn decommission_plan(
    partitions: &[Placed],
    leaving: i32,
    targets: &[i32],
    rack_of: &dyn Fn(i32) -> Option<String>,
    load: &mut std::collections::BTreeMap<i32, usize>,
) -> Result<Vec<PlanPartition>, String> {
    let mut out = Vec::new();
    for (topic, partition, replicas) in partitions {
        let Some(slot) = replicas.iter().position(|b| *b == leaving) else {
            continue;
        };
        let racks: Vec<Option<String>> = replicas
            .iter()
            .filter(|b| **b != leaving)
            .map(|b| rack_of(*b))
            .collect();
        let pick = targets
            .iter()
            .copied()
            .filter(|b| *b != leaving && !replicas.contains(b))
            .min_by_key(|b| {
                let rack = rack_of(*b);
                let rack_used = rack.is_some() && racks.contains(&rack);
                (rack_used, load.get(b).copied().unwrap_or(0), *b)
            })
            .ok_or_else(|| {
                format!(
                    "{topic}-{partition} (replicas {replicas:?}) has no other broker to move to"
                )
            })?;
        *load.entry(pick).or_insert(0) += 1;
        let mut target = replicas.clone();
        target[slot] = pick;
        out.push(PlanPartition {
            topic: topic.clone(),
            partition: *partition,
            replicas: target,
            log_dirs: None,
        });
    }
    Ok(out)
}

/// `broker decommission ID`: moves every replica off the broker (a reassignment per partition
/// that has it), waits until none is left (at most `timeout`), then unregisters it when its
/// process is stopped (fenced), or says to stop it and run `broker unregister` (a running
/// broker would register again).
pub(super) async fn decommission(id: i32, timeout: std::time::Duration, ctx: &Ctx) -> CliResult {
    let admin = ctx.admin()?;
    let image = admin.metadata_image().await?;
    let Some(me) = image.broker(id) else {
        return Err(CliError::new(format!("broker {id} is not registered")));
    };
    let fenced_at_start = me.fenced;
    let mut partitions: Vec<Placed> = Vec::new();
    let mut load: std::collections::BTreeMap<i32, usize> = Default::default();
    for (name, tid) in image.topics().by_name.iter() {
        let Some(t) = image.topics().by_id.get(tid) else {
            continue;
        };
        for (p, reg) in &t.partitions {
            for b in &reg.replicas {
                *load.entry(*b).or_insert(0) += 1;
            }
            if !reg.replicas.contains(&id) {
                continue;
            }
            if !reg.adding_replicas.is_empty() || !reg.removing_replicas.is_empty() {
                return Err(CliError::new(format!(
                    "{name}-{p} is being reassigned: let it finish or cancel it (keelctl \
                     partition reassign --list) first"
                )));
            }
            partitions.push((name.clone(), *p, reg.replicas.clone()));
        }
    }
    let targets: Vec<i32> = image
        .brokers()
        .values()
        .filter(|b| b.id != id && !b.fenced && !b.in_controlled_shutdown)
        .map(|b| b.id)
        .collect();
    let rack_of = |b: i32| image.broker(b).and_then(|r| r.rack.clone());
    let plan =
        decommission_plan(&partitions, id, &targets, &rack_of, &mut load).map_err(CliError::new)?;
    if !plan.is_empty() {
        let moves: Vec<(String, i32, Option<Vec<i32>>)> = plan
            .iter()
            .map(|p| (p.topic.clone(), p.partition, Some(p.replicas.clone())))
            .collect();
        let refused: Vec<String> = admin
            .alter_partition_reassignments(&moves)
            .await?
            .into_iter()
            .filter_map(|(t, p, e)| e.map(|e| format!("{t}-{p}: {}", e.message)))
            .collect();
        if !refused.is_empty() {
            return Err(CliError::new(format!(
                "moves refused: {}",
                refused.join("; ")
            )));
        }
        outln!("moving {} partition(s) off broker {id}", plan.len());
    }
    let deadline = std::time::Instant::now() + timeout;
    let mut last_report = std::time::Instant::now();
    let fenced = loop {
        let image = admin.metadata_image().await?;
        let left = image
            .topics()
            .by_id
            .values()
            .flat_map(|t| t.partitions.values())
            .filter(|r| r.replicas.contains(&id))
            .count();
        if left == 0 {
            break image.broker(id).is_none_or(|b| b.fenced);
        }
        if std::time::Instant::now() >= deadline {
            return Err(CliError::new(format!(
                "{left} partition(s) still have a replica on broker {id} after {timeout:?} \
                 (keelctl partition reassign --list shows them)"
            )));
        }
        if last_report.elapsed() >= std::time::Duration::from_secs(10) {
            outln!("{left} partition(s) still have a replica on broker {id}");
            last_report = std::time::Instant::now();
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };
    if fenced || fenced_at_start {
        admin.unregister_broker(id).await?;
        outln!("broker {id} holds no replica and is unregistered");
    } else {
        outln!(
            "broker {id} holds no replica; stop its process, then run `keelctl broker \
             unregister {id}` (a running broker registers again)"
        );
    }
    Ok(())
}

pub(super) async fn run(a: ReassignArgs, ctx: &Ctx) -> CliResult {
    let admin = ctx.admin()?;
    if a.generate {
        let brokers = super::parse_broker_ids("--brokers", a.brokers.as_deref().unwrap_or(""))?;
        let image = admin.metadata_image().await?;
        if let Some(b) = brokers.iter().find(|b| image.broker(**b).is_none()) {
            return Err(CliError::usage(format!(
                "--brokers: broker {b} is not registered"
            )));
        }
        let mut partitions: Vec<Placed> = Vec::new();
        for name in a.topics.as_deref().unwrap_or("").split(',').map(str::trim) {
            let Some(t) = image.topics().get_by_name(name) else {
                return Err(CliError::usage(format!("--topics: unknown topic {name:?}")));
            };
            for (p, reg) in &t.partitions {
                let original: Vec<i32> = reg
                    .replicas
                    .iter()
                    .copied()
                    .filter(|b| {
                        !reg.adding_replicas.contains(b) && !reg.removing_replicas.contains(b)
                    })
                    .collect();
                partitions.push((name.to_string(), *p, original));
            }
        }
        let rack_of = |b: i32| image.broker(b).and_then(|r| r.rack.clone());
        let proposed = generate(&partitions, &brokers, &rack_of).map_err(CliError::usage)?;
        let current: Vec<PlanPartition> = partitions
            .into_iter()
            .map(|(topic, partition, replicas)| PlanPartition {
                topic,
                partition,
                replicas,
                log_dirs: None,
            })
            .collect();
        let json = |partitions| {
            serde_json::to_string(&Plan {
                version: 1,
                partitions,
            })
            .expect("a plan serializes")
        };
        if ctx.json {
            outln!("{}", json(proposed));
        } else {
            outln!(
                "Current partition replica assignment\n{}\n\nProposed partition reassignment \
                 configuration\n{}",
                json(current),
                json(proposed)
            );
        }
        return Ok(());
    }
    if a.list {
        let moving = admin.list_partition_reassignments(&[]).await?;
        if ctx.json {
            return ctx.print_json(&moving_rows(&moving));
        }
        if moving.is_empty() {
            outln!("No partition reassignment is in progress.");
        }
        for t in &moving {
            for p in &t.partitions {
                outln!(
                    "{}-{}: replicas {:?}, adding {:?}, removing {:?}",
                    t.name,
                    p.partition_index,
                    p.replicas,
                    p.adding_replicas,
                    p.removing_replicas
                );
            }
        }
        return Ok(());
    }
    let (path, cancel) = match (&a.execute, &a.verify, &a.cancel) {
        (Some(p), _, _) => (p, false),
        (_, Some(p), _) => {
            let plan = read_plan(p)?;
            let image = admin.metadata_image().await?;
            let mut all = true;
            for p in &plan.partitions {
                let current = image
                    .topics()
                    .get_by_name(&p.topic)
                    .and_then(|t| t.partitions.get(&p.partition))
                    .map(|r| {
                        let moving =
                            !r.adding_replicas.is_empty() || !r.removing_replicas.is_empty();
                        (r.replicas.clone(), moving)
                    });
                let (done, line) =
                    verify_line(p, current.as_ref().map(|(r, m)| (r.as_slice(), *m)));
                all &= done;
                outln!("{line}");
            }
            if all && !a.preserve_throttles {
                let (brokers, topics) = clear_throttles(&admin, &image, &plan).await?;
                if !brokers.is_empty() && !ctx.json {
                    outln!("Clearing broker-level throttles on brokers {brokers:?}");
                }
                for t in topics.iter().filter(|_| !ctx.json) {
                    outln!("Clearing topic-level throttles on topic {t}");
                }
            }
            return if all {
                Ok(())
            } else {
                Err(CliError::new(
                    "not every reassignment of the plan has completed".to_string(),
                ))
            };
        }
        (_, _, Some(p)) => (p, true),
        _ => unreachable!("clap requires one action"),
    };
    let plan = read_plan(path)?;
    let moves: Vec<(String, i32, Option<Vec<i32>>)> = plan
        .partitions
        .iter()
        .map(|p| {
            let target = (!cancel).then(|| p.replicas.clone());
            (p.topic.clone(), p.partition, target)
        })
        .collect();
    if !cancel {
        let image = admin.metadata_image().await?;
        let mut current = Vec::new();
        let mut moving = Vec::new();
        for p in &plan.partitions {
            if let Some(r) = image
                .topics()
                .get_by_name(&p.topic)
                .and_then(|t| t.partitions.get(&p.partition))
            {
                if !r.adding_replicas.is_empty() || !r.removing_replicas.is_empty() {
                    moving.push(format!("{}-{}", p.topic, p.partition));
                }
                let original: Vec<i32> = r
                    .replicas
                    .iter()
                    .copied()
                    .filter(|b| !r.adding_replicas.contains(b))
                    .collect();
                current.push(PlanPartition {
                    topic: p.topic.clone(),
                    partition: p.partition,
                    replicas: original,
                    log_dirs: None,
                });
            }
        }
        // Kafka's tool refuses a plan naming an unknown broker (or a duplicate, or no replica)
        // before it changes anything, throttles included.
        for p in &plan.partitions {
            let name = format!("{}-{}", p.topic, p.partition);
            if p.replicas.is_empty() {
                return Err(CliError::usage(format!(
                    "{name}: the replica list is empty"
                )));
            }
            let mut seen = std::collections::BTreeSet::new();
            if let Some(b) = p.replicas.iter().find(|b| !seen.insert(**b)) {
                return Err(CliError::usage(format!(
                    "{name}: broker {b} appears twice in its replicas"
                )));
            }
            if let Some(b) = p.replicas.iter().find(|b| image.broker(**b).is_none()) {
                return Err(CliError::usage(format!(
                    "{name}: broker {b} is not registered (keelctl broker list); nothing changed"
                )));
            }
        }
        if !moving.is_empty() && !a.additional {
            return Err(CliError::new(format!(
                "cannot execute because there is an existing reassignment of {}: use \
                 --additional to replace its target, or --cancel it first",
                moving.join(", ")
            )));
        }
        if let Some(rate) = a.throttle {
            let replicas_now = |topic: &str, partition: i32| {
                image
                    .topics()
                    .get_by_name(topic)
                    .and_then(|t| t.partitions.get(&partition))
                    .map(|r| r.replicas.clone())
            };
            let tp = throttle_plan(&plan.partitions, &replicas_now);
            set_throttles(&admin, &image, &tp, rate).await?;
            if !ctx.json {
                outln!(
                    "Warning: You must run --verify periodically, until the reassignment \
                     completes, to ensure the throttle is removed.\nThe inter-broker throttle \
                     limit was set to {rate} B/s on brokers {:?}",
                    tp.brokers
                );
                if rate == 0 {
                    outln!(
                        "Warning: a throttle of 0 B/s stops the throttled replicas: the moves \
                         will not progress until it is raised (--execute --additional \
                         --throttle N) or the plan is cancelled (--cancel clears it)."
                    );
                }
            }
        }
        if !ctx.json {
            outln!(
                "Current partition replica assignment\n\n{}\n\nSave this to use as the \
                 --execute file during rollback",
                serde_json::to_string(&Plan {
                    version: 1,
                    partitions: current,
                })
                .expect("a plan serializes")
            );
        }
    }
    let results = admin.alter_partition_reassignments(&moves).await?;
    let mut failed = Vec::new();
    let mut rows = Vec::new();
    for (topic, p, err) in &results {
        let code = ErrorCode::from_proto(err.as_ref()).unwrap_or(ErrorCode::UnknownServerError);
        let error = (code != ErrorCode::None).then(|| {
            format!(
                "{} ({}): {}",
                code.name(),
                code.code(),
                err.as_ref().map(|e| e.message.as_str()).unwrap_or_default()
            )
        });
        if let Some(e) = &error {
            failed.push(format!("{topic}-{p}: {e}"));
        }
        rows.push(ResultRow {
            topic: topic.clone(),
            partition: *p,
            error,
        });
    }
    if ctx.json {
        ctx.print_json(&rows)?;
    } else {
        let verb = if cancel {
            "cancellation"
        } else {
            "reassignment"
        };
        let ok = rows.len() - failed.len();
        if ok > 0 {
            outln!("Successfully started {verb} of {ok} partition(s).");
        }
    }
    if cancel && !a.preserve_throttles {
        // Kafka's `--cancel` removes the throttles too (`cancelAssignment`): a cancelled plan
        // never reaches a --verify that would.
        let image = admin.metadata_image().await?;
        let (brokers, topics) = clear_throttles(&admin, &image, &plan).await?;
        if !brokers.is_empty() && !ctx.json {
            outln!("Clearing broker-level throttles on brokers {brokers:?}");
        }
        for t in topics.iter().filter(|_| !ctx.json) {
            outln!("Clearing topic-level throttles on topic {t}");
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(CliError::new(format!(
            "{} of {} partitions refused: {}",
            failed.len(),
            rows.len(),
            failed.join("; ")
        )))
    }
}

/// One partition's result of --execute / --cancel (JSON output).
#[derive(Debug, Serialize)]
struct ResultRow {
    topic: String,
    partition: i32,
    error: Option<String>,
}

/// One move in progress (JSON output of --list).
#[derive(Debug, Serialize)]
struct MovingRow {
    topic: String,
    partition: i32,
    replicas: Vec<i32>,
    adding_replicas: Vec<i32>,
    removing_replicas: Vec<i32>,
}

fn moving_rows(moving: &[keel_proto::controller::OngoingTopicReassignment]) -> Vec<MovingRow> {
    let mut rows = Vec::new();
    for t in moving {
        for p in &t.partitions {
            rows.push(MovingRow {
                topic: t.name.clone(),
                partition: p.partition_index,
                replicas: p.replicas.clone(),
                adding_replicas: p.adding_replicas.clone(),
                removing_replicas: p.removing_replicas.clone(),
            });
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_in_kafkas_format_parse_and_bad_ones_are_named() {
        let p = parse_plan(
            r#"{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2,3],"log_dirs":["any","any"]}]}"#,
        )
        .unwrap();
        assert_eq!(p.partitions[0].replicas, vec![2, 3]);
        for (text, want) in [
            (r#"{"version":2,"partitions":[]}"#, "version 2"),
            (r#"{"version":1,"partitions":[]}"#, "no partition"),
            (
                r#"{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1]},{"topic":"t","partition":0,"replicas":[2]}]}"#,
                "appears twice",
            ),
            (
                r#"{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":["/d"]}]}"#,
                "log_dirs",
            ),
            (
                r#"{"version":1,"partitions":[{"topic":"t"}]}"#,
                "not a reassignment plan",
            ),
            ("nope", "not a reassignment plan"),
        ] {
            let e = parse_plan(text).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn generated_plans_balance_replicas_and_leaders_and_keep_what_they_can() {
        let no_rack = |_: i32| None;
        // 12 RF-3 partitions on 1,2,3 moved onto 2,3,4: 2 and 3 keep theirs, 4 takes 1's.
        let parts: Vec<Placed> = (0..12)
            .map(|p| ("t".to_string(), p, vec![1, 2, 3]))
            .collect();
        let plan = generate(&parts, &[2, 3, 4], &no_rack).unwrap();
        let mut load = std::collections::BTreeMap::new();
        let mut leads = std::collections::BTreeMap::new();
        for p in &plan {
            let mut sorted = p.replicas.clone();
            sorted.sort();
            assert_eq!(sorted, [2, 3, 4], "{p:?}");
            for b in &p.replicas {
                *load.entry(*b).or_insert(0) += 1;
            }
            *leads.entry(p.replicas[0]).or_insert(0) += 1;
        }
        assert_eq!(load.values().copied().collect::<Vec<_>>(), [12, 12, 12]);
        assert_eq!(leads.values().copied().collect::<Vec<_>>(), [4, 4, 4]);
        // Already balanced: nothing moves.
        let parts: Vec<Placed> = vec![
            ("t".into(), 0, vec![1, 2]),
            ("t".into(), 1, vec![2, 3]),
            ("t".into(), 2, vec![3, 1]),
        ];
        let plan = generate(&parts, &[1, 2, 3], &no_rack).unwrap();
        let kept: Vec<Vec<i32>> = plan.iter().map(|p| p.replicas.clone()).collect();
        assert_eq!(kept, [vec![1, 2], vec![2, 3], vec![3, 1]]);
        // Racks: a new replica goes to a rack the partition does not use yet.
        let rack = |b: i32| Some(if b <= 2 { "a" } else { "b" }.to_string());
        let plan = generate(&[("t".into(), 0, vec![1, 9])], &[1, 2, 3], &rack).unwrap();
        assert_eq!(plan[0].replicas, [1, 3]);
        assert!(generate(&[("t".into(), 0, vec![1, 2, 3])], &[1, 2], &no_rack).is_err());
        assert!(generate(&parts, &[], &no_rack).is_err());
    }

    #[test]
    fn a_decommission_replaces_the_broker_in_place_on_the_least_loaded_other_rack() {
        let parts: Vec<Placed> = vec![
            ("t".into(), 0, vec![4, 1]),
            ("t".into(), 1, vec![1, 2]),
            ("t".into(), 2, vec![2, 4]),
        ];
        let mut load: std::collections::BTreeMap<i32, usize> =
            [(1, 2), (2, 2), (3, 0), (4, 2)].into();
        let no_rack = |_: i32| None;
        let plan = decommission_plan(&parts, 4, &[1, 2, 3], &no_rack, &mut load).unwrap();
        let got: Vec<(i32, Vec<i32>)> = plan
            .iter()
            .map(|p| (p.partition, p.replicas.clone()))
            .collect();
        // 3 is the least loaded, then (3 has 1) 3 again beats 1 and 2 with 2 each.
        assert_eq!(got, [(0, vec![3, 1]), (2, vec![2, 3])]);
        // Racks first: t-0 keeps 1 (rack a), so the rack-b broker wins despite its load.
        let rack = |b: i32| Some(if b == 3 { "b" } else { "a" }.to_string());
        let mut load: std::collections::BTreeMap<i32, usize> = [(2, 0), (3, 9)].into();
        let plan = decommission_plan(&parts[..1], 4, &[2, 3], &rack, &mut load).unwrap();
        assert_eq!(plan[0].replicas, [3, 1]);
        let e = decommission_plan(&parts[..1], 4, &[1], &no_rack, &mut load).unwrap_err();
        assert!(e.contains("no other broker"), "{e}");
    }

    #[test]
    fn verify_says_completed_in_progress_or_other_replicas() {
        let p = PlanPartition {
            topic: "t".into(),
            partition: 1,
            replicas: vec![2, 3],
            log_dirs: None,
        };
        assert!(verify_line(&p, Some((&[2, 3], false))).0);
        let (done, line) = verify_line(&p, Some((&[2, 3, 1], true)));
        assert!(!done && line.contains("still in progress"), "{line}");
        let (done, line) = verify_line(&p, Some((&[1, 2], false)));
        assert!(!done && line.contains("rather than [2, 3]"), "{line}");
        assert!(!verify_line(&p, None).0);
    }

    #[test]
    fn throttles_name_the_senders_and_the_added_replicas_of_moving_partitions() {
        let plan = vec![
            PlanPartition {
                topic: "t".into(),
                partition: 0,
                replicas: vec![2, 3, 4],
                log_dirs: None,
            },
            PlanPartition {
                topic: "t".into(),
                partition: 1,
                replicas: vec![2, 3, 1],
                log_dirs: None,
            },
            PlanPartition {
                topic: "u".into(),
                partition: 0,
                replicas: vec![9],
                log_dirs: None,
            },
        ];
        let current = |topic: &str, p: i32| match (topic, p) {
            ("t", 0) => Some(vec![1, 2, 3]),
            ("t", 1) => Some(vec![2, 3, 1]),
            _ => None,
        };
        let tp = throttle_plan(&plan, &current);
        assert_eq!(tp.topics.len(), 1, "t-1 does not move, u-0 is unknown");
        let (leaders, followers) = &tp.topics["t"];
        assert_eq!(leaders, &vec![(0, 1), (0, 2), (0, 3)]);
        assert_eq!(followers, &vec![(0, 4)]);
        assert_eq!(
            tp.brokers.iter().copied().collect::<Vec<_>>(),
            vec![1, 2, 3, 4]
        );
        assert_eq!(merged_throttle_list(None, &[(0, 4)]), "0:4");
        assert_eq!(
            merged_throttle_list(Some("1:2,0:4"), &[(0, 4), (0, 1)]),
            "0:1,0:4,1:2"
        );
        assert_eq!(merged_throttle_list(Some("*"), &[(0, 4)]), "*");
        assert_eq!(merged_throttle_list(Some("junk"), &[(0, 4)]), "0:4");
    }
}
