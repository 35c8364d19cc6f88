//! Tests of the pure controller logic. Each test drives a [`common::Cluster`] whose image
//! changes only by replaying the records the logic returns (`MetadataImage::with_records`),
//! checking the image invariants after every batch.

#![allow(dead_code)]

mod alter_partition;
mod brokers;
mod change_log;
pub(crate) mod common;
mod configs;
mod create_partitions;
mod election;
mod random_ops;
mod topics;
