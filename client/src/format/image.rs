//! `keelctl metadata image`: the current metadata image as a tree (text) or as one JSON
//! document.

use keel_metadata_log::records::LeaderRecoveryState;
use keel_metadata_log::{ConfigResource, MetadataImage, PartitionRegistration};
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

/// The image as a tree: cluster id, features, brokers, topics with partitions, configs,
/// producer ids.
pub fn image_tree(image: &MetadataImage) -> Node {
    let p = image.provenance();
    let features = image
        .features()
        .iter()
        .map(|(k, v)| Node::leaf(format!("{k}: {v}")))
        .collect();
    let brokers = image
        .brokers()
        .values()
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
    let topics = image
        .topics()
        .by_name
        .iter()
        .filter_map(|(_, id)| image.topics().by_id.get(id))
        .map(|t| {
            Node::branch(
                format!("{} (id {})", t.name, t.id),
                t.partitions
                    .iter()
                    .map(|(id, p)| Node::leaf(partition_label(*id, p)))
                    .collect(),
            )
        })
        .collect();
    let configs = image
        .configs()
        .iter()
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
            Node::leaf(format!("next_producer_id: {}", image.next_producer_id())),
        ],
    )
}

/// The image as one JSON document.
pub fn image_json(image: &MetadataImage) -> Value {
    let p = image.provenance();
    let brokers: Vec<Value> = image
        .brokers()
        .values()
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
    let topics: Vec<Value> = image
        .topics()
        .by_name
        .iter()
        .filter_map(|(_, id)| image.topics().by_id.get(id))
        .map(|t| {
            let partitions: Vec<Value> = t
                .partitions
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
    for (r, m) in image.configs() {
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
        "next_producer_id": image.next_producer_id(),
    })
}

#[cfg(test)]
mod tests {
    use keel_metadata_log::Provenance;
    use keel_metadata_log::records::metadata_record::Record;
    use keel_metadata_log::records::{
        ClusterIdRecord, MetadataRecord, PartitionRecord, TopicRecord,
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
        ]
        .map(|r| MetadataRecord { record: Some(r) });
        let image = MetadataImage::empty()
            .with_records(Provenance { offset: 9, term: 1 }, recs.iter())
            .unwrap();
        let text = render(&image_tree(&image));
        assert!(
            text.starts_with("MetadataImage (offset 9, term 1)\n├── cluster_id: c-1\n"),
            "{text}"
        );
        assert!(
            text.contains("│   └── orders (id 01010101-0101-0101-0101-010101010101)\n│       └── 0: leader=1 leader_epoch=0 partition_epoch=0 replicas=[1] isr=[1]\n"),
            "{text}"
        );
        let j = image_json(&image);
        assert_eq!(j["topics"][0]["partitions"][0]["isr"], json!([1]));
        assert_eq!(j["offset"], json!(9));
    }
}
