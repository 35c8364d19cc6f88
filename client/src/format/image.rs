//! `keelctl metadata image`: the current metadata image as a tree (text) or as one JSON
//! document.

use keel_metadata_log::records::LeaderRecoveryState;
use keel_metadata_log::{ConfigResource, MetadataImage, PartitionRegistration, TopicImage};
use serde_json::{Map, Value, json};

use super::ids;

/// A labelled tree node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// The text of this node.
    pub label: String,
    /// Child nodes, in display order.
    pub children: Vec<Node>,
}

impl Node {
    fn leaf(label: impl Into<String>) -> Node {
        Node {
            label: label.into(),
            children: vec![],
        }
    }

    fn branch(label: impl Into<String>, children: Vec<Node>) -> Node {
        Node {
            label: label.into(),
            children,
        }
    }
}

/// Renders a tree with box-drawing branches, one node per line.
pub fn render(root: &Node) -> String {
    fn walk(n: &Node, prefix: &str, out: &mut String) {
        for (i, c) in n.children.iter().enumerate() {
            let last = i + 1 == n.children.len();
            out.push_str(prefix);
            out.push_str(if last { "└── " } else { "├── " });
            out.push_str(&c.label);
            out.push('\n');
            let deeper = format!("{prefix}{}", if last { "    " } else { "│   " });
            walk(c, &deeper, out);
        }
    }
    let mut out = format!("{}\n", root.label);
    walk(root, "", &mut out);
    out
}

fn resource_label(r: &ConfigResource) -> String {
    match r {
        ConfigResource::Cluster => "cluster".into(),
        ConfigResource::Broker(b) => format!("broker {b}"),
        ConfigResource::Topic(t) => format!("topic {t}"),
    }
}

fn partition_label(id: i32, p: &PartitionRegistration) -> String {
    let mut s = format!(
        "{id}: leader={} leader_epoch={} partition_epoch={} replicas=[{}] isr=[{}]",
        p.leader,
        p.leader_epoch,
        p.partition_epoch,
        ids(&p.replicas),
        ids(&p.isr)
    );
    if p.leader_recovery_state == LeaderRecoveryState::Recovering {
        s.push_str(" leader_recovery_state=RECOVERING");
    }
    s
}

/// What `keelctl metadata image --topic NAME --broker ID` keeps (the default keeps
/// everything), like pointing `kafka-metadata-shell` at `/topics/NAME` or `/brokers/ID`:
/// - `topics`: only these topics and their configs (cluster and broker configs are left out);
/// - `broker`: only this broker, its configs, and the partitions it holds a replica of
///   (topics without such a partition are left out).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageFilter {
    /// Topic names to keep; empty = every topic.
    pub topics: Vec<String>,
    /// The one broker to keep.
    pub broker: Option<i32>,
}

impl ImageFilter {
    fn is_empty(&self) -> bool {
        self.topics.is_empty() && self.broker.is_none()
    }

    fn keep_broker(&self, id: i32) -> bool {
        self.broker.is_none_or(|b| b == id)
    }

    fn keep_topic(&self, name: &str) -> bool {
        self.topics.is_empty() || self.topics.iter().any(|t| t == name)
    }

    fn keep_partition(&self, p: &PartitionRegistration) -> bool {
        self.broker.is_none_or(|b| p.replicas.contains(&b))
    }

    /// The kept topics of `image` in name order, each with its kept partitions; a topic left
    /// without partitions by the broker filter is dropped.
    fn topics<'a>(
        &self,
        image: &'a MetadataImage,
    ) -> Vec<(&'a TopicImage, Vec<(i32, &'a PartitionRegistration)>)> {
        image
            .topics()
            .by_name
            .iter()
            .filter(|(name, _)| self.keep_topic(name))
            .filter_map(|(_, id)| image.topics().by_id.get(id))
            .filter_map(|t| {
                let parts: Vec<_> = t
                    .partitions
                    .iter()
                    .filter(|(_, p)| self.keep_partition(p))
                    .map(|(id, p)| (*id, &**p))
                    .collect();
                (self.broker.is_none() || !parts.is_empty()).then_some((&**t, parts))
            })
            .collect()
    }

    fn keep_config(&self, r: &ConfigResource, kept_topics: &[&str]) -> bool {
        match r {
            ConfigResource::Cluster => self.is_empty(),
            ConfigResource::Broker(id) => self.topics.is_empty() && self.keep_broker(*id),
            ConfigResource::Topic(t) => {
                (self.is_empty() || kept_topics.contains(&t.as_str())) && self.keep_topic(t)
            }
        }
    }
}

/// The ACLs of the image (#23), in their natural order, shown only with no filter (an ACL
/// belongs to no one broker; a topic filter would have to apply the pattern rules).
fn acls_kept<'a>(
    image: &'a MetadataImage,
    filter: &ImageFilter,
) -> Vec<(String, &'a keel_metadata_log::acl::AclBinding)> {
    if !filter.is_empty() {
        return vec![];
    }
    let mut v: Vec<_> = image
        .acls()
        .by_id()
        .iter()
        .map(|(id, b)| (id.to_string(), b.as_ref()))
        .collect();
    v.sort_by(|a, b| a.1.cmp(b.1));
    v
}

fn acl_label(b: &keel_metadata_log::acl::AclBinding) -> String {
    format!(
        "{} {}:{}:{} {} {} from {}",
        b.permission.name(),
        b.resource_type.name(),
        b.pattern_type.name(),
        b.resource_name,
        b.principal,
        b.operation.name(),
        b.host
    )
}

/// The image as a tree: cluster id, features, brokers, topics with partitions, configs,
/// ACLs, producer ids.
pub fn image_tree(image: &MetadataImage, filter: &ImageFilter) -> Node {
    let p = image.provenance();
    let features = image
        .features()
        .iter()
        .map(|(k, v)| Node::leaf(format!("{k}: {v}")))
        .collect();
    let brokers = image
        .brokers()
        .values()
        .filter(|b| filter.keep_broker(b.id))
        .map(|b| {
            let eps: Vec<String> = b
                .endpoints
                .iter()
                .map(|e| format!("{}:{}", e.host, e.port))
                .collect();
            let state = if b.fenced {
                // A finished controlled shutdown leaves the broker fenced too.
                "fenced"
            } else if b.in_controlled_shutdown {
                "shutting-down"
            } else {
                "unfenced"
            };
            Node::leaf(format!(
                "{}: epoch={} endpoints=[{}] rack={} {state}",
                b.id,
                b.epoch,
                eps.join(","),
                b.rack.as_deref().unwrap_or("-")
            ))
        })
        .collect();
    let kept = filter.topics(image);
    let kept_names: Vec<&str> = kept.iter().map(|(t, _)| t.name.as_str()).collect();
    let topics = kept
        .iter()
        .map(|(t, parts)| {
            Node::branch(
                format!("{} (id {})", t.name, t.id),
                parts
                    .iter()
                    .map(|(id, p)| Node::leaf(partition_label(*id, p)))
                    .collect(),
            )
        })
        .collect();
    let configs = image
        .configs()
        .iter()
        .filter(|(r, _)| filter.keep_config(r, &kept_names))
        .map(|(r, m)| {
            Node::branch(
                resource_label(r),
                m.iter()
                    .map(|(k, v)| Node::leaf(format!("{k}={v}")))
                    .collect(),
            )
        })
        .collect();
    Node::branch(
        format!("MetadataImage (offset {}, term {})", p.offset, p.term),
        vec![
            Node::leaf(format!("cluster_id: {}", image.cluster_id().unwrap_or("-"))),
            Node::branch("features", features),
            Node::branch("brokers", brokers),
            Node::branch("topics", topics),
            Node::branch("configs", configs),
        ]
        .into_iter()
        .chain(filter.is_empty().then(|| {
            Node::branch(
                "acls",
                acls_kept(image, filter)
                    .into_iter()
                    .map(|(id, b)| Node::leaf(format!("{}: {id}", acl_label(b))))
                    .collect(),
            )
        }))
        .chain(filter.is_empty().then(|| {
            Node::branch(
                "scram_users",
                scram_users(image)
                    .into_iter()
                    .map(|(user, creds)| {
                        let ms: Vec<String> = creds
                            .iter()
                            .map(|(m, i)| format!("{m} ({i} iterations)"))
                            .collect();
                        Node::leaf(format!("{user}: {}", ms.join(", ")))
                    })
                    .collect(),
            )
        }))
        .chain([Node::leaf(format!(
            "next_producer_id: {}",
            image.next_producer_id()
        ))])
        .collect(),
    )
}

/// Users with SCRAM credentials (#23): mechanisms and iterations, never keys or salts.
fn scram_users(
    image: &MetadataImage,
) -> std::collections::BTreeMap<&str, Vec<(keel_metadata_log::scram::Mechanism, u32)>> {
    keel_metadata_log::scram::users(image.scram_credentials())
}

/// The image as one JSON document.
pub fn image_json(image: &MetadataImage, filter: &ImageFilter) -> Value {
    let p = image.provenance();
    let brokers: Vec<Value> = image
        .brokers()
        .values()
        .filter(|b| filter.keep_broker(b.id))
        .map(|b| {
            json!({
                "id": b.id,
                "epoch": b.epoch,
                "incarnation_id": b.incarnation_id.to_string(),
                "endpoints": b.endpoints.iter().map(|e| format!("{}:{}", e.host, e.port)).collect::<Vec<_>>(),
                "rack": b.rack,
                "fenced": b.fenced,
                "in_controlled_shutdown": b.in_controlled_shutdown,
            })
        })
        .collect();
    let kept = filter.topics(image);
    let kept_names: Vec<&str> = kept.iter().map(|(t, _)| t.name.as_str()).collect();
    let topics: Vec<Value> = kept
        .iter()
        .map(|(t, parts)| {
            let partitions: Vec<Value> = parts
                .iter()
                .map(|(id, p)| {
                    json!({
                        "partition": id,
                        "leader": p.leader,
                        "leader_epoch": p.leader_epoch,
                        "partition_epoch": p.partition_epoch,
                        "replicas": p.replicas,
                        "isr": p.isr,
                        "leader_recovery_state": match p.leader_recovery_state {
                            LeaderRecoveryState::Recovered => "RECOVERED",
                            LeaderRecoveryState::Recovering => "RECOVERING",
                        },
                    })
                })
                .collect();
            json!({"name": t.name, "topic_id": t.id.to_string(), "partitions": partitions})
        })
        .collect();
    let mut configs = Map::new();
    for (r, m) in image
        .configs()
        .iter()
        .filter(|(r, _)| filter.keep_config(r, &kept_names))
    {
        configs.insert(resource_label(r), json!(**m));
    }
    json!({
        "offset": p.offset,
        "term": p.term,
        "cluster_id": image.cluster_id(),
        "features": image.features(),
        "brokers": brokers,
        "topics": topics,
        "configs": configs,
        "acls": acls_kept(image, filter).into_iter().map(|(id, b)| json!({
            "id": id,
            "resource_type": b.resource_type.name(),
            "resource_name": b.resource_name,
            "pattern_type": b.pattern_type.name(),
            "principal": b.principal,
            "host": b.host,
            "operation": b.operation.name(),
            "permission_type": b.permission.name(),
        })).collect::<Vec<_>>(),
        "scram_users": if filter.is_empty() { scram_users(image) } else { Default::default() }
            .into_iter()
            .map(|(user, creds)| json!({
                "user": user,
                "mechanisms": creds.iter().map(|(m, i)| json!({
                    "mechanism": m.name(), "iterations": i,
                })).collect::<Vec<_>>(),
            }))
            .collect::<Vec<_>>(),
        "next_producer_id": image.next_producer_id(),
    })
}

#[cfg(test)]
mod tests {
    use keel_metadata_log::Provenance;
    use keel_metadata_log::records::metadata_record::Record;
    use keel_metadata_log::records::{
        ClusterIdRecord, ConfigRecord, ConfigResourceType, MetadataRecord, PartitionRecord,
        RegisterBrokerRecord, TopicRecord,
    };

    use super::*;

    #[test]
    fn render_draws_branches() {
        let tree = Node::branch(
            "root",
            vec![
                Node::branch("a", vec![Node::leaf("a1"), Node::leaf("a2")]),
                Node::branch("b", vec![Node::leaf("b1")]),
            ],
        );
        assert_eq!(
            render(&tree),
            "root\n├── a\n│   ├── a1\n│   └── a2\n└── b\n    └── b1\n"
        );
    }

    #[test]
    fn image_tree_shows_topics_and_partitions() {
        let id = [1u8; 16];
        let recs = [
            Record::ClusterId(ClusterIdRecord {
                cluster_id: "c-1".into(),
            }),
            Record::Topic(TopicRecord {
                name: "orders".into(),
                topic_id: id.to_vec().into(),
            }),
            Record::Partition(PartitionRecord {
                topic_id: id.to_vec().into(),
                partition_id: 0,
                replicas: vec![1],
                isr: vec![1],
                leader: 1,
                ..Default::default()
            }),
            Record::AccessControlEntry({
                let mut r = keel_metadata_log::acl::AclBinding::new(
                    keel_metadata_log::acl::ResourceType::Topic,
                    "orders",
                    keel_metadata_log::acl::PatternType::Prefixed,
                    "User:alice",
                    "*",
                    keel_metadata_log::acl::Operation::Read,
                    keel_metadata_log::acl::Permission::Allow,
                )
                .unwrap()
                .to_record(Default::default());
                r.id = vec![2u8; 16].into();
                r
            }),
        ]
        .map(|r| MetadataRecord { record: Some(r) });
        let image = MetadataImage::empty()
            .with_records(Provenance { offset: 9, term: 1 }, recs.iter())
            .unwrap();
        let text = render(&image_tree(&image, &ImageFilter::default()));
        assert!(
            text.starts_with("MetadataImage (offset 9, term 1)\n├── cluster_id: c-1\n"),
            "{text}"
        );
        assert!(
            text.contains("│   └── orders (id 01010101-0101-0101-0101-010101010101)\n│       └── 0: leader=1 leader_epoch=0 partition_epoch=0 replicas=[1] isr=[1]\n"),
            "{text}"
        );
        assert!(
            text.contains("├── acls\n│   └── ALLOW TOPIC:PREFIXED:orders User:alice READ from *: 02020202-0202-0202-0202-020202020202\n"),
            "{text}"
        );
        let j = image_json(&image, &ImageFilter::default());
        assert_eq!(j["topics"][0]["partitions"][0]["isr"], json!([1]));
        assert_eq!(j["acls"][0]["principal"], json!("User:alice"));
        assert_eq!(j["acls"][0]["pattern_type"], json!("PREFIXED"));
        let only_topic = ImageFilter {
            topics: vec!["orders".into()],
            broker: None,
        };
        assert_eq!(image_json(&image, &only_topic)["acls"], json!([]));
        assert_eq!(j["offset"], json!(9));
    }

    #[test]
    fn filters_keep_the_named_topics_or_one_brokers_partitions() {
        let topic = |name: &str, id: u8| {
            Record::Topic(TopicRecord {
                name: name.into(),
                topic_id: vec![id; 16].into(),
            })
        };
        let partition = |id: u8, p: i32, replicas: Vec<i32>| {
            Record::Partition(PartitionRecord {
                topic_id: vec![id; 16].into(),
                partition_id: p,
                isr: replicas.clone(),
                leader: replicas[0],
                replicas,
                ..Default::default()
            })
        };
        let config = |ty: i32, name: &str| {
            Record::Config(ConfigRecord {
                resource_type: ty,
                resource_name: name.into(),
                name: "min.insync.replicas".into(),
                value: Some("2".into()),
            })
        };
        let mut recs = vec![
            topic("a", 1),
            partition(1, 0, vec![1, 2]),
            partition(1, 1, vec![2, 3]),
            topic("b", 2),
            partition(2, 0, vec![3, 1]),
            config(ConfigResourceType::Topic as i32, "a"),
            config(ConfigResourceType::Topic as i32, "b"),
            config(ConfigResourceType::Cluster as i32, ""),
        ];
        for id in 1..=3 {
            recs.push(Record::RegisterBroker(RegisterBrokerRecord {
                broker_id: id,
                incarnation_id: vec![id as u8; 16].into(),
                broker_epoch: 10 + id as i64,
                ..Default::default()
            }));
        }
        let recs: Vec<_> = recs
            .into_iter()
            .map(|r| MetadataRecord { record: Some(r) })
            .collect();
        let image = MetadataImage::empty()
            .with_records(Provenance { offset: 9, term: 1 }, recs.iter())
            .unwrap();
        let shape = |f: ImageFilter| {
            let j = image_json(&image, &f);
            let names = |key: &str, field: &str| -> Vec<String> {
                j[key]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v[field].to_string())
                    .collect()
            };
            let parts: Vec<String> = j["topics"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|t| {
                    let name = t["name"].as_str().unwrap().to_string();
                    t["partitions"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(move |p| format!("{name}-{}", p["partition"]))
                })
                .collect();
            let configs: Vec<String> = j["configs"].as_object().unwrap().keys().cloned().collect();
            (names("brokers", "id"), parts, configs)
        };
        let (brokers, parts, configs) = shape(ImageFilter::default());
        assert_eq!(brokers, ["1", "2", "3"]);
        assert_eq!(parts, ["a-0", "a-1", "b-0"]);
        assert_eq!(configs.len(), 3, "{configs:?}");
        let (brokers, parts, configs) = shape(ImageFilter {
            topics: vec!["b".into()],
            broker: None,
        });
        assert_eq!(brokers, ["1", "2", "3"]);
        assert_eq!(parts, ["b-0"]);
        assert_eq!(
            configs,
            [resource_label(&ConfigResource::Topic("b".into()))]
        );
        let (brokers, parts, configs) = shape(ImageFilter {
            topics: vec![],
            broker: Some(2),
        });
        assert_eq!(brokers, ["2"]);
        assert_eq!(parts, ["a-0", "a-1"]);
        assert_eq!(
            configs,
            [resource_label(&ConfigResource::Topic("a".into()))]
        );
        let tree = render(&image_tree(
            &image,
            &ImageFilter {
                topics: vec!["a".into()],
                broker: Some(3),
            },
        ));
        assert!(tree.contains("── 1: leader=2 "), "{tree}");
        assert!(!tree.contains("── 0: leader=1 "), "{tree}");
    }
}
