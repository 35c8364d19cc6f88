//! Replication logic of one partition on a broker (being written): roles, HW, ISR, acks.
